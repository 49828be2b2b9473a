#!/usr/bin/env python3
"""Soak (issue 19's load test, long): 32 readers (16 threads, 16 processes) read random views
and byte ranges of a step through the mount and check every byte, while the step is repartitioned
back and forth, steps are saved into the mount and removed, and a dataset's progress moves
(tests/integration/load_util.py), for --seconds (600 in `make bench`). Reported: read latency
percentiles against the same readers on a tmpfs copy of the same files in the same run (no
changes there), throughput, the changes made, and the daemon's anonymous memory over the run.

    $PTCFS_PYTHON bench/bench_soak.py [--seconds 600]
"""

import os
import shutil
import sys

from bench_lib import Daemon, row, standalone
from load_util import Load, run_readers

SECTION = "soak"


def us(s: float) -> str:
    return f"{s * 1e6:.0f} us"


def run(seconds: float, root: str) -> tuple:
    rows, out = [], {}
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        load = Load(d, root)
        r = load.run(seconds)
        # The baseline: the same readers on a tmpfs copy of the files (one layout), no changes.
        shm = os.path.join("/dev/shm", f"ptcfs-soak-{os.getpid()}")
        os.makedirs(shm)
        try:
            refs = {}
            for rel, versions in load.refs.items():
                os.makedirs(os.path.dirname(os.path.join(shm, rel)), exist_ok=True)
                with open(os.path.join(shm, rel), "wb") as f:
                    f.write(versions[0])
                refs[rel] = versions[:1]
            base = run_readers(shm, refs, min(seconds, 60))
        finally:
            shutil.rmtree(shm, ignore_errors=True)
        rss = r["rss_anon_kb"]
        for q in ("50", "99"):
            ours, theirs = r["latency_s"][int(q)], base["latency_s"][int(q)]
            rows.append(row(SECTION, f"p{q} latency of a random read (1 B - 1 MiB), 32 readers, {seconds:.0f} s under "
                            f"changes, vs tmpfs", us(ours), us(theirs), theirs / ours, "", None))
        rows.append(row(SECTION, f"reads checked: {r['reads']} ({r['bytes'] / 1e9:.1f} GB), changes "
                         f"{r['changes']}, daemon RssAnon {min(rss) // 1024}-{max(rss) // 1024} MiB",
                         f"{r['bytes'] / seconds / 1e9:.2f} GB/s", f"{base['bytes'] / min(seconds, 60) / 1e9:.2f} GB/s",
                         None, "no error", True))
        out.update(ptcfs=r, tmpfs=base, seconds=seconds)
    finally:
        d.stop()
    return rows, out


def main() -> int:
    def configure(ap):
        ap.add_argument("--seconds", type=float, default=600, help="length of the soak")
    return standalone(__doc__, configure, lambda a, root: run(a.seconds, root))


if __name__ == "__main__":
    sys.exit(main())
