"""Saving a rank's model and optimizer state as a ptcfs checkpoint, and resuming from one.

A save of iteration k goes to ROOT/<job>/<k>/: ptc.json (by global rank 0) and, from DP rank
0 of every (t, p), tp{t}-pp{p}.safetensors with the parameters, their Adam moments and the
step count, under global names. ROOT is the mount once the daemon takes writes (the step
then commits when every shard is complete and closed); with a daemon whose mount is
read-only, ROOT is a plain directory that rank 0 then imports."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, Optional

import numpy as np
import torch
import torch.distributed as dist

import ptcfs
from config import EXP_AVG, EXP_AVG_SQ, STEP
from model import Stage
from optim import Adam


def shard_state(stage: Stage, opt: Adam) -> Dict[str, np.ndarray]:
    """{global name: local slice} of everything shard (t, p) holds."""
    out = {}
    for name, p in stage.params.items():
        out[name] = p.detach().cpu().numpy()
        out[EXP_AVG + name] = opt.exp_avg[name].cpu().numpy()
        out[EXP_AVG_SQ + name] = opt.exp_avg_sq[name].cpu().numpy()
    out[STEP] = np.array([opt.step_count], dtype=np.int64)
    return out


def save(stage: Stage, opt: Adam, root: str, mount: str, job: str, step: int, client: Optional[ptcfs.Client]) -> None:
    """Every rank calls this after iteration `step`; returns when the step is in the store.
    `client` is rank 0's connection to the daemon (None on other ranks)."""
    g = stage.grid
    into_mount = os.path.realpath(root) == os.path.realpath(mount)
    sd = os.path.join(root, job, str(step))
    if g.rank == 0:
        ptcfs.step_dir(root, job, step, create=True)
        ptcfs.save_ptc(sd, stage.ptc)  # first, so the mount can check each shard as it arrives
    dist.barrier()
    if g.d == 0:  # DP replicas are identical: one writer per shard, front to back
        ptcfs.save_shard(sd, stage.ptc, g.t, g.p, shard_state(stage, opt))
    dist.barrier()
    if g.rank == 0:
        if into_mount:
            ptcfs.wait_committed(job, step, client=client)  # commits once every shard is closed
        else:
            client.import_dir(sd, job, step)  # a plain directory: hand it to the daemon


def resume(stage: Stage, opt: Adam, mount: str, job: str, step: int, daemon: Optional[str],
           secret_file: Optional[str]) -> Dict[str, str]:
    """Makes the mount show step `step` at this run's (tp, pp, dp) (every rank asks; one
    repartition happens) and loads this rank's shard. Returns {name: sha256 of the loaded
    bytes} for checks."""
    g = stage.grid
    ptcfs.ensure_layout(job, step, g.tp, g.pp, g.dp, mount=mount, daemon=daemon, secret_file=secret_file)
    sd = os.path.join(mount, job, str(step))
    shown = ptcfs.load_ptc(sd)
    if ptcfs.ptc.normalize(shown) != ptcfs.ptc.normalize(stage.ptc):
        raise RuntimeError(f"{sd}/ptc.json is not this model's PTC at tp={g.tp},pp={g.pp},dp={g.dp}")
    tensors = ptcfs.load_shard(sd, g.t, g.p, ptc=stage.ptc)  # mapped from the mount
    digests = {}
    with torch.no_grad():
        for name, p in stage.params.items():
            for target, key in ((p, name), (opt.exp_avg[name], EXP_AVG + name), (opt.exp_avg_sq[name], EXP_AVG_SQ + name)):
                target.copy_(torch.from_numpy(np.array(tensors[key])))
                digests[key] = hashlib.sha256(target.detach().cpu().numpy().tobytes()).hexdigest()
    opt.step_count = int(tensors[STEP][0])
    if opt.step_count != step:
        raise RuntimeError(f"{sd}: {STEP} is {opt.step_count}, want {step}")
    digests[STEP] = hashlib.sha256(np.asarray(tensors[STEP]).tobytes()).hexdigest()
    return digests
