"""Live mesh change for DTensors (docs/PYTHON.md "Live mesh change for DTensors"): a running
job's state moves from one DeviceMesh to another of any size, between iterations, with no
checkpoint; every rank receives only the bytes of its new shards it does not hold.

``reshard_dtensors(state, target)``: ``state`` is this rank's state dict on the old mesh (nested
dicts of DTensors, plain tensors and other values, as ``torch.distributed.checkpoint.state_dict.
get_state_dict`` gives it; empty on a rank that joins), ``target`` the same keys on the new mesh
(for example ``get_state_dict`` of the model and optimizer built on the new mesh; empty on a
rank that leaves). Every rank of the process group calls it. The target's tensors are filled in
place and the target is returned, with this rank's byte counts:

* DTensor leaves: each rank's box follows from its placements (``Shard(d)`` on any mesh
  dimension, uneven chunks, ``Replicate()``, FSDP2's strided shards on a dp x tp mesh); the plan
  is ``ptcfs.boxes.plan`` and the bytes move with ``ptcfs.live.run_moves`` (over ``comm``,
  default ``TorchComm`` of the group: gloo point-to-point for CPU tensors);
* plain tensors: held whole by every old rank that has them (replicas), wanted whole;
* other values (ints, lists such as param_groups): taken from the lowest old rank that has them.

Before a byte moves every rank learns every rank's boxes, dtypes and global shapes (one
all_gather_object): a key the new state wants that no old rank holds, a different global shape
or dtype, or a local tensor that does not match its placements makes every rank raise the same
error, nothing sent.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from . import boxes as _boxes
from .errors import invalid
from .live import TorchComm, run_moves

__all__ = ["reshard_dtensors"]


def _flatten(d: Any, path: Tuple = ()) -> List[Tuple[Tuple, Any]]:
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            out += _flatten(v, path + (k,))
        return out
    return [(path, d)]


def _assign(d: dict, path: Tuple, value: Any) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _key(path: Tuple) -> str:
    return json.dumps([p if isinstance(p, (int, str)) else repr(p) for p in path])


def _name(key: str) -> str:
    """A key as people write it: the path's parts joined by dots."""
    return ".".join(str(p) for p in json.loads(key))


def _local(t):
    """The local tensor of a DTensor (an alias: writing it writes the DTensor), or the tensor."""
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t


def _describe(t) -> Tuple[str, Any]:
    """("dtensor" | "tensor", (global shape, dtype name, box or None)) of a tensor leaf;
    ("object", None) otherwise. Raises ValueError when a DTensor's local tensor is not the box its
    placements give."""
    import torch
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        shape = tuple(t.shape)
        box = None
        if t.device_mesh.get_coordinate() is not None:
            local_shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
            box = (tuple(int(x) for x in offset), tuple(int(x) for x in local_shape))
            if tuple(t.to_local().shape) != box[1]:
                raise ValueError(f"its local tensor is {list(t.to_local().shape)}, its placements "
                                 f"{t.placements} give {list(box[1])}")
            if not t.to_local().is_contiguous():
                raise ValueError("its local tensor is not contiguous")
        return "dtensor", (shape, str(t.dtype), box)
    if isinstance(t, torch.Tensor):
        return "tensor", (tuple(t.shape), str(t.dtype), ((0,) * t.dim(), tuple(t.shape)))
    return "object", None


def _describe_all(d: dict, objects: bool) -> Tuple[Dict[str, Any], str]:
    out, problem = {}, ""
    for path, v in _flatten(d):
        k = _key(path)
        try:
            kind, desc = _describe(v)
        except ValueError as e:
            problem = problem or f"'{'.'.join(map(str, path))}': {e}"
            continue
        out[k] = (kind, desc, v if kind == "object" and objects else None)
    return out, problem


def reshard_dtensors(state: dict, target: dict, comm=None, group=None, chunk_bytes: int = 16 << 20,
                     staging_bytes: int = 64 << 20) -> Tuple[dict, dict]:
    """Fills ``target`` (this rank's state on the new mesh) from every rank's ``state`` (on the
    old mesh): module docstring. Returns (target, {"sent", "received", "min", "rounds",
    "staging_peak", "min_total"}) in bytes, ``min`` what this rank lacks of its new shards (it
    receives exactly that), ``min_total`` the sum over ranks."""
    import torch
    import torch.distributed as dist

    comm = comm or TorchComm(group)
    me = comm.rank
    src, p1 = _describe_all(state, objects=True)
    dst, p2 = _describe_all(target, objects=False)
    problem = p1 or p2
    gathered: List[Optional[dict]] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, {"src": src, "dst": dst, "problem": problem}, group=group)
    bad = [(r, g["problem"]) for r, g in enumerate(gathered) if g["problem"]]
    if bad:
        raise invalid(f"live mesh change: the state of rank {bad[0][0]} does not fit its placements (nothing "
                      f"was sent): {bad[0][1]}")

    held: Dict[str, Dict[int, Any]] = {}
    wanted: Dict[str, Dict[int, Any]] = {}
    itemsize: Dict[str, int] = {}
    info: Dict[str, Tuple[str, Any]] = {}
    objects: Dict[str, Any] = {}
    for r, g in enumerate(gathered):
        for k, (kind, desc, value) in g["src"].items():
            if kind == "object":
                objects.setdefault(k, value)  # the lowest rank's
                continue
            first = info.setdefault(k, (kind, desc))
            if (first[1][0], first[1][1]) != (desc[0], desc[1]):
                raise invalid(f"live mesh change: {_name(k)} is {desc[1]} {list(desc[0])} on rank {r} but "
                              f"{first[1][1]} {list(first[1][0])} on another (nothing was sent)")
            if desc[2] is not None:
                held.setdefault(k, {})[r] = desc[2]
    for r, g in enumerate(gathered):
        for k, (kind, desc, _value) in g["dst"].items():
            if kind == "object":
                if k not in objects:
                    raise invalid(f"live mesh change: rank {r} wants {_name(k)}, which no rank holds (nothing was sent)")
                continue
            if k not in info:
                raise invalid(f"live mesh change: rank {r} wants tensor {_name(k)}, which no rank holds (nothing was sent)")
            have = info[k][1]
            if (have[0], have[1]) != (desc[0], desc[1]):
                raise invalid(f"live mesh change: rank {r} wants {_name(k)} as {desc[1]} {list(desc[0])}, it is "
                              f"{have[1]} {list(have[0])} (nothing was sent)")
            if desc[2] is not None:
                wanted.setdefault(k, {})[r] = desc[2]
                itemsize[k] = torch.empty((), dtype=getattr(torch, desc[1].split(".")[-1])).element_size()
    try:
        p = _boxes.plan(held, wanted, itemsize)
    except ValueError as e:
        raise invalid(f"live mesh change: {e} (nothing was sent)") from None

    sources = {_key(path): v for path, v in _flatten(state)}
    dests = {_key(path): (path, v) for path, v in _flatten(target)}
    with torch.no_grad():
        locals_ = {k: _local(v) for k, (_path, v) in dests.items() if k in wanted}
        srcs = {k: _local(v) for k, v in sources.items() if k in held}
        sent, received, peak, nrounds = run_moves(p, srcs.__getitem__, locals_.__getitem__, comm, chunk_bytes,
                                                  staging_bytes)
    for k, (path, _v) in dests.items():
        if k in objects:
            _assign(target, path, objects[k])
    mine = p["ranks"].get(me, {"min": 0})
    return target, {"sent": sent, "received": received, "min": mine["min"], "rounds": nrounds,
                    "staging_peak": peak, "min_total": sum(r["min"] for r in p["ranks"].values())}
