"""Saving a rank's model and optimizer state as a ptcfs checkpoint, and resuming from one.

A save of iteration k goes to ROOT/<job>/<k>/: ptc.json (by global rank 0), then the shards
under global names: the parameters, their Adam moments and the step count. With the plain
optimizer, DP rank 0 of every (t, p) writes tp{t}-pp{p}.safetensors (DP replicas hold the same
state). With the distributed optimizer (zero.py) every DP rank holds a different range of the
moments, so the shard is written per tensor, tp{t}-pp{p}/<name>.npy: each DP rank its range of
each moment, DP rank 0 the parameters and the step (a shard is written one way only, so the
parameters go per tensor too). ROOT is the mount (the step then commits when every shard is
complete and every file closed), or a plain directory that rank 0 then imports.

On resume the mount shows the step at the new layout, both ways (shard files and per-tensor
npy views, whichever way it was written), so either optimizer resumes from either save."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist

import ptcfs
from config import EXP_AVG, EXP_AVG_SQ, STEP
from model import Stage
from optim import Adam
from zero import DistributedAdam

Optimizer = Union[Adam, DistributedAdam]


def shard_state(stage: Stage, opt: Adam) -> Dict[str, np.ndarray]:
    """{global name: local slice} of everything shard (t, p) holds (plain optimizer)."""
    out = {}
    for name, p in stage.params.items():
        out[name] = p.detach().cpu().numpy()
        out[EXP_AVG + name] = opt.exp_avg[name].cpu().numpy()
        out[EXP_AVG_SQ + name] = opt.exp_avg_sq[name].cpu().numpy()
    out[STEP] = np.array([opt.step_count], dtype=np.int64)
    return out


def save_ranges(stage: Stage, opt: DistributedAdam, sd: str) -> Dict[str, Tuple[int, int]]:
    """This rank's part of a per-tensor save (distributed optimizer): its range of every
    moment, and on DP rank 0 the whole parameters and the step. Returns {name: [lo, hi)}
    written. An empty range is not opened at all: a writer that only opened and closed the
    file after the others finished could find the step already committed (read-only)."""
    g = stage.grid
    written = {}

    def put(name, start, values):
        if values.size:
            ptcfs.save_tensor_range(sd, stage.ptc, g.t, g.p, name, start, values)
            written[name] = (start, start + values.size)

    for name, p in stage.params.items():
        if g.d == 0:
            put(name, 0, p.detach().cpu().numpy())
        lo, _ = opt.ranges[name]
        put(EXP_AVG + name, lo, opt.exp_avg[name].cpu().numpy())
        put(EXP_AVG_SQ + name, lo, opt.exp_avg_sq[name].cpu().numpy())
    if g.d == 0:
        put(STEP, 0, np.array([opt.step_count], dtype=np.int64))
    return written


def save(stage: Stage, opt: Optimizer, root: str, mount: str, job: str, step: int,
         client: Optional[ptcfs.Client]) -> Dict[str, Tuple[int, int]]:
    """Every rank calls this after iteration `step`; returns when the step is in the store.
    `client` is rank 0's connection to the daemon (None on other ranks). Returns what this
    rank wrote: {name: [lo, hi)} (flat elements of the slice)."""
    g = stage.grid
    into_mount = os.path.realpath(root) == os.path.realpath(mount)
    sd = os.path.join(root, job, str(step))
    if g.rank == 0:
        ptcfs.step_dir(root, job, step, create=True)
        ptcfs.save_ptc(sd, stage.ptc)  # first, so the mount can check each file as it arrives
    dist.barrier()
    if isinstance(opt, DistributedAdam):
        written = save_ranges(stage, opt, sd)  # every DP rank writes, at the same time
    elif g.d == 0:  # DP replicas are identical: one writer per shard, front to back
        state = shard_state(stage, opt)
        ptcfs.save_shard(sd, stage.ptc, g.t, g.p, state)
        written = {n: (0, int(a.size)) for n, a in state.items()}
    else:
        written = {}
    dist.barrier()
    if g.rank == 0:
        if into_mount:
            ptcfs.wait_committed(job, step, client=client)  # commits once every file is closed
        else:
            client.import_dir(sd, job, step)  # a plain directory: hand it to the daemon
    return written


def _npy(sd: str, t: int, p: int, name: str) -> np.ndarray:
    """The mount's view tp{t}-pp{p}/<name>.npy, mapped (read-only, zero-copy)."""
    path = os.path.join(sd, f"tp{t}-pp{p}", name + ".npy")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):  # a file system that cannot map: read it
        return np.load(path, allow_pickle=False)


def _digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def resume(stage: Stage, opt: Optimizer, mount: str, job: str, step: int, daemon: Optional[str],
           secret_file: Optional[str], global_batch: Optional[int] = None) -> dict:
    """Makes the mount show step `step` at this run's (tp, pp, dp) and, when given, the job's
    datasets at `global_batch` (every rank asks; one repartition happens, the datasets re-split
    in its commit) and loads this rank's state from it: the whole shard with the plain
    optimizer, its new ranges of the moments with the distributed one. Returns, for checks,
    {"sha256": {name: sha256 of the loaded bytes}, "ranges": {name: [lo, hi)} of the tensors
    loaded as a range}."""
    g = stage.grid
    ptcfs.ensure_layout(job, step, g.tp, g.pp, g.dp, mount=mount, daemon=daemon, secret_file=secret_file,
                        global_batch=global_batch)
    sd = os.path.join(mount, job, str(step))
    shown = ptcfs.load_ptc(sd)
    if ptcfs.ptc.normalize(shown) != ptcfs.ptc.normalize(stage.ptc):
        raise RuntimeError(f"{sd}/ptc.json is not this model's PTC at tp={g.tp},pp={g.pp},dp={g.dp}")
    zero = isinstance(opt, DistributedAdam)
    if zero:  # per tensor: only the bytes of this rank's ranges are read
        def get(name):
            return _npy(sd, g.t, g.p, name)
    else:
        tensors = ptcfs.load_shard(sd, g.t, g.p, ptc=stage.ptc)  # mapped from the mount

        def get(name):
            return tensors[name]
    digests, ranges = {}, {}

    def load(target: torch.Tensor, name: str, rng=None):
        src = get(name)
        if rng is not None:
            src = src.reshape(-1)[rng[0]:rng[1]]
            ranges[name] = rng
        target.copy_(torch.from_numpy(np.array(src)))
        digests[name] = _digest(target.detach().cpu().numpy())

    with torch.no_grad():
        for name, p in stage.params.items():
            load(p, name)
            rng = opt.ranges[name] if zero else None
            load(opt.exp_avg[name], EXP_AVG + name, rng)
            load(opt.exp_avg_sq[name], EXP_AVG_SQ + name, rng)
    steps = np.array(get(STEP))
    opt.step_count = int(steps[0])
    if opt.step_count != step:
        raise RuntimeError(f"{sd}: {STEP} is {opt.step_count}, want {step}")
    digests[STEP] = _digest(steps)
    return {"sha256": digests, "ranges": ranges}
