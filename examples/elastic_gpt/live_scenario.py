#!/usr/bin/env python3
"""The live elastic scenario: one job changes its parallel config between iterations without
saving anything (ptcfs.live, docs/PYTHON.md "Live resharding"), compared with a run that never
changed:
    tp=2,pp=2,dp=1 (4 ranks) trains iterations 0..3, then reshards live to
    tp=1,pp=2,dp=2, trains 4..7, reshards to
    tp=1,pp=1,dp=1 (rank 0 alone trains; ranks 1..3 wait), trains 8..11, reshards back to
    tp=2,pp=2,dp=1, trains 12..15
    reference: tp=2,pp=2,dp=1, plain Adam, 0..15 without a change
Processes are spawned once, as many as the largest config has ranks; gloo on CPU. A reshard
moves parameters, Adam's moments and the step count rank to rank, as the plan of
libptcfs_client says (ptcfs.live.reshard_plan): each rank sends and receives exactly the plan's bytes,
printed per rank beside the minimum. With --distributed-optimizer the moments are first
gathered over each DP group into whole local slices (ZeRO ranges are not a PTC layout), the
plan moves those, and each rank keeps its new range; the gather is counted apart ("gathered").
Samples: a synthetic dataset (make_data.py) read in file order, global batch i = samples
[i*B, (i+1)*B), DP rank d taking its d-th chunk of B/dp: every config sees the same global
batches. Exit status 0 when every loss is within 1e-5 (relative) of the reference's, the
tolerance of the save/restore scenario (scenario.py), and every rank moved the plan's bytes.
    $PTCFS_PYTHON examples/elastic_gpt/live_scenario.py [--distributed-optimizer]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from typing import Dict, List, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from ptcfs import live  # noqa: E402
from config import EXP_AVG, EXP_AVG_SQ, STEP, ModelConfig, model_ptc  # noqa: E402
from make_data import sequences  # noqa: E402
from model import Stage  # noqa: E402
from optim import Adam  # noqa: E402
from parallel import Grid  # noqa: E402
from pipeline import train_iteration  # noqa: E402
from zero import DistributedAdam  # noqa: E402

LOSS_RTOL = 1e-5  # scenario.py's
Config = Tuple[int, int, int]


def cfg_name(c: Config) -> str:
    return "tp={},pp={},dp={}".format(*c)


def state_of(stage: Stage, opt) -> Dict[str, torch.Tensor]:
    """{global name: local slice} of the rank's parameters, whole moments and step count. With
    the distributed optimizer the moments are all-gathered over the DP group first."""
    out: Dict[str, torch.Tensor] = {}
    for name, p in stage.params.items():
        out[name] = p.detach()
        if isinstance(opt, DistributedAdam):
            g = stage.grid
            for prefix, m in ((EXP_AVG, opt.exp_avg[name]), (EXP_AVG_SQ, opt.exp_avg_sq[name])):
                size = max(hi - lo for lo, hi in (r[name] for r in opt.all_ranges))
                mine = torch.zeros(size, dtype=m.dtype)
                mine[:m.numel()] = m
                bufs = [mine]
                if g.dp > 1:
                    bufs = [torch.empty(size, dtype=m.dtype) for _ in range(g.dp)]
                    dist.all_gather(bufs, mine, group=g.dp_group)
                whole = torch.empty(p.numel(), dtype=m.dtype)
                for d, (lo, hi) in enumerate(r[name] for r in opt.all_ranges):
                    whole[lo:hi] = bufs[d][:hi - lo]
                out[prefix + name] = whole.view(p.shape)
        else:
            out[EXP_AVG + name] = opt.exp_avg[name]
            out[EXP_AVG_SQ + name] = opt.exp_avg_sq[name]
    out[STEP] = torch.tensor([opt.step_count], dtype=torch.int64)
    return out


def gathered_bytes(stage: Stage, opt) -> int:
    """Bytes this rank received in state_of's all-gathers (distributed optimizer only)."""
    if not isinstance(opt, DistributedAdam) or stage.grid.dp == 1:
        return 0
    return sum(2 * 4 * (p.numel() - (opt.ranges[n][1] - opt.ranges[n][0])) for n, p in stage.params.items())


def build(cfg: ModelConfig, c: Config, rank: int, seed: int, zero: bool, state=None):
    """The rank's stage and optimizer at config c, from `state` (a reshard's result) if given."""
    grid = Grid(*c, rank)
    grid.make_groups()  # every rank of the job calls it, active or not
    if rank >= grid.world:
        return None, None
    stage = Stage(cfg, grid, seed, torch.device("cpu"))
    if zero:
        opt = DistributedAdam(stage.params, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, grid)
    else:
        opt = Adam(stage.params, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps)
    if state is not None:
        with torch.no_grad():
            for name, p in stage.params.items():
                p.copy_(state[name])
                for prefix, m in ((EXP_AVG, opt.exp_avg), (EXP_AVG_SQ, opt.exp_avg_sq)):
                    src = state[prefix + name].reshape(-1)
                    if zero:
                        lo, hi = opt.ranges[name]
                        src = src[lo:hi]
                    m[name].copy_(src.view_as(m[name]))
        opt.step_count = int(state[STEP][0])
    return stage, opt


