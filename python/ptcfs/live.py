"""Live resharding (docs/PYTHON.md "Live resharding", docs/ARCHITECTURE.md "Live resharding"): a
running job moves from one parallel config to another without writing a checkpoint; every new
rank receives the slices it lacks straight from the old ranks that hold them.

``reshard_plan(ptc, frm, to)`` is ptcfs's own plan (libptcfs_client's ``ptcfs_live_plan``: the cluster plan
with one node per global rank, so the bytes that cross are the minimum and DP replicas share the
sending). ``reshard(state, ptc, frm, to, comm)`` carries it out on this rank:

* a move within the rank is one copy, source region to destination region;
* a move between ranks is cut into chunks of at most ``chunk_bytes`` along the region's first
  dimension (one index of it at least); the source packs each chunk (strided in the old slice)
  into a contiguous staging tensor, sends it, and the destination unpacks it into the new slice;
  a chunk that is whole rows of a slice is contiguous there, and is sent from the old slice or
  received into the new one in place, without a staging copy (``staging_peak`` counts only the
  copies made);
* chunks go in rounds: every rank computes the same rounds from the plan, in plan order, a new
  round starting when a chunk would take some rank's staging (bytes packed plus bytes being
  received) past ``staging_bytes``. In a round every rank posts all its sends and receives at
  once (``comm.exchange``, grouped and non-blocking) and waits for them; since every rank goes
  through the same rounds in the same order and posts a round's operations before waiting on
  any, no rank waits on an operation its peer has not posted: the order cannot deadlock. A chunk
  larger than the budget by itself (one index of a huge region) is a round of its own.

A communicator is any object with ``rank``, ``device`` and ``exchange(sends, recvs)``, where each
is a list of ``(peer, tag, tensor)`` and the call returns when all are done. ``TorchComm`` is one
over ``torch.distributed`` with gloo (CPU tensors; what the CPU tests run);
``NcclComm`` is one over NCCL itself through libptcfs_client, for CUDA tensors (the unique id made
by rank 0 and broadcast over torch.distributed, or given).
"""

import ctypes
import json
import os
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native
from .control import format_parallelism
from . import dtypes as _dt
from .errors import Error, invalid

__all__ = ["reshard_plan", "plan", "reshard", "reshard_dtensors", "rounds", "run_moves", "TorchComm", "NcclComm", "nccl_unique_id", "config_text"]

_ERRLEN = _native.ERRLEN
Config = Union[str, Tuple[int, int, int], Dict[str, int]]


# 'tp=2,pp=2,dp=1' from that text, a (tp, pp, dp) tuple or a {"tp", "pp", "dp"} dict.
config_text = format_parallelism


def _library():
    lib = _native.load()
    if lib is None:
        raise Error("unavailable", "live plans need libptcfs_client: " + _native.load_error())
    return lib


def reshard_plan(ptc: Union[dict, str], frm: Config, to: Config) -> dict:
    """The live plan from config ``frm`` to ``to`` for the PTC (ptc.json as a dict or its text):
    {"from", "to", "bytes_min", "ranks": [{"rank", "old_shard", "new_shard", "new_shapes",
    "min", "sent", "received"}], "moves": [{"tensor", "src_rank", "dst_rank", "src", "dst",
    "bytes"}]}, regions as {"start", "shape"} boxes of the local slices. Raises Error
    (invalid_argument) for a config that does not fit the PTC."""
    lib = _library()
    text = ptc if isinstance(ptc, str) else json.dumps(ptc)
    err = ctypes.create_string_buffer(_ERRLEN)
    p = lib.ptcfs_live_plan(text.encode(), config_text(frm).encode(), config_text(to).encode(), err, _ERRLEN)
    if not p:
        raise _native.error(err)
    try:
        return json.loads(ctypes.string_at(p).decode())
    finally:
        lib.ptcfs_free(p)


# The name it had before ptcfs.plan (the planner) took the same word; kept for existing callers.
plan = reshard_plan


def _index(box: dict, lo: int = 0, hi: Optional[int] = None):
    """The slices of a {"start", "shape"} box; rows [lo, hi) of its first dimension."""
    start, shape = box["start"], box["shape"]
    if not shape:
        return ()
    hi = shape[0] if hi is None else hi
    return (slice(start[0] + lo, start[0] + hi),) + tuple(slice(s, s + n) for s, n in zip(start[1:], shape[1:]))


