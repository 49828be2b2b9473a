#!/usr/bin/env python3
"""The elastic scenario of the example, against a running daemon, compared with a run that
never stopped:

    phase 1  tp=2,pp=2,dp=1 (4 processes) trains iterations 0..3, saves step 4 into the mount, stops
    phase 2  tp=1,pp=2,dp=2 (4 processes): every rank calls ensure_layout (one repartition of step 4,
             which also re-splits the dataset for dp=2), loads its state, trains 4..7, saves step 8
    phase 3  tp=1,pp=1,dp=1 (1 process): the same from step 8, trains 8..11, saves step 12
    reference: a second job at phase 1's config trains 0..11 without stopping, saving 4, 8 and 12

Then prints, per iteration, both losses and their relative difference, whether every global
batch held the same samples in the same order (from the sample ids each rank recorded), and
per saved step the largest relative difference of any saved tensor (the mount's full/ views
of the resumed job against the reference's). Exit status 0 when losses and state agree to
1e-5 (relative) and the sample order is the same; 1 otherwise.

    $PTCFS_PYTHON examples/elastic_gpt/scenario.py --job gpt [--distributed-optimizer]

With --distributed-optimizer the phases use the ZeRO-style optimizer (zero.py: each DP rank
keeps and saves its own range of Adam's state); the reference stays the plain optimizer, so
the comparison also shows that the two optimizers agree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import numpy as np  # noqa: E402

import ptcfs  # noqa: E402

PY = sys.executable
GLOBAL_BATCH = 8  # config.ModelConfig.global_batch (not imported: that pulls in torch)
LOSS_RTOL = 1e-5
STATE_RTOL = 1e-5

Config = Tuple[int, int, int]


def parse_config(s: str) -> Config:
    tp, pp, dp = (int(x) for x in s.split(","))
    return tp, pp, dp


def cfg_name(c: Config) -> str:
    return "tp={},pp={},dp={}".format(*c)


def train(a, job: str, cfg: Config, out: str, steps: int, resume=None, save_at=(), zero=False) -> float:
    """Runs train.py; returns its wall time. Its output stays in `out`."""
    cmd = [PY, os.path.join(_HERE, "train.py"), "--job", job, "--tp", cfg[0], "--pp", cfg[1], "--dp", cfg[2],
           "--steps", steps, "--mount", a.mount, "--out", out]
    if a.daemon:
        cmd += ["--daemon", a.daemon]
    if resume is not None:
        cmd += ["--resume", resume]
    for k in save_at:
        cmd += ["--save-at", k]
    if zero:
        cmd.append("--distributed-optimizer")
    t0 = time.monotonic()
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"scenario: {' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return time.monotonic() - t0


def read_losses(out: str) -> Dict[int, float]:
    with open(os.path.join(out, "losses.jsonl")) as f:
        return {x["iter"]: x["loss"] for x in map(json.loads, f)}


def global_batches(out: str) -> Dict[int, List[int]]:
    """{iteration: the global batch's sample ids}: DP rank 0's chunk, then rank 1's, ...
    Every rank recorded its own; ranks of one DP rank (its TP ranks and stages) must agree."""
    per_d: Dict[int, Dict[int, list]] = {}
    for fn in sorted(os.listdir(out)):
        if fn.startswith("samples-r"):
            with open(os.path.join(out, fn)) as f:
                for x in map(json.loads, f):
                    seen = per_d.setdefault(x["iter"], {}).setdefault(x["d"], x["ids"])
                    if seen != x["ids"]:
                        sys.exit(f"scenario: {out}/{fn}: iteration {x['iter']} read other samples than "
                                 f"another rank of DP rank {x['d']}")
    return {it: [i for d in sorted(ds) for i in ds[d]] for it, ds in per_d.items()}


def state_diff(mount: str, job: str, ref: str, step: int) -> Tuple[float, str]:
    """The largest relative difference of any tensor saved at `step` (max |x - r| / max |r|,
    from the mount's full/ views), and that tensor's name."""
    sd, rd = os.path.join(mount, job, str(step)), os.path.join(mount, ref, str(step))
    worst, where = 0.0, ""
    for name in sorted(ptcfs.load_ptc(rd)["tensors"]):
        x = np.asarray(ptcfs.load_full(sd, name), dtype=np.float64)
        r = np.asarray(ptcfs.load_full(rd, name), dtype=np.float64)
        scale = float(np.max(np.abs(r))) or 1.0
        rel = float(np.max(np.abs(x - r))) / scale
        if rel >= worst:
            worst, where = rel, name
    return worst, where


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Runs the elastic GPT scenario against a daemon (see README.md).")
    ap.add_argument("--job", default="gpt", help="the elastic job (must not exist yet)")
    ap.add_argument("--ref-job", help="the uninterrupted reference job (default <job>-ref; must not exist yet)")
    ap.add_argument("--configs", nargs="+", type=parse_config, default=[(2, 2, 1), (1, 2, 2), (1, 1, 1)],
                    metavar="TP,PP,DP", help="the config of each phase (default 2,2,1 1,2,2 1,1,1)")
    ap.add_argument("--iters", type=int, default=4, help="iterations per phase")
    ap.add_argument("--distributed-optimizer", action="store_true",
                    help="the phases use the ZeRO-style optimizer (the reference keeps the plain one)")
    ap.add_argument("--workdir", help="dataset and the runs' records (default /tmp/elastic_gpt-<job>)")
    ap.add_argument("--mount", help="the ptcfs mount (default $PTCFS_MOUNT, then the daemon's)")
    ap.add_argument("--daemon", help="HOST:PORT (default $PTCFS_DAEMON, then 127.0.0.1:7070)")
    a = ap.parse_args(argv)
    ref_job = a.ref_job or f"{a.job}-ref"
    work = a.workdir or f"/tmp/elastic_gpt-{a.job}"
    os.makedirs(work, exist_ok=True)
    n = a.iters * len(a.configs)
    bounds = [a.iters * (i + 1) for i in range(len(a.configs))]  # the steps saved
    with ptcfs.Client(a.daemon) as c:
        a.mount = a.mount or ptcfs.elastic.default_mount(c)
        jobs = {j["job"] for j in c.ls("")["jobs"]}
        for j in (a.job, ref_job):
            if j in jobs:
                sys.exit(f"scenario: job {j} exists; choose another --job")
        data = os.path.join(work, "train.jsonl")
        samples = (n + 1) * GLOBAL_BATCH  # a batch more than the runs read: no run reaches the epoch's end
        subprocess.run([PY, os.path.join(_HERE, "make_data.py"), data, "--samples", str(samples)], check=True,
                       capture_output=True)
        for j in (ref_job, a.job):  # the same samples and seed: the same global batches
            # copy: the daemon keeps its own copy, so the dataset outlives the workdir
            c.dataset_add(j, "train", "jsonl", seed=1, global_batch=GLOBAL_BATCH, files=[data],
                          dp=a.configs[0][2], copy=True)
    for d in ["ref"] + [f"phase{i + 1}" for i in range(len(a.configs))]:
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)  # a previous run's records (losses.jsonl appends)
    opt = "distributed optimizer" if a.distributed_optimizer else "plain Adam"
    print(f"scenario: job {a.job} ({opt}) against {ref_job} (plain Adam, never stopped); mount {a.mount}; "
          f"records in {work}")

    took = train(a, ref_job, a.configs[0], os.path.join(work, "ref"), n, save_at=bounds)
    print(f"reference {cfg_name(a.configs[0])}: iterations 0..{n - 1}, saved {', '.join(map(str, bounds))}"
          f" ({took:.1f} s)")
    outs, phase_of = [], {}
    for i, cfg in enumerate(a.configs):
        out = os.path.join(work, f"phase{i + 1}")
        resume = None if i == 0 else bounds[i - 1]
        took = train(a, a.job, cfg, out, bounds[i], resume=resume, save_at=[bounds[i]], zero=a.distributed_optimizer)
        what = "starts" if resume is None else f"resumes step {resume}"
        if resume is not None:
            with ptcfs.Client(a.daemon) as c:
                info = c.ls(f"{a.job}/{resume}")
            shown = tuple(info["parallelism"][k] for k in ("tp", "pp", "dp"))
            what += f" (now version {info['version']}, {cfg_name(shown)})"
        print(f"phase {i + 1} {cfg_name(cfg)}: {what}, iterations {bounds[i] - a.iters}..{bounds[i] - 1}, "
              f"saved {bounds[i]} ({took:.1f} s)")
        outs.append(out)
        for it in range(bounds[i] - a.iters, bounds[i]):
            phase_of[it] = i

    ref_losses = read_losses(os.path.join(work, "ref"))
    ref_batches = global_batches(os.path.join(work, "ref"))
    losses, batches = {}, {}
    for out in outs:
        losses.update(read_losses(out))
        batches.update(global_batches(out))
    ok = True
    print("iteration  config           reference loss  resumed loss   rel. diff  same samples")
    worst_loss = 0.0
    for it in range(n):
        rel = abs(losses[it] - ref_losses[it]) / abs(ref_losses[it])
        worst_loss = max(worst_loss, rel)
        same = batches.get(it) == ref_batches.get(it)
        ok &= same
        print(f"  {it:7d}  {cfg_name(a.configs[phase_of[it]]):15s}  {ref_losses[it]:14.9f}  {losses[it]:12.9f}"
              f"  {rel:9.2e}  {'yes' if same else 'NO'}")
    ok &= worst_loss <= LOSS_RTOL
    print(f"max relative loss difference {worst_loss:.2e} (tolerance {LOSS_RTOL:g})")
    print(f"global sample order: {'the same' if all(batches[i] == ref_batches[i] for i in range(n)) else 'DIFFERS'}"
          f" in all {n} global batches of {GLOBAL_BATCH}")
    for k in bounds:
        rel, name = state_diff(a.mount, a.job, ref_job, k)
        ok &= rel <= STATE_RTOL
        if rel == 0:
            print(f"state at step {k}: every tensor identical to the reference's")
        else:
            print(f"state at step {k}: max relative difference {rel:.2e} ({name}; tolerance {STATE_RTOL:g})")
    print("scenario: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