def worker(rank: int, world: int, port: int, configs: List[Config], iters: int, zero: bool, out: str,
           samples: List[List[int]]) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    comm = live.TorchComm()
    cfg = ModelConfig()
    B = cfg.global_batch
    records, losses = [], []
    stage, opt = build(cfg, configs[0], rank, 0, zero)
    for i, c in enumerate(configs):
        if i > 0:
            prev = configs[i - 1]
            gathered = gathered_bytes(stage, opt) if stage else 0
            state = state_of(stage, opt) if stage else {}
            t0 = time.monotonic()
            state, stats = live.reshard(state, model_ptc(cfg, *prev), prev, c, comm)
            records.append({"from": cfg_name(prev), "to": cfg_name(c), "gathered": gathered,
                            "seconds": time.monotonic() - t0, **stats})
            stage, opt = build(cfg, c, rank, 0, zero, state if rank < c[0] * c[1] * c[2] else None)
        if stage is not None:
            g = stage.grid
            chunk = B // g.dp
            for it in range(i * iters, (i + 1) * iters):
                rows = samples[it * B + g.d * chunk: it * B + (g.d + 1) * chunk]
                loss = train_iteration(stage, torch.tensor(rows, dtype=torch.long),
                                       reduce=not isinstance(opt, DistributedAdam))
                opt.step()
                opt.zero_grad()
                if rank == g.rank_of(0, 0, g.pp - 1):
                    losses.append({"iter": it, "loss": loss, "config": cfg_name(c)})
    with open(os.path.join(out, f"live-r{rank}.json"), "w") as f:
        json.dump({"reshards": records, "losses": losses}, f)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(configs: List[Config], iters: int, zero: bool, out: str, samples) -> List[dict]:
    os.makedirs(out, exist_ok=True)
    world = max(t * p * d for t, p, d in configs)
    mp.spawn(worker, args=(world, free_port(), configs, iters, zero, out, samples), nprocs=world, join=True)
    ranks = []
    for r in range(world):
        with open(os.path.join(out, f"live-r{r}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def parse_config(s: str) -> Config:
    tp, pp, dp = (int(x) for x in s.split(","))
    return tp, pp, dp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The live elastic scenario (see the module's docstring).")
    ap.add_argument("--configs", nargs="+", type=parse_config, default=[(2, 2, 1), (1, 2, 2), (1, 1, 1), (2, 2, 1)],
                    metavar="TP,PP,DP")
    ap.add_argument("--iters", type=int, default=4, help="iterations per config")
    ap.add_argument("--distributed-optimizer", action="store_true")
    ap.add_argument("--workdir", help="records (default: a new temporary folder)")
    a = ap.parse_args(argv)
    work = a.workdir or tempfile.mkdtemp(prefix="elastic_gpt-live-")
    cfg = ModelConfig()
    n = a.iters * len(a.configs)
    samples = list(sequences(n * cfg.global_batch, cfg.seq, cfg.vocab, 0))
    opt = "distributed optimizer" if a.distributed_optimizer else "plain Adam"
    print(f"live scenario ({opt}) against a reference at {cfg_name(a.configs[0])} (plain Adam, never changed); "
          f"records in {work}")
    t0 = time.monotonic()
    ref = run([a.configs[0]], n, False, os.path.join(work, "ref"), samples)
    print(f"reference {cfg_name(a.configs[0])}: iterations 0..{n - 1} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    ranks = run(a.configs, a.iters, a.distributed_optimizer, os.path.join(work, "live"), samples)
    print(f"live: {' -> '.join(cfg_name(c) for c in a.configs)}, {a.iters} iterations each "
          f"({time.monotonic() - t0:.1f} s)")
    ok = True
    print("reshard                            rank      sent  received       min  gathered  rounds")
    for i in range(len(a.configs) - 1):
        total = 0
        for r, rec in enumerate(ranks):
            s = rec["reshards"][i]
            print(f"{s['from']} -> {s['to']}  {r:4d}  {s['sent']:8d}  {s['received']:8d}  {s['min']:8d}  "
                  f"{s['gathered']:8d}  {s['rounds']:6d}")
            total += s["sent"]
            if s["sent"] != s["plan_sent"] or s["received"] != s["plan_received"] or s["received"] != s["min"]:
                ok = False
                print(f"  rank {r} moved other bytes than the plan's")
        p = live.plan(model_ptc(cfg, *a.configs[i]), a.configs[i], a.configs[i + 1])
        print(f"  sent in all {total}, the plan's minimum {p['bytes_min']}")
        ok &= total == p["bytes_min"]
    ref_losses = {x["iter"]: x["loss"] for rec in ref for x in rec["losses"]}
    got = {x["iter"]: x for rec in ranks for x in rec["losses"]}
    print("iteration  config           reference loss     live loss   rel. diff")
    worst = 0.0
    for it in range(n):
        r, x = ref_losses[it], got[it]
        rel = abs(x["loss"] - r) / abs(r)
        worst = max(worst, rel)
        print(f"{it:9d}  {x['config']:15s}  {r:14.9f}  {x['loss']:12.9f}   {rel:.2e}")
    print(f"max relative loss difference {worst:.2e} (tolerance {LOSS_RTOL:g})")
    ok &= worst <= LOSS_RTOL
    print("live scenario: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
