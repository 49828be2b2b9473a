#!/usr/bin/env python3
"""The elastic llama example (examples/elastic_llama) at length: its scenario with ITERS
iterations per segment (four live mesh changes, four through DCP in the mount) against a run that
never changed, on one daemon. Reports the largest relative loss difference (tolerance 1e-5), the
live changes' bytes against what the ranks lacked, and the scenario's time.

    $PTCFS_PYTHON bench/bench_elastic_llama.py [--iters 6] [--json FILE]     (root: it mounts FUSE)
"""

import json
import os
import subprocess
import sys
import time

from bench_lib import REPO, Daemon, row, secs, standalone

SECTION = "elastic_llama"
SCENARIO = os.path.join(REPO, "examples", "elastic_llama", "scenario.py")


def run(iters: int, root: str) -> tuple:
    work = os.path.join(root, "work")
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, SCENARIO, "--daemon", d.addr, "--mount", d.mnt, "--workdir", work,
                            "--iters", str(iters)], capture_output=True, text=True, timeout=3600)
        took = time.monotonic() - t0
    finally:
        d.stop()
    if r.returncode != 0 or not r.stdout.rstrip().endswith("scenario: OK"):
        raise SystemExit(f"bench_elastic_llama: the scenario failed\n{r.stdout}\n{r.stderr[-4000:]}")
    ref = json.load(open(os.path.join(work, "ref.json")))["iterations"]
    got = [x for run_ in "ABCDE" for x in json.load(open(os.path.join(work, f"run{run_}.json")))["iterations"]]
    worst = max(abs(g["loss"] - x["loss"]) / abs(x["loss"]) for g, x in zip(got, ref))
    moves = json.load(open(os.path.join(work, "runA.json")))["moves"]
    received = sum(x["received"] for m in moves for x in m["ranks"])
    lacked = sum(x["min"] for m in moves for x in m["ranks"])
    print(f"  {len(got)} iterations, 8 mesh changes: max relative loss difference {worst:.1e}; live changes "
          f"received {received} bytes, lacked {lacked}; {took:.0f} s", flush=True)
    rows = [row(SECTION, f"elastic llama, {len(got)} iterations through 4 live and 4 DCP mesh changes: max relative "
                f"loss difference to a run that never changed", f"{worst:.1e}", "1e-05", None, "<= 1e-5",
                worst <= 1e-5),
            row(SECTION, "elastic llama: live changes' bytes received / what the ranks lacked", str(received),
                str(lacked), received / lacked, "= 1", received == lacked)]
    return rows, {"iterations": len(got), "worst": worst, "received": received, "lacked": lacked, "seconds": took}


def main() -> int:
    def configure(ap):
        ap.add_argument("--iters", type=int, default=6, help="iterations per segment")
    return standalone(__doc__, configure, lambda a, root: run(a.iters, root))


if __name__ == "__main__":
    sys.exit(main())
