#!/usr/bin/env python3
"""A step of many tensors (an MoE-sized model's count): 100,000 small tensors, half split along
dimension 0 and half along 1, imported at tp=2, then repartitioned back and forth between tp=2 and
dp=2 (tp=1) --repartitions times, then between dp=1 and dp=2 at tp=2 (a change that re-splits no
tensor) as many times. Reported: the daemon's anonymous memory after the last repartition against
its figure after the import (goal: within 1.5x, docs/OPERATIONS.md "Memory"), the time of a
repartition (goal: a 100,000-tensor one under 1 s, and a dp-only one in under half of that), and
those of the import and of a restart of the daemon holding the step.
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
    peak = 0.0

    def alternate(a: str, b: str) -> list:
        """reps repartitions to a, b, a, ...: the time of each; peak follows the daemon's memory."""
        nonlocal peak
        out = []
        for r in range(reps):
            t0 = time.perf_counter()
            d.cli("repartition", "--job", "m", "--step", "1", "--to", a if r % 2 == 0 else b)
            out.append(time.perf_counter() - t0)
            peak = max(peak, anon_mb(d.proc.pid))
        return out

    try:
        d.start()
        t0 = time.perf_counter()
        d.cli("import", ck, "--job", "m", "--step", "1")
        imported = time.perf_counter() - t0
        after_import = anon_mb(d.proc.pid)
        peak = after_import
        times = alternate("tp=1,pp=1,dp=2", "tp=2,pp=1,dp=1")
        # Back at tp=2 (after an odd count), then a dp-only change from there, and back.
        d.cli("repartition", "--job", "m", "--step", "1", "--to", "tp=2,pp=1,dp=1")
        dp_times = alternate("tp=2,pp=1,dp=2", "tp=2,pp=1,dp=1")
        after = anon_mb(d.proc.pid)
        # A restart with the step: until `ptcfs status` answers and the mount is live.
        d.stop()
        t0 = time.perf_counter()
        d.start()
        restarted = time.perf_counter() - t0
    finally:
        d.stop()
    median = sorted(times)[len(times) // 2]
    dp_median = sorted(dp_times)[len(dp_times) // 2]
    print(f"  {n} tensors: import {imported:.2f} s, {reps} repartitions tp=2 <-> dp=2 (median {median:.2f} s), "
          f"{reps} dp=1 <-> dp=2 at tp=2 (median {dp_median:.2f} s); "
          f"anonymous memory {after_import:.0f} MB after the import, {after:.0f} MB after the last repartition "
          f"(peak {peak:.0f} MB)", flush=True)
    rows = [row(SECTION, f"daemon anonymous memory after {2 * reps + 1} repartitions of a {n}-tensor step / after its import "
                "(ratio: after / import)", f"{after:.0f} MB", f"{after_import:.0f} MB", after / after_import,
                "<= 1.5", after / after_import <= 1.5),
            row(SECTION, f"repartition of a {n}-tensor step, tp=2 <-> dp=2 (median of {reps})", secs(median), "1 s",
                1.0 / median, "> 1 (under 1 s)", median < 1.0),
            row(SECTION, f"dp-only repartition of a {n}-tensor step, dp=1 <-> dp=2 at tp=2 (median of {reps}) / "
                "the tp change", secs(dp_median), secs(median), dp_median / median, "<= 0.5",
                dp_median / median <= 0.5),
            row(SECTION, f"import of a {n}-tensor step", secs(imported), "", None, "", None),
            row(SECTION, f"restart of the daemon holding a {n}-tensor step, to serving", secs(restarted), "", None,
                "", None)]
    raw = {"tensors": n, "import_s": imported, "restart_s": restarted, "repartition_s": times,
           "dp_repartition_s": dp_times, "anon_mb": {"import": after_import, "last": after, "peak": peak}}
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--tensors", type=int, default=100000)
        ap.add_argument("--repartitions", type=int, default=20)
    return standalone(__doc__, configure, lambda a, root: run(a.tensors, a.repartitions, root))


if __name__ == "__main__":
    sys.exit(main())