def _chunk_shape(box: dict, lo: int, hi: int) -> List[int]:
    return [hi - lo] + list(box["shape"][1:]) if box["shape"] else []


def rounds(p: dict, chunk_bytes: int = 16 << 20, staging_bytes: int = 64 << 20) -> List[List[dict]]:
    """The chunks of the plan's moves between ranks, in rounds (module docstring): each chunk
    {"move": index in p["moves"], "lo", "hi": rows of the region's first dimension, "bytes"}.
    The same on every rank."""
    if chunk_bytes < 1 or staging_bytes < 1:
        raise invalid(f"chunk_bytes {chunk_bytes} and staging_bytes {staging_bytes} must be positive")
    out: List[List[dict]] = []
    cur: List[dict] = []
    use: Dict[int, int] = {}
    for i, m in enumerate(p["moves"]):
        if m["src_rank"] == m["dst_rank"] or m["bytes"] == 0:
            continue
        shape = m["dst"]["shape"]
        rows = shape[0] if shape else 1
        row_bytes = m["bytes"] // rows
        step = max(1, chunk_bytes // row_bytes)
        for lo in range(0, rows, step):
            hi = min(rows, lo + step)
            b = (hi - lo) * row_bytes
            ends = (m["src_rank"], m["dst_rank"])
            if cur and any(use.get(r, 0) + b > staging_bytes for r in ends):
                out.append(cur)
                cur, use = [], {}
            cur.append({"move": i, "lo": lo, "hi": hi, "bytes": b})
            for r in ends:
                use[r] = use.get(r, 0) + b
    if cur:
        out.append(cur)
    return out


def reshard(state: Dict[str, Any], ptc: Union[dict, str], frm: Config, to: Config, comm,
            live_plan: Optional[dict] = None, chunk_bytes: int = 16 << 20,
            staging_bytes: int = 64 << 20) -> Tuple[Dict[str, Any], dict]:
    """This rank's part of a live reshard: ``state`` is its {name: tensor} of local slices at
    ``frm`` (empty on a rank past frm's world), ``comm`` a communicator (module docstring) whose
    ranks are the global ranks of both configs. Every rank of the larger world must call it with
    the same arguments but its state. Returns (the new {name: tensor} at ``to``, empty past to's
    world; padding zero) and {"sent", "received", "min", "plan_sent", "plan_received",
    "rounds", "staging_peak"} in bytes for this rank. ``live_plan``: a plan already computed."""
    import torch

    me = comm.rank
    # Before a byte moves, every rank learns that all agree on (ptc, from, to), that every rank has
    # a plan and that every state holds its slices as the PTC says: else each raises, naming the
    # rank at fault (no hang on the others, no wrong bytes on another rank). Whatever fails here
    # fails after that exchange, never before it.
    p, problem, ptc_d, digest = None, "", None, b"\0" * 32
    try:
        ptc_d = json.loads(ptc) if isinstance(ptc, str) else ptc
        digest = _digest(ptc_d, frm, to)
        p = live_plan if live_plan is not None else reshard_plan(ptc, frm, to)
        if me >= len(p["ranks"]):
            problem = f"rank {me} is outside both worlds of {p['from']} -> {p['to']}"
        else:
            problem = _check_state(state, ptc_d, frm, me)
    except Error as e:
        problem = f"rank {me}: {e.message}"
    except Exception as e:  # noqa: BLE001 (a bad argument: the other ranks must hear of it)
        problem = f"rank {me}: {type(e).__name__}: {e}"
    _agree(comm, digest, problem, _world(frm, to))
    mine = p["ranks"][me]
    new_state: Dict[str, Any] = {}
    for name, shape in mine["new_shapes"].items():  # the PTC's dtype, the plan's shape: nothing the peers say
        new_state[name] = torch.zeros(shape, dtype=_dt.torch_dtype(ptc_d["tensors"][name]["dtype"]),
                                      device=comm.device)

    def source(name: str):
        t = state.get(name)
        if t is None:
            raise invalid(f"rank {me} ({mine['old_shard']}) has no {name} to send")
        return t

    sent, received, peak, nrounds = run_moves(p, source, new_state.__getitem__, comm, chunk_bytes, staging_bytes)
    stats = {"sent": sent, "received": received, "min": mine["min"], "plan_sent": mine["sent"],
             "plan_received": mine["received"], "rounds": nrounds, "staging_peak": peak}
    return new_state, stats


def run_moves(p: dict, src_of, dst_of, comm, chunk_bytes: int = 16 << 20,
              staging_bytes: int = 64 << 20) -> Tuple[int, int, int, int]:
    """Carries out this rank's part of the moves of plan ``p`` (``p["moves"]``: {"tensor",
    "src_rank", "dst_rank", "src", "dst", "bytes"}, regions as {"start", "shape"} boxes of the local
    tensors ``src_of(tensor)`` on the source rank and ``dst_of(tensor)`` on the destination): moves
    within the rank are one copy each, the others go in the rounds of ``rounds()`` (module
    docstring). Every rank of the plan calls it with the same plan. Returns (bytes sent, bytes
    received, staging peak, rounds)."""
    import torch

    me = comm.rank
    for m in p["moves"]:  # within the rank: one copy each
        if m["src_rank"] == me and m["dst_rank"] == me and m["bytes"]:
            dst_of(m["tensor"])[_index(m["dst"])] = src_of(m["tensor"])[_index(m["src"])]

    sent = received = peak = 0
    rs = rounds(p, chunk_bytes, staging_bytes)
    for rnd in rs:
        sends, recvs, unpack = [], [], []
        staged = 0
        for tag, c in enumerate(rnd):
            m = p["moves"][c["move"]]
            if m["src_rank"] == me:
                view = src_of(m["tensor"])[_index(m["src"], c["lo"], c["hi"])]
                if not view.is_contiguous():  # pack; rows of the old slice go as they lie
                    view = view.contiguous()
                    staged += c["bytes"]
                sends.append((m["dst_rank"], tag, view))
                sent += c["bytes"]
            elif m["dst_rank"] == me:
                dst = dst_of(m["tensor"])
                idx = _index(m["dst"], c["lo"], c["hi"])
                view = dst[idx]
                if view.is_contiguous():  # rows of the new slice: received in place, no unpack
                    recvs.append((m["src_rank"], tag, view))
                else:
                    buf = torch.empty(_chunk_shape(m["dst"], c["lo"], c["hi"]), dtype=dst.dtype, device=dst.device)
                    recvs.append((m["src_rank"], tag, buf))
                    unpack.append((dst, idx, buf))
                    staged += c["bytes"]
                received += c["bytes"]
        peak = max(peak, staged)
        if sends or recvs:
            comm.exchange(sends, recvs)
        for dst, idx, buf in unpack:
            dst[idx] = buf
    return sent, received, peak, len(rs)


def _world(frm: Config, to: Config) -> int:
    """The ranks that take part: the larger of the two configs' worlds (every rank of it calls
    reshard; a process group may hold more)."""
    sizes = []
    for c in (frm, to):
        try:
            tp, pp, dp = (int(x.split("=")[1]) for x in config_text(c).split(","))
            sizes.append(tp * pp * dp)
        except Exception:  # noqa: BLE001 (a config that does not parse: its rank reports it)
            sizes.append(1)
    return max(sizes)


def _digest(ptc: dict, frm: Config, to: Config) -> bytes:
    import hashlib
    text = json.dumps(ptc, sort_keys=True) + "|" + config_text(frm) + "|" + config_text(to)
    return hashlib.sha256(text.encode()).digest()


def _check_state(state: Dict[str, Any], ptc: dict, frm: Config, rank: int) -> str:
    """"" when `state` holds exactly this rank's slices at `frm` (names, dtypes, shapes), else what
    is wrong, naming the tensor."""
    from . import ptc as _ptc
    tp, pp, dp = (int(x.split("=")[1]) for x in config_text(frm).split(","))
    if rank >= tp * pp * dp:
        return "" if not state else f"rank {rank} is past {config_text(frm)}'s world but holds {len(state)} tensors"
    t, p = rank % tp, rank // (tp * dp)
    want = _ptc.shard_tensors(_ptc.with_parallelism(ptc, tp, pp, dp), t, p)
    missing = sorted(set(want) - set(state))
    if missing:
        return f"rank {rank} (tp{t}-pp{p} of {config_text(frm)}) lacks tensor '{missing[0]}'" + (
            f" and {len(missing) - 1} more" if len(missing) > 1 else "")
    for name, (dtype, shape) in sorted(want.items()):
        x = state[name]
        if x.dtype != _dt.torch_dtype(dtype) or list(x.shape) != list(shape):
            return (f"rank {rank} (tp{t}-pp{p} of {config_text(frm)}): tensor '{name}' is {x.dtype} "
                    f"{list(x.shape)}, its slice is {_dt.torch_dtype(dtype)} {list(shape)}")
    return ""


_HELLO = 32 + 1 + 2 + 400  # digest, failed, message length, message


def _agree(comm, digest: bytes, problem: str, world: int) -> None:
    """One round in which every rank of `world` sends every other its digest of (ptc, from, to) and
    the result of its own checks; every rank then raises the same kind of error when any digest
    differs from its own or any rank's check failed, naming those ranks."""
    import torch
    me = comm.rank
    if me >= world:  # not one of the ranks that reshard: none of them waits for this one
        raise invalid(f"live reshard: {problem or f'rank {me} is outside both worlds'}")
    msg = problem.encode()[:400]
    hello = bytes(digest) + bytes([1 if problem else 0]) + len(msg).to_bytes(2, "little") + msg
    hello = hello.ljust(_HELLO, b"\0")
    peers = [r for r in range(world) if r != me]
    if peers:
        mine = torch.tensor(list(hello), dtype=torch.uint8, device=comm.device)
        bufs = {r: torch.zeros(_HELLO, dtype=torch.uint8, device=comm.device) for r in peers}
        comm.exchange([(r, 0, mine) for r in peers], [(r, 0, bufs[r]) for r in peers])
        got = {r: bytes(bufs[r].cpu().tolist()) for r in peers}
    else:
        got = {}
    got[me] = hello
    differ = sorted(r for r, h in got.items() if h[:32] != digest)
    if differ:
        raise invalid(f"live reshard: rank{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} "
                      f"called with another PTC, from or to than rank {me} (nothing was sent)")
    failed = sorted(r for r, h in got.items() if h[32])
    if failed:
        first = got[failed[0]]
        why = first[35:35 + int.from_bytes(first[33:35], "little")].decode(errors="replace")
        raise invalid(f"live reshard: the state of rank{'s' if len(failed) > 1 else ''} "
                      f"{', '.join(map(str, failed))} does not fit the PTC (nothing was sent): {why}")


class TorchComm:
    """Grouped point-to-point over torch.distributed's default group (or ``group``): with gloo
    for CPU tensors. Peers are global ranks."""

    def __init__(self, group=None, device: str = "cpu"):
        import torch
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.rank = dist.get_rank()
        self.world = dist.get_world_size(group)
        self.device = torch.device(device)

    def exchange(self, sends: List[Tuple[int, int, Any]], recvs: List[Tuple[int, int, Any]]) -> None:
        """Posts every send and receive at once (batch_isend_irecv), then waits for them all."""
        d = self._dist
        ops = [d.P2POp(d.isend, t, peer, self.group, tag) for peer, tag, t in sends]
        ops += [d.P2POp(d.irecv, t, peer, self.group, tag) for peer, tag, t in recvs]
        for work in d.batch_isend_irecv(ops):
            work.wait()


def _nccl_library():
    """libptcfs_client with its NCCL entries typed; NCCL itself is found as the C side documents,
    and also in the nvidia-nccl wheel that pip's torch depends on, when the variable is unset."""
    lib = _library()
    if not _native.has(lib, "ptcfs_nccl_open"):
        raise Error("unavailable", "this libptcfs_client has no NCCL entries (rebuild it)")
    if not os.environ.get("PTCFS_NCCL_LIBRARY"):
        wheel = _wheel_nccl()
        if wheel:
            os.environ["PTCFS_NCCL_LIBRARY"] = wheel
    return lib


def _wheel_nccl() -> str:
    """libnccl.so.2 of the nvidia-nccl wheel, when there is one ("" otherwise)."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(base, "nccl", "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return ""


_P2POp = _native.P2POp


def nccl_unique_id() -> bytes:
    """A fresh NCCL unique id (128 bytes): one rank makes it, every rank opens ``NcclComm`` with it."""
    lib = _nccl_library()
    out = ctypes.create_string_buffer(128)
    err = ctypes.create_string_buffer(_ERRLEN)
    if lib.ptcfs_nccl_unique_id(out, err, _ERRLEN) != 0:
        raise _native.error(err)
    return out.raw


class NcclComm:
    """Grouped point-to-point over NCCL itself (libptcfs_client's ``ptcfs_nccl_*``, which loads
    libnccl.so.2 at run time), for CUDA tensors on one GPU per rank. Each round is one NCCL group
    (``ncclGroupStart``, a send or receive per chunk, ``ncclGroupEnd``) on the current stream, and
    ``exchange`` returns when it is done. NCCL ignores tags and pairs a pair's messages in the order
    both list them, which the plan's order gives. A rank may send to itself, so one GPU can play
    every rank of a plan (which torch.distributed refuses).

    ``rank``, ``world``: this process's rank in the communicator and its size (default: its rank
    and size in torch.distributed's ``group``, the default group when None). ``unique_id``: the communicator's id (``nccl_unique_id()``); default:
    made here when the world is 1, else made by rank 0 and broadcast over torch.distributed
    (``group``, any backend). ``timeout_s``: a round not done by then aborts the communicator
    (Error deadline_exceeded); 0: no limit. Close it with ``close()`` or a ``with`` block."""

    def __init__(self, rank: Optional[int] = None, world: Optional[int] = None, device: Optional[str] = None,
                 unique_id: Optional[bytes] = None, group=None, timeout_s: float = 300.0):
        import torch

        if not torch.cuda.is_available():
            raise Error("unavailable", "NcclComm needs CUDA: torch sees no GPU in this process")
        self._h = None
        self.device = torch.device(device or f"cuda:{torch.cuda.current_device()}")
        if self.device.type != "cuda":
            raise invalid(f"NcclComm needs a cuda device, not {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if rank is None or world is None:
            import torch.distributed as dist
            if not dist.is_initialized():
                raise invalid("NcclComm needs rank and world, or an initialized torch.distributed")
            rank = dist.get_rank(group) if rank is None else rank
            world = dist.get_world_size(group) if world is None else world
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        if unique_id is None:
            if world == 1:
                unique_id = nccl_unique_id()
            else:
                import torch.distributed as dist
                box: List[Any] = [None]
                if rank == 0:  # its error goes to every rank, which would otherwise wait for the id
                    try:
                        box[0] = nccl_unique_id()
                    except Error as e:
                        box[0] = (e.code, e.message)
                src = 0 if group is None else dist.get_global_rank(group, 0)
                dist.broadcast_object_list(box, src=src, group=group)
                if isinstance(box[0], tuple):
                    raise Error(box[0][0], f"rank 0 could not make the NCCL unique id: {box[0][1]}")
                unique_id = box[0]
        if len(unique_id) != 128:
            raise invalid(f"an NCCL unique id has 128 bytes, not {len(unique_id)}")
        lib = _nccl_library()
        err = ctypes.create_string_buffer(_ERRLEN)
        h = lib.ptcfs_nccl_open(rank, world, unique_id, self.device.index, err, _ERRLEN)
        if not h:
            raise _native.error(err)
        self._h, self._lib = h, lib

    def exchange(self, sends: List[Tuple[int, int, Any]], recvs: List[Tuple[int, int, Any]]) -> None:
        """Posts every send and receive as one NCCL group, then waits for them all."""
        import torch

        if self._h is None:
            raise Error("failed_precondition", "this NcclComm is closed")
        both = [(peer, 1, t) for peer, _tag, t in sends] + [(peer, 0, t) for peer, _tag, t in recvs]
        ops = (_P2POp * max(1, len(both)))()
        for i, (peer, send, t) in enumerate(both):
            if t.device != self.device or not t.is_contiguous():
                raise invalid(f"NcclComm moves contiguous tensors on {self.device}, not one on {t.device}")
            ops[i] = _P2POp(peer, send, t.data_ptr(), t.numel() * t.element_size())
        stream = torch.cuda.current_stream(self.device).cuda_stream
        err = ctypes.create_string_buffer(_ERRLEN)
        if self._lib.ptcfs_nccl_exchange(self._h, ops, len(both), stream, int(self.timeout_s * 1000), err,
                                         _ERRLEN) != 0:
            raise _native.error(err)

    def close(self) -> None:
        if self._h is not None:
            self._lib.ptcfs_nccl_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            self.close()


def reshard_dtensors(state: dict, target: dict, comm=None, group=None, chunk_bytes: int = 16 << 20,
                     staging_bytes: int = 64 << 20):
    """A live mesh change of DTensor state: ptcfs.live_dtensor.reshard_dtensors (docs/PYTHON.md
    "Live mesh change for DTensors")."""
    from .live_dtensor import reshard_dtensors as run
    return run(state, target, comm=comm, group=group, chunk_bytes=chunk_bytes, staging_bytes=staging_bytes)
