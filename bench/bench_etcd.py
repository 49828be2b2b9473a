#!/usr/bin/env python3
"""The price of etcd: commit latency of a repartition on 3 and 8 loopback daemons with --etcd
against the same cluster in static mode (cluster.json), and the time from a new daemon's start
to its appearance in another node's `ptcfs status`.

A small checkpoint (--mb, default 20 MB) is imported; repartitions then alternate between two
layouts on every node, so each moves the same bytes in both modes. Each side's median round is
printed; etcd runs as one local member on loopback.

    $PTCFS_PYTHON bench/bench_etcd.py [--mb 20] [--rounds 5] [--json FILE]
"""

import os
import statistics
import subprocess
import sys
import time

from bench_lib import ptcgen, row, secs, standalone  # noqa: E402  (also puts tests/ on the path)
from cluster_util import Cluster  # noqa: E402
from etcd_util import Etcd, EtcdCluster, live_ids  # noqa: E402

SECTION = "etcd"


def repartition_rounds(c, n: int, ck: str, rounds: int) -> list:
    """Wall seconds of each `ptcfs repartition` (CLI to reply), alternating dp=n and dp=1."""
    c[0].cli("import", ck, "--job", "bench", "--step", "1")
    walls = []
    for i in range(rounds):
        to = f"tp=2,pp=1,dp={n}" if i % 2 == 0 else "tp=2,pp=1,dp=1"
        t0 = time.perf_counter()
        c[i % n].cli("repartition", "--job", "bench", "--step", "1", "--to", to)
        walls.append(time.perf_counter() - t0)
    return walls


def run(mb: float, rounds: int, root: str) -> tuple:
    hidden = ptcgen.hidden_for_target("gpt", 2, 1, 1, 4, 8000, int(mb * 1e6))
    ptc = ptcgen.make_ptc("gpt", 2, 1, 1, 4, hidden, 8000)
    ck = os.path.join(root, "ck")
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    print(f"checkpoint: {summary['bytes'] / 1e6:.0f} MB", flush=True)
    rows, raw = [], {}
    for n in (3, 8):
        with Cluster(os.path.join(root, f"static{n}"), n) as c:
            static = repartition_rounds(c, n, ck, rounds)
        etcd_root = os.path.join(root, f"etcd{n}")
        with Etcd(etcd_root) as etcd, EtcdCluster(etcd_root, etcd, n + 1, lease_ttl=10) as c:
            c.start(*range(n))
            with_etcd = repartition_rounds(c, n, ck, rounds)
            # A new daemon: from its start to its appearance in n0's status.
            t0 = time.perf_counter()
            c.start(n)  # returns once it answers its own status and its mount is live
            while f"n{n}" not in live_ids(c[0]):
                time.sleep(0.005)
            join = time.perf_counter() - t0
        s, e = statistics.median(static), statistics.median(with_etcd)
        raw[n] = {"static_s": static, "etcd_s": with_etcd, "join_s": join}
        print(f"{n} daemons: repartition median {s * 1e3:.1f} ms static, {e * 1e3:.1f} ms with etcd "
              f"(+{(e - s) * 1e3:.1f} ms); a new daemon listed by n0 {join:.2f} s after its start", flush=True)
        rows.append(row(SECTION, f"{n}-daemon repartition commit, etcd vs static", secs(e), secs(s), s / e,
                        "+ms, not s", e - s < 0.5))
        rows.append(row(SECTION, f"{n}+1st daemon: start to listed in status", secs(join), "", None, "", None))
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--mb", type=float, default=20, help="checkpoint size in MB (10^6 bytes)")
        ap.add_argument("--rounds", type=int, default=5, help="repartitions timed per mode and size")
    return standalone(__doc__, configure, lambda a, root: run(a.mb, a.rounds, root))


if __name__ == "__main__":
    sys.exit(main())
