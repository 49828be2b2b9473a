"""GPU load benchmark (needs a GPU; make bench-gpu): shards of a ~4 GB checkpoint loaded into GPU
memory through ptcfs.direct (pinned staging, device gather), against cudaMemcpy of the same bytes
from pinned host memory (the physical limit of a host-to-device copy) and against what users do
today: safetensors' load_file through the mount, then .cuda(). Also a strided layout (tp2 -> tp1,
re-cut slices left in place) against the same pinned baseline. Page cache warm in every case.
--sweep also times the staging tunables (PTCFS_GPU_COPY_THREADS; also _SLOTS, _SLOT_MB) and
PTCFS_GPU_STAGE=copy, each in its own process; --stage sets the staging of every load (default: the
library's, pread).
--live: instead, a live reshard of a ~2 GB state (tp=2,pp=2,dp=1 -> tp=1,pp=2,dp=2) through
ptcfs.live.NcclComm on one GPU (one process plays every rank; every byte the plan moves between
ranks goes through ncclSend/ncclRecv), against a device-to-device copy of the same bytes."""

import json
import os
import subprocess
import sys
import time

from bench_lib import Daemon, gbps, ptcgen, row, standalone

# The library's defaults first and last (runs drift; the first process of a run is often its slowest).
VARIANTS = {
    "default": {},
    "copy": {"PTCFS_GPU_STAGE": "copy"},
    "threads=8": {"PTCFS_GPU_COPY_THREADS": "8"},
    "threads=16": {"PTCFS_GPU_COPY_THREADS": "16"},
    "slots of 32 MiB": {"PTCFS_GPU_SLOT_MB": "32"},
    "default (again: drift)": {},
}


def summary(v: dict) -> str:
    """Milliseconds in ptcfs_read_device, summed over the files of one load: plan, staging copy,
    waits for the device, total."""
    keys = ("plan_ns", "stage_ns", "wait_ns", "total_ns")
    tot = {k: sum(st[k] for st in v["stats"].values()) / 1e6 for k in keys}
    return " ".join(f"{k[:-3]}={tot[k]:.1f}ms" for k in keys)


def sync():
    import torch
    torch.cuda.synchronize()


