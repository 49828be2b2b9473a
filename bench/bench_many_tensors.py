#!/usr/bin/env python3
"""A step of many tensors (an MoE-sized model's count): 100,000 small tensors, half split along
dimension 0 and half along 1, imported at tp=2, then repartitioned back and forth between tp=2 and
dp=2 (tp=1) --repartitions times. Reported: the daemon's anonymous memory after the last repartition
against its figure after the import (goal: within 1.5x, docs/OPERATIONS.md "Memory"), and the time
of a repartition and of the import per tensor (goal: a 100,000-tensor repartition under 1 s).
The baseline of the memory row is the daemon itself after the import.

    $PTCFS_PYTHON bench/bench_many_tensors.py [--tensors 100000] [--repartitions 20]
"""

import os
import sys
import time

from bench_lib import Daemon, ptcgen, row, secs, standalone

SECTION = "many_tensors"


def anon_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/PID/status")


def make_ptc(n: int) -> dict:
    tensors = {f"layers.{i // 1000}.t{i % 1000:03d}.weight": {"dtype": "F32", "shape": [8, 8], "tp_dim": i % 2,
                                                               "layer": i // 1000} for i in range(n)}
    return {"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "num_layers": (n + 999) // 1000, "tensors": tensors}


def run(n: int, reps: int, root: str) -> tuple:
    ptc = make_ptc(n)
    ck = os.path.join(root, "ck")
    ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 1))
    d = Daemon(os.path.join(root, "d"))
    times = []
    try:
        d.start()
        t0 = time.perf_counter()
        d.cli("import", ck, "--job", "m", "--step", "1")
        imported = time.perf_counter() - t0
        after_import = anon_mb(d.proc.pid)
        peak = after_import
        for r in range(reps):
            to = "tp=1,pp=1,dp=2" if r % 2 == 0 else "tp=2,pp=1,dp=1"
            t0 = time.perf_counter()
            d.cli("repartition", "--job", "m", "--step", "1", "--to", to)
            times.append(time.perf_counter() - t0)
            peak = max(peak, anon_mb(d.proc.pid))
        after = anon_mb(d.proc.pid)
    finally:
        d.stop()
    median = sorted(times)[len(times) // 2]
    print(f"  {n} tensors: import {imported:.2f} s, {reps} repartitions tp=2 <-> dp=2 (median {median:.2f} s); "
          f"anonymous memory {after_import:.0f} MB after the import, {after:.0f} MB after the last repartition "
          f"(peak {peak:.0f} MB)", flush=True)
    rows = [row(SECTION, f"daemon anonymous memory after {reps} repartitions of a {n}-tensor step / after its import "
                "(ratio: after / import)", f"{after:.0f} MB", f"{after_import:.0f} MB", after / after_import,
                "<= 1.5", after / after_import <= 1.5),
            row(SECTION, f"repartition of a {n}-tensor step, tp=2 <-> dp=2 (median of {reps})", secs(median), "1 s",
                1.0 / median, "> 1 (under 1 s)", median < 1.0),
            row(SECTION, f"import of a {n}-tensor step", secs(imported), "", None, "", None)]
    raw = {"tensors": n, "import_s": imported, "repartition_s": times, "anon_mb": {"import": after_import,
                                                                                   "last": after, "peak": peak}}
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--tensors", type=int, default=100000)
        ap.add_argument("--repartitions", type=int, default=20)
    return standalone(__doc__, configure, lambda a, root: run(a.tensors, a.repartitions, root))


if __name__ == "__main__":
    sys.exit(main())
