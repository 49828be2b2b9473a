"""A torchft CheckpointTransport backed by ptcfs (docs/PYTHON.md "torchft recovery through ptcfs").

torchft heals a replica group that falls behind by copying a healthy group's state to it. With
``PtcfsTransport`` the healthy side publishes that state as a ptcfs step, ``<prefix><step>-r<rank>`` of a
job (rank: the rank in its replica group, which torchft heals from the same rank of a healthy
group), saved into its node's mount; the recovering side reads the step through its own node's
mount. On a cluster the daemon pulls from the node that saved it only what the reader asks for,
each reply checked against the store's XXH3 (docs/FORMATS.md), and a step stays after the heal, so
that a later heal of the same step reads it again without a second send. When the step does not
commit within the timeout (the sender died mid-transfer) the recovering side falls back to the
newest committed state of the same rank, saying so in ``last_recv``.

    from ptcfs.torchft import PtcfsTransport
    transport = PtcfsTransport(mount="/mnt/ptcfs", job="train", daemon="127.0.0.1:7070")
    manager = torchft.Manager(..., checkpoint_transport=transport)

Without a template, a state dict is tensors and JSON values (dicts with string or integer keys,
lists, tuples, numbers, strings, booleans, None), as models' and optimizers' state dicts are.
Tensors are stored whole, one per ptc.json entry named by its path in the state dict; the structure
and the other values are the U8 tensor ``__torchft__/state`` (JSON: no pickle is ever loaded).
Anything else is refused, naming its path, before a byte is written. With a template (DCP mode) the
group's ranks publish one step with stock DCP through ptcfs.dcp, and each recovering rank loads
into its own state dict: DTensors at its own placements, only its shards read.
"""

from __future__ import annotations

import json
import math
import os
import time
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import checkpoint as _ckpt
from . import dtypes as _dt
from .control import Client
from .elastic import wait_committed
from .errors import Error, invalid

try:  # torchft's interface when it is installed; the transport works without it (its own tests).
    from torchft.checkpointing.transport import CheckpointTransport as _Base
except ImportError:  # pragma: no cover - torchft is in the project's environment
    _Base = object

STATE = "__torchft__/state"


def _key(k: Any, where: str) -> Tuple[str, str]:
    if isinstance(k, bool) or not isinstance(k, (str, int)):
        raise invalid(f"{where}: a key of type {type(k).__name__} (ptcfs stores string and integer keys)")
    return ("i", str(k)) if isinstance(k, int) else ("s", k)


def _component(k: str) -> str:
    """A path component of a tensor name: '/' and '%' escaped, never empty, '.' or '..'."""
    c = k.replace("%", "%25").replace("/", "%2F")
    return c if c not in ("", ".", "..") else "%" + c.encode().hex()


