"""``ptcfs.dcp.prepare``: lay a step out for the mesh a job is about to load it at
(docs/FORMATS.md "Layouts from chunks", docs/PYTHON.md).

Every rank of the job calls it with the state dict it will pass to ``dcp.load``, before the load::

    ptcfs.dcp.prepare(state_dict, f"{MNT}/{job}/{step}")
    dcp.load(state_dict, checkpoint_id=f"{MNT}/{job}/{step}")   # torch's own reader

Each rank's boxes (a DTensor's local shard: its global offset and local shape; a plain tensor:
the whole tensor) are gathered on the group's first rank, which asks the daemon to repartition
the step to the tp whose slices are those boxes (pp and dp kept: the job's datasets do not move).
The step's DCP view then holds each rank's box as one chunk, so torch's reader reads each rank's
own bytes and nothing else. A tensor is split only along the dimension its PTC splits it (a stock
DCP save records the one its chunks were split along); other tensors still load, whole.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from .control import connect
from .errors import Error, invalid

__all__ = ["prepare", "job_step_of", "boxes_of", "share_of"]

Box = Tuple[List[int], List[int]]


def job_step_of(checkpoint_id: Any) -> Tuple[str, str]:
    """(job, step) of ``MNT/<job>/<step>``, ``MNT/<job>/<step>/dcp`` or ``JOB/STEP``."""
    parts = [p for p in os.path.normpath(os.fspath(checkpoint_id)).split(os.sep) if p not in ("", ".")]
    if parts and parts[-1] == "dcp":
        parts = parts[:-1]
    if len(parts) < 2:
        raise invalid(f"ptcfs.dcp.prepare: '{checkpoint_id}' does not name a step (MNT/<job>/<step>)")
    return parts[-2], parts[-1]


def _flat(state_dict: dict) -> Dict[str, Any]:
    """DCP's flat names (its default planner's: nested keys joined by dots) of the leaves."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    flat, _ = flatten_state_dict(state_dict)
    return flat


def share_of(state_dict: dict) -> int:
    """Bytes of this rank's boxes of every tensor leaf: what its load must read at least."""
    import math

    import torch
    from torch.distributed.tensor import DTensor
    flat = _flat(state_dict)
    total = 0
    for name, (lo, hi) in boxes_of(state_dict).items():
        v = flat[name]
        item = v.to_local().element_size() if isinstance(v, DTensor) else v.element_size()
        total += math.prod(h - l for l, h in zip(lo, hi)) * item if isinstance(v, torch.Tensor) else 0
    return total


def boxes_of(state_dict: dict) -> Dict[str, Box]:
    """This rank's box of every tensor leaf: a DTensor's local shard ([global offset], [offset +
    local shape]), a plain tensor whole. A DTensor whose mesh leaves this rank out has none."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    out: Dict[str, Box] = {}
    for name, v in _flat(state_dict).items():
        if isinstance(v, DTensor):
            if v.device_mesh.get_coordinate() is None:
                continue
            shape, offset = compute_local_shape_and_global_offset(v.shape, v.device_mesh, v.placements)
            lo = [int(x) for x in offset]
            out[name] = (lo, [a + int(b) for a, b in zip(lo, shape)])
        elif isinstance(v, torch.Tensor):
            out[name] = ([0] * v.dim(), [int(x) for x in v.shape])
    return out


def merge_boxes(boxes) -> Dict[str, List[list]]:
    """(name, lo, hi) triples, from every rank, as a repartition request's ``chunks``: each
    tensor's distinct boxes, in the order first seen."""
    chunks: Dict[str, List[list]] = {}
    seen = set()
    for name, lo, hi in boxes:
        key = (name, tuple(lo), tuple(hi))
        if key not in seen:
            seen.add(key)
            chunks.setdefault(name, []).append([list(lo), list(hi)])
    return chunks


def request_layout(daemon: Optional[str], secret_file: Optional[str], job: str, step: str,
                   chunks: Dict[str, List[list]], dry_run: bool = False) -> dict:
    """Asks the daemon to repartition job/step to the tp whose slices are ``chunks``; its result."""
    with connect(daemon, secret_file, timeout=None) as c:  # as long as the repartition takes
        return c.call("repartition", job=job, step=step, chunks=chunks, dry_run=bool(dry_run))


def prepare(state_dict: dict, checkpoint_id: Any, *, group=None, daemon: Optional[str] = None,
            secret_file: Optional[str] = None, dry_run: bool = False) -> dict:
    """Collective (every rank of ``group``, default the world): repartitions the step so that each
    rank's boxes of ``state_dict`` are slices of it (module docstring). Returns, on every rank, the
    daemon's repartition result; its ``chunks`` member says how many tensors (and bytes) the new
    layout gives each rank exactly ({"tensors", "exact", "bytes", "bytes_exact", "unknown"}), and
    ``share`` is this rank's own: the bytes of its boxes, the least its load reads (compare with the
    daemon's ptcfs_dcp_read_bytes_total{file="tp<t>-pp0.distcp"}).
    Raises ptcfs.Error on every rank when the daemon refuses. ``daemon``: HOST:PORT of the daemon
    of the first rank's node (default $PTCFS_DAEMON, then 127.0.0.1:7070)."""
    import torch.distributed as dist

    job, step = job_step_of(checkpoint_id)
    mine = boxes_of(state_dict)
    world = dist.get_world_size(group)
    gathered: List[Optional[dict]] = [None] * world
    dist.all_gather_object(gathered, mine, group=group)
    reply: List[Any] = [None]
    if dist.get_rank(group) == 0:
        chunks = merge_boxes((name, lo, hi) for boxes in gathered for name, (lo, hi) in boxes.items())
        try:
            reply[0] = ("ok", request_layout(daemon, secret_file, job, step, chunks, dry_run))
        except Error as e:
            reply[0] = ("error", e.code, e.message)
    dist.broadcast_object_list(reply, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if reply[0][0] == "error":
        raise Error(reply[0][1], reply[0][2])
    return {**reply[0][1], "share": share_of(state_dict)}