def timed_best(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def pinned_baseline(sizes) -> float:
    """Seconds to copy buffers of `sizes` bytes from pinned host memory to the device."""
    import torch
    host = [torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(1) for n in sizes]
    dev = [torch.empty(n, dtype=torch.uint8, device="cuda:0") for n in sizes]

    def go():
        for d, h in zip(dev, host):
            d.copy_(h, non_blocking=True)
    s = timed_best(5, go)
    del host, dev
    return s


def ptcfs_load(paths) -> tuple:
    from ptcfs import direct
    stats = {}

    def go():
        for p in paths:
            with direct.open(p, fallback=False) as f:
                ts = f.torch(device="cuda:0")
                assert f.gpu_why_not == "", f.gpu_why_not
                stats[os.path.basename(p)] = f.gpu_stats
                del ts
    return timed_best(3, go), stats


def users_load(paths) -> float:
    from safetensors.torch import load_file

    def go():
        for p in paths:
            ts = {k: v.cuda() for k, v in load_file(p).items()}
            del ts
    return timed_best(3, go)


def load_in_child(paths, env) -> dict:
    """ptcfs_load in a fresh process with `env` (the device's staging is made once per process)."""
    r = subprocess.run([sys.executable, __file__, "--load", *paths], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"load with {env} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def run(a, root: str) -> tuple:
    import torch
    rows, out = [], {"gpu": torch.cuda.get_device_name(0)}
    ck = os.path.join(root, "ck")
    hidden = ptcgen.hidden_for_target("gpt", 2, 1, 1, 8, 32000, int(a.gb * 1e9))
    ptc = ptcgen.make_ptc("gpt", 2, 1, 1, 8, hidden, 32000)
    ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    d = Daemon(os.path.join(root, "d"), extra_flags=["--compact-below", "1"])
    try:
        d.start()
        d.cli("import", ck, "--job", "b", "--step", "1")
        d.cli("import", ck, "--job", "b", "--step", "2")
        d.cli("repartition", "--job", "b", "--step", "2", "--to", "tp=1,pp=1,dp=1")
        sd1, sd2 = d.step_dir("b", "1"), d.step_dir("b", "2")
        paths = [os.path.join(sd1, f"tp{t}-pp0.safetensors") for t in range(2)]
        merged = [os.path.join(sd2, "tp0-pp0.safetensors")]
        sizes = [os.path.getsize(p) for p in paths]
        msize = os.path.getsize(merged[0])
        total = sum(sizes)
        warm(paths + merged)
        base = pinned_baseline(sizes)
        mbase = pinned_baseline([msize])
        out.update(bytes=total, pinned_s=base, strided_bytes=msize, strided_pinned_s=mbase, stage=a.stage,
                   variants={})
        for name, variant in (VARIANTS.items() if a.sweep else [("default", {})]):
            env = {**({"PTCFS_GPU_STAGE": a.stage} if a.stage else {}), **variant}
            v = {"shards": load_in_child(paths, env), "strided": load_in_child(merged, env)}
            out["variants"][name] = v
            print(f"{name}: shards {gbps(total, v['shards']['s'])} ({summary(v['shards'])}), "
                  f"strided {gbps(msize, v['strided']['s'])} ({summary(v['strided'])})", file=sys.stderr)
        ours = out["variants"]["default"]["shards"]["s"]
        mours = out["variants"]["default"]["strided"]["s"]
        users = users_load(paths)
        out["users_s"] = users
        rows.append(row("gpu", f"load {total / 1e9:.1f} GB of shards into GPU memory vs cudaMemcpy from pinned",
                        gbps(total, ours), gbps(total, base), base / ours, ">= 0.8", base / ours >= 0.8))
        rows.append(row("gpu", "  the same vs safetensors load_file through the mount + .cuda()",
                        gbps(total, ours), gbps(total, users), users / ours, "> 1", users / ours > 1))
        rows.append(row("gpu", "strided shard (tp2 -> tp1, left in place) vs cudaMemcpy from pinned",
                        gbps(msize, mours), gbps(msize, mbase), mbase / mours, ">= 0.6", mbase / mours >= 0.6))
    finally:
        d.stop()
    return rows, out


def live_run(a, root: str) -> tuple:
    """The --live measurement (module docstring)."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    from live_local import reshard_all
    from live_worker import oracle_state
    from ptcfs import live

    frm, to = (2, 2, 1), (1, 2, 2)
    hidden = ptcgen.hidden_for_target("gpt", 2, 2, 1, 8, 32000, int(a.live_gb * 1e9))
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, 8, hidden, 32000)
    full = ptcgen.full_tensors(ptc, 0)
    states = [{n: t.to("cuda:0") for n, t in oracle_state(ptc, full, frm, r).items()} for r in range(4)]
    del full
    total = sum(t.numel() * t.element_size() for st in states for t in st.values())
    out = {"gpu": torch.cuda.get_device_name(0), "state_bytes": total, "budgets": {}}
    rows = []
    with live.NcclComm(rank=0, world=1, device="cuda:0") as comm:
        for budget in (64 << 20, 1 << 30):  # the default staging budget, and a large one (fewer rounds)
            runs = []
            for _ in range(3):
                sync()
                t0 = time.perf_counter()
                new, st = reshard_all(states, ptc, frm, to, comm, staging_bytes=budget)
                sync()
                runs.append(time.perf_counter() - t0)
                del new
            moved = st["plan"]["bytes_min"]
            assert st["moved"] == moved
            if "d2d_s" not in out:
                src = torch.empty(moved, dtype=torch.uint8, device="cuda:0")
                dst = torch.empty_like(src)
                out["d2d_s"] = timed_best(5, lambda: dst.copy_(src))
                del src, dst
            best, d2d = min(runs), out["d2d_s"]
            out["budgets"][budget] = {"runs": runs, "moved": moved, "rounds": st["rounds"]}
            print(f"live: {total / 1e9:.2f} GB state, {moved / 1e9:.2f} GB moved in {st['rounds']} rounds "
                  f"(staging {budget >> 20} MiB), runs {', '.join(f'{r:.4f}' for r in runs)} s", file=sys.stderr)
            rows.append(row("gpu", f"live reshard of {total / 1e9:.1f} GB tp2,pp2,dp1 -> tp1,pp2,dp2 over NCCL on one "
                            f"GPU, staging {budget >> 20} MiB ({st['rounds']} rounds; {moved / 1e9:.2f} GB moved, "
                            "the plan's minimum) vs a device copy of those bytes",
                            gbps(moved, best), gbps(moved, d2d), d2d / best, "figure", None))
    return rows, out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        s, stats = ptcfs_load(sys.argv[2:])
        print(json.dumps({"s": s, "stats": stats}))
        return 0

    def configure(ap):
        ap.add_argument("--gb", type=float, default=4.0, help="checkpoint size in GB")
        ap.add_argument("--sweep", action="store_true", help="also time the staging tunables")
        ap.add_argument("--stage", choices=("copy", "pread"), default=None,
                        help="PTCFS_GPU_STAGE of the default load (and of the sweep's other variants)")
        ap.add_argument("--live", action="store_true", help="time a live reshard over NCCL instead")
        ap.add_argument("--live-gb", type=float, default=2.0, help="the live reshard's state in GB")
    return standalone(__doc__, configure, lambda a, root: (live_run if a.live else run)(a, root))


if __name__ == "__main__":
    sys.exit(main())
