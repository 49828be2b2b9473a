#!/usr/bin/env python3
"""Cold reads of a strided shard (issue: a cold read pulled the whole blob): one BF16 tensor of
N x N (512 MB at N = 16384) imported at tp=1 and repartitioned to tp=4, once along the last
dimension (each shard a quarter of every blob row: strided) and once along the first (contiguous),
then shard tp1 read whole through the mount with its blob out of the page cache (the daemon
restarted, so that no mapping keeps its pages; POSIX_FADV_DONTNEED). Baseline: a plain file of the
shard's size on the same disk, read cold the same way, in the same run. Reported: the time, best of
--rounds, and the bytes the daemon read from the disk for it (/proc/PID/io read_bytes) against the
shard's size.

    $PTCFS_PYTHON bench/bench_strided.py [--n 16384] [--rounds 3]
"""

import os
import sys
import time

from bench_lib import Daemon, drop_page_cache, ptcgen, row, secs, standalone

SECTION = "strided"


def read_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split(":")[1]) for line in f if line.startswith("read_bytes:"))


def read_whole(path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - t0


def one(n: int, tp_dim: int, rounds: int, root: str) -> dict:
    ptc = {"num_layers": 1, "parallelism": {"tp": 1, "pp": 1, "dp": 1},
           "tensors": {"w": {"dtype": "BF16", "shape": [n, n], "tp_dim": tp_dim}}}
    src = os.path.join(root, "ck")
    ptcgen.write_checkpoint(src, ptc, ptcgen.full_tensors(ptc, 1))
    d = Daemon(os.path.join(root, "d"))
    d.start()
    try:
        d.cli("import", src, "--job", "j", "--step", "1")
        d.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1,dp=1")
        shard = os.path.join(d.step_dir("j", "1"), "tp1-pp0.safetensors")
        size = os.path.getsize(shard)
        plain = os.path.join(root, "plain.bin")
        with open(plain, "wb") as f:
            f.write(os.urandom(size))
            os.fsync(f.fileno())
        blobs = os.path.join(d.data, "blobs")
        ours, base, disk = [], [], []
        for _ in range(rounds):
            d.stop()
            for b in os.listdir(blobs):
                drop_page_cache(os.path.join(blobs, b))
            drop_page_cache(plain)
            d.start()
            before = read_bytes(d.proc.pid)
            ours.append(read_whole(shard))
            disk.append(read_bytes(d.proc.pid) - before)
            base.append(read_whole(plain))
        return {"shard_bytes": size, "ptcfs_s": min(ours), "plain_s": min(base), "disk_bytes": min(disk)}
    finally:
        d.stop()


def run(n: int, rounds: int, root: str) -> tuple:
    rows, out = [], {}
    for what, dim in (("strided (tp along the last dimension)", 1), ("contiguous (tp along the first)", 0)):
        r = one(n, dim, rounds, os.path.join(root, f"dim{dim}"))
        out[f"tp_dim_{dim}"] = r
        mb = r["shard_bytes"] / 1e6
        rows.append(row(SECTION, f"cold read of a {mb:.0f} MB shard, {what}, vs a plain file", secs(r["ptcfs_s"]),
                        secs(r["plain_s"]), r["plain_s"] / r["ptcfs_s"], "", None))
        rows.append(row(SECTION, f"bytes read from disk for it, {what}", f"{r['disk_bytes'] / 1e6:.0f} MB",
                        f"{mb:.0f} MB", None, "<= 1.1 x the shard",
                        r["disk_bytes"] <= 1.1 * r["shard_bytes"]))
    return rows, out


def main() -> int:
    def configure(ap):
        ap.add_argument("--n", type=int, default=16384, help="the tensor is N x N BF16")
        ap.add_argument("--rounds", type=int, default=3, help="cold reads, the best is kept")
    return standalone(__doc__, configure, lambda a, root: run(a.n, a.rounds, root))


if __name__ == "__main__":
    sys.exit(main())