def _flatten(obj: Any, path: List[str], tensors: Dict[str, Any], where: str) -> Any:
    import torch
    if isinstance(obj, torch.Tensor):
        name = "/".join(path) or "%root"
        t = obj.detach().cpu().contiguous()
        node = {"t": name}
        if t.dim() == 0:  # a scalar (an optimizer's step) is stored as one element
            node["s"] = []
            t = t.reshape(1)
        tensors[name] = t
        return node
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            kind, text = _key(k, where)
            # A string key as itself (escaped), an integer one as %i<n>: no two keys make one name.
            items.append([kind, text, _flatten(v, path + [_component(text) if kind == "s" else "%i" + text],
                                               tensors, where)])
        return {"d": items}
    if isinstance(obj, (list, tuple)):
        return {"l" if isinstance(obj, list) else "u":
                [_flatten(v, path + [f"%{i}"], tensors, where) for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, (bool, int, str)):
        return {"v": obj}
    if isinstance(obj, float):
        return {"f": repr(obj)} if not math.isfinite(obj) else {"v": obj}
    raise invalid(f"{where}: the state dict holds a {type(obj).__name__} at {'/'.join(path) or 'its root'} "
                  "(ptcfs stores tensors and JSON values)")


def _unflatten(node: Any, tensors: Dict[str, Any]) -> Any:
    if "t" in node:
        t = tensors[node["t"]]
        return t.reshape(node["s"]) if "s" in node else t
    if "d" in node:
        return {(int(k) if kind == "i" else k): _unflatten(v, tensors) for kind, k, v in node["d"]}
    if "l" in node:
        return [_unflatten(v, tensors) for v in node["l"]]
    if "u" in node:
        return tuple(_unflatten(v, tensors) for v in node["u"])
    if "f" in node:
        return float(node["f"])
    return node["v"]


def state_to_step(state_dict: Any, where: str) -> Tuple[dict, Dict[str, Any]]:
    """(ptc.json, {name: array}) of a state dict: every tensor whole, unsharded (tp=pp=dp=1), and
    the structure as the U8 tensor __torchft__/state."""
    tensors: Dict[str, Any] = {}
    skeleton = _flatten(state_dict, [], tensors, where)
    arrays, specs = {}, {}
    for name, t in tensors.items():
        arr, dtype = _dt.torch_to_numpy(t)
        dtype = dtype or _dt.safetensors_dtype_of(arr)
        if dtype is None:
            raise invalid(f"{where}: tensor {name} has dtype {t.dtype}, which ptcfs does not store")
        arrays[name] = arr
        specs[name] = {"dtype": dtype, "shape": list(arr.shape)}
    text = json.dumps(skeleton, separators=(",", ":")).encode()
    arrays[STATE] = np.frombuffer(text, dtype=np.uint8)
    specs[STATE] = {"dtype": "U8", "shape": [len(text)]}
    return {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0, "tensors": specs}, arrays


def step_to_state(step_path: str) -> Tuple[Any, int]:
    """The state dict a step saved by state_to_step holds, and its tensors' bytes. Each tensor is
    read whole through the mount (a copy: the caller may mutate it)."""
    ptc = _ckpt.load_ptc(step_path)
    if STATE not in ptc["tensors"]:
        raise invalid(f"{step_path}: not a torchft state (no {STATE})")
    try:
        skeleton = json.loads(bytes(_ckpt.load_full(step_path, STATE, ptc)))
    except ValueError as e:
        raise invalid(f"{step_path}: {STATE} is not the JSON of a state: {e}") from None
    tensors, nbytes = {}, 0
    for name, spec in ptc["tensors"].items():
        if name == STATE:
            continue
        arr = np.array(_ckpt.load_full(step_path, name, ptc))  # out of the mapping
        nbytes += arr.nbytes
        tensors[name] = _dt.to_torch(arr, spec["dtype"])
    try:
        return _unflatten(skeleton, tensors), nbytes
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise invalid(f"{step_path}: {STATE} does not describe this step's tensors ({type(e).__name__}: {e})") from None


def _local_bytes(state: Any) -> int:
    """The bytes of the tensors this rank holds of a state dict (a DTensor's local shard)."""
    import torch
    from torch.distributed.tensor import DTensor
    if isinstance(state, DTensor):
        return state.to_local().numel() * state.element_size()
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(_local_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_local_bytes(v) for v in state)
    return 0


class PtcfsTransport(_Base):
    """torchft's CheckpointTransport through ptcfs. `mount`: this node's mount; `job`: the job whose
    steps hold the published states (``<prefix><step>``); `daemon`, `secret_file`: this node's
    daemon (ptcfs.Client's defaults otherwise). `fallback`: fall back to the newest committed
    state when the asked one does not commit in time (else raise). `rank`: this process's rank in
    its replica group (the Manager's `rank`).

    `template` (DCP mode): a function returning this rank's own state dict, in torchft's shape
    (``{"user": {"default": <the Manager's state_dict()>}, "torchft": {"step": 0,
    "batches_committed": 0}}``), DTensors on its own mesh included. The group's ranks then publish
    one step together with stock DCP through ptcfs.dcp (`group`: the replica group's process group,
    default torch.distributed's), and a recovering rank loads into its template with stock dcp.load:
    it reads only its own shards, at its own placements, whatever the sender's were."""

    def __init__(self, mount: str, job: str, daemon: Optional[str] = None, secret_file: Optional[str] = None,
                 prefix: str = "torchft-", fallback: bool = True, rank: int = 0,
                 template: Optional[Callable[[], Any]] = None, group: Any = None):
        self.mount, self.job, self.prefix, self.fallback, self.rank = mount, job, prefix, fallback, int(rank)
        self.template, self.group = template, group
        self.daemon, self.secret_file = daemon, secret_file
        self.last_send: Optional[dict] = None
        self.last_recv: Optional[dict] = None

    def _name(self, step: int) -> str:
        # DCP mode: one step for the whole group, each rank its share; else one step per rank.
        return f"{self.prefix}{step}" if self.template else f"{self.prefix}{step}-r{self.rank}"

    def _suffix(self) -> str:
        return "" if self.template else f"-r{self.rank}"

    def _dcp(self, state: Any, path: str, save: bool) -> None:
        """Stock DCP through ptcfs.dcp's storage objects, collective over the group when torch.distributed
        is initialized (every rank of the replica group), else this process alone."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        from . import dcp as _pdcp
        no_dist = not (dist.is_available() and dist.is_initialized())
        if save:
            dcp.save(state, storage_writer=_pdcp.StorageWriter(path), process_group=self.group, no_dist=no_dist)
        else:
            dcp.load(state, storage_reader=_pdcp.StorageReader(path), process_group=self.group, no_dist=no_dist)

    def _client(self) -> Client:
        return Client(self.daemon, self.secret_file)

    def metadata(self) -> str:
        return json.dumps({"job": self.job, "prefix": self.prefix, "rank": self.rank, "dcp": self.template is not None})

    def _committed(self, client: Client, name: str) -> bool:
        try:
            return client.ls(f"{self.job}/{name}").get("state", "committed") == "committed"
        except Error as e:
            if e.code == "not_found":
                return False
            raise

    def send_checkpoint(self, dst_ranks: List[int], step: int, state_dict: Any, timeout: timedelta) -> None:
        """Publishes the state as step <prefix><step>-r<rank> (committed when this returns); a state
        already published for that step is kept (this rank sent it to another group before)."""
        t0 = time.monotonic()
        name = self._name(step)
        with self._client() as c:
            if self._committed(c, name):
                self.last_send = {"step": name, "bytes": 0, "seconds": 0.0, "kept": True}
                return
            where = f"{self.job}/{name}"
            if self.template:
                sd = _ckpt.step_dir(self.mount, self.job, name, create=True)
                self._dcp(state_dict, sd, save=True)
                nbytes = _local_bytes(state_dict)
            else:
                ptc, arrays = state_to_step(state_dict, where)  # refused before the step is made
                sd = _ckpt.step_dir(self.mount, self.job, name, create=True)
                _ckpt.save_ptc(sd, ptc)
                _ckpt.save_shard(sd, ptc, 0, 0, arrays)
                nbytes = int(sum(a.nbytes for a in arrays.values()))
            wait_committed(self.job, name, client=c, timeout=timeout.total_seconds())
        self.last_send = {"step": name, "bytes": nbytes, "seconds": time.monotonic() - t0, "kept": False}

    def disallow_checkpoint(self) -> None:
        """Nothing to wait for: send_checkpoint returns once the state is committed."""

    def _newest(self, client: Client, below: Optional[int]) -> Optional[str]:
        listing = client.ls(self.job)
        pending = set(listing.get("pending", []))
        best = None
        for name in listing.get("steps", []):
            suffix = self._suffix()
            if not name.startswith(self.prefix) or not name.endswith(suffix) or name in pending:
                continue
            try:
                n = int(name[len(self.prefix):len(name) - len(suffix)])
            except ValueError:
                continue
            if (below is None or n < below) and (best is None or n > best[0]):
                best = (n, name)
        return best[1] if best else None

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
        """The state the healthy side published for `step`, read through this node's mount; when it
        does not commit within `timeout`, the newest committed older state (``last_recv`` says which,
        with ``fallback`` true)."""
        t0 = time.monotonic()
        meta = json.loads(metadata)
        job, prefix, rank, mode = meta["job"], meta["prefix"], meta["rank"], meta.get("dcp", False)
        if (job, prefix, rank if not mode else 0, mode) != (self.job, self.prefix, self.rank if not mode else 0,
                                                          self.template is not None):
            raise invalid(f"the sender publishes {job}/{prefix}* (rank {rank}, dcp {mode}), this transport reads "
                          f"{self.job}/{self.prefix}* (rank {self.rank}, dcp {self.template is not None})")
        name, fell_back, why = self._name(step), False, ""
        with self._client() as c:
            try:
                wait_committed(job, name, client=c, timeout=timeout.total_seconds())
            except Error as e:
                if not self.fallback or e.code not in ("deadline_exceeded", "not_found"):
                    raise
                older = self._newest(c, step)
                if older is None:
                    raise Error("not_found", f"{job}/{name} did not commit ({e.message}) and no older "
                                             f"state of rank {self.rank} is committed to fall back to") from None
                name, fell_back, why = older, True, e.message
        path = os.path.join(self.mount, job, name)
        if self.template:  # into this rank's own state dict: its own layout, its own slices read
            state = self.template()
            self._dcp(state, path, save=False)
            nbytes = _local_bytes(state)
        else:
            state, nbytes = step_to_state(path)
        self.last_recv = {"step": name, "bytes": nbytes, "seconds": time.monotonic() - t0, "fallback": fell_back,
                          "why": why}
        return state

    def shutdown(self, wait: bool = True) -> None:
        """Published states stay (`ptcfs rm` removes them)."""
