#!/usr/bin/env python3
"""Live resharding against the store's path, on CPU processes (gloo), in the same run: a
GPT-style state of about SIZE GB at tp=2,pp=2,dp=1 in 4 processes moves to tp=1,pp=2,dp=2

- live: ptcfs.live.reshard, rank to rank (docs/PYTHON.md "Live resharding");
- store: every old rank saves its shard into the mount (ptcfs.save_shard), the step commits,
  every new rank calls ptcfs.ensure_layout (one repartition) and loads its new shard
  (ptcfs.load_shard, copied into torch tensors), as examples/elastic_gpt/ckpt.py does.

Both start from the same old state in the same processes, and their new states must agree bit
for bit (checked). Also: the bytes the live path sent in all against the plan's minimum.

    $PTCFS_PYTHON bench/bench_live.py [--size 2] [--json FILE]     (root: it mounts FUSE)
"""

import json
import os
import socket
import sys
import time

from bench_lib import Daemon, ptcgen, row, secs, standalone

SECTION = "live"
FROM, TO = (2, 2, 1), (1, 2, 2)
JOB, STEP = "live", 1


def _rank_shard(cfg, rank):
    tp, pp, dp = cfg
    return rank % tp, rank // (tp * dp)


def worker(rank: int, world: int, port: int, ck: str, mount: str, addr: str, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import ptcfs
    from ptcfs import dtypes, live

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ptc = ptcfs.load_ptc(ck)
    spec = ptc["tensors"]

    def as_torch(arrays):
        return {n: dtypes.to_torch(np.array(a), spec[n]["dtype"]) for n, a in arrays.items()}

    t, p = _rank_shard(FROM, rank)
    state = as_torch(ptcfs.load_shard(ck, t, p))
    times = {}
    dist.barrier()
    t0 = time.perf_counter()
    new, stats = live.reshard(state, ptc, FROM, TO, live.TorchComm())
    dist.barrier()
    times["live"] = time.perf_counter() - t0

    sd = os.path.join(mount, JOB, str(STEP))
    dist.barrier()
    t0 = time.perf_counter()
    if rank == 0:
        ptcfs.step_dir(mount, JOB, STEP, create=True)
        ptcfs.save_ptc(sd, ptc)
    dist.barrier()
    ptcfs.save_shard(sd, ptc, t, p, state)  # dp=1: every old rank writes its own shard
    dist.barrier()
    if rank == 0:
        ptcfs.wait_committed(JOB, STEP, daemon=addr)
    dist.barrier()
    times["save"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    ptcfs.ensure_layout(JOB, STEP, *TO, mount=mount, daemon=addr)
    dist.barrier()
    times["repartition"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    nt, np_ = _rank_shard(TO, rank)
    loaded = as_torch(ptcfs.load_shard(sd, nt, np_, ptc=ptcfs.load_ptc(sd)))
    dist.barrier()
    times["load"] = time.perf_counter() - t1
    times["store"] = time.perf_counter() - t0

    def bits(x):
        return x.contiguous().reshape(-1).view(torch.uint8)

    differ = sorted(set(new) ^ set(loaded)) + sorted(
        n for n in set(new) & set(loaded) if not torch.equal(bits(new[n]), bits(loaded[n])))
    with open(os.path.join(out, f"r{rank}.json"), "w") as f:
        json.dump({"times": times, "stats": stats, "differ": differ}, f)
    dist.destroy_process_group()


def run(gb: float, root: str) -> tuple:
    import torch.multiprocessing as mp

    from ptcfs import live

    tp, pp, dp = FROM
    hidden = ptcgen.hidden_for_target("gpt", tp, pp, dp, 8, 32000, int(gb * 1e9))
    ptc = ptcgen.make_ptc("gpt", tp, pp, dp, 8, hidden, 32000)
    ck, out = os.path.join(root, "ck"), os.path.join(root, "out")
    os.makedirs(out)
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    plan = live.plan(ptc, FROM, TO)
    world = max(a * b * c for a, b, c in (FROM, TO))
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(worker, args=(world, port, ck, d.mnt, d.addr, out), nprocs=world, join=True)
    finally:
        d.stop()
    ranks = [json.load(open(os.path.join(out, f"r{r}.json"))) for r in range(world)]
    bad = {r: x["differ"] for r, x in enumerate(ranks) if x["differ"]}
    if bad:
        raise SystemExit(f"bench_live: the live and the store's new states differ: {bad}")
    sent = sum(x["stats"]["sent"] for x in ranks)
    t = ranks[0]["times"]
    size = f"{summary['bytes'] / 1e9:.2f} GB"
    change = f"tp={FROM[0]},pp={FROM[1]},dp={FROM[2]} -> tp={TO[0]},pp={TO[1]},dp={TO[2]}"
    print(f"  {size} {change}: live {t['live']:.2f} s ({sent / 1e9:.3f} GB sent, plan minimum "
          f"{plan['bytes_min'] / 1e9:.3f} GB); store: save {t['save']:.2f} s + repartition {t['repartition']:.2f} s "
          f"+ load {t['load']:.2f} s = {t['store']:.2f} s", flush=True)
    rows = [row(SECTION, f"live reshard {size}, {change}, 4 CPU processes vs save + repartition + load",
                secs(t["live"]), secs(t["store"]), t["store"] / t["live"], "> 1", t["store"] > t["live"]),
            row(SECTION, "live reshard: bytes sent / the plan's minimum", f"{sent / 1e9:.3f} GB",
                f"{plan['bytes_min'] / 1e9:.3f} GB", sent / plan["bytes_min"], "= 1", sent == plan["bytes_min"])]
    raw = {"bytes": summary["bytes"], "bytes_min": plan["bytes_min"], "sent": sent, "times": t,
           "per_rank": [x["stats"] for x in ranks]}
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--size", type=float, default=2.0, help="state size in GB")
    return standalone(__doc__, configure, lambda a, root: run(a.size, root))


if __name__ == "__main__":
    sys.exit(main())
