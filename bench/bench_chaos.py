#!/usr/bin/env python3
"""Chaos soak, long (tests/integration/chaos_util.py; `make test` runs 150 s of it): random
repartitions, saves, removals and dataset progress on 3 daemons and 3 etcd members, under SIGKILL,
SIGSTOP and etcd member kills (quorum lost now and then), with readers checking every byte, for
--seconds (600 in `make bench`), seed --seed. Reported: operations, faults (and how many landed
mid-operation), bytes read and checked, convergence points, the longest CLI call and read syscall
against their deadlines, and the promises broken (the budget: none).

    $PTCFS_PYTHON bench/bench_chaos.py [--seconds 600] [--seed 1]
"""

import os
import shutil
import sys

from bench_lib import row, standalone
from chaos_util import CLI_DEADLINE_S, READ_DEADLINE_S, Soak

SECTION = "chaos"


def run(seconds: float, seed: int, root: str) -> tuple:
    os.makedirs(root, exist_ok=True)
    soak = Soak(root, seed=seed, seconds=seconds, convergence_every=120)
    s = soak.run()
    ok = not soak.violations
    rows = [
        row(SECTION, f"seed {seed}, {s['seconds']:.0f} s: {s['operations']} operations ({s['succeeded']} ok, "
            f"{s['failed']} refused, {s['unknown']} unknown), {s['faults']} faults ({s['faults_mid_operation']} "
            f"mid-operation), {s['convergence_points']} convergence points", f"{len(soak.violations)} broken",
            "", None, "0 promises broken", ok),
        row(SECTION, f"reads checked: {s['reads']} whole files ({s['read_bytes'] / 1e9:.2f} GB) and {s['open_reads']} "
            f"held open across changes, {s['read_errors']} failed while a node was faulted",
            f"{s['max_read_syscall_s']:.2f} s longest read", f"{READ_DEADLINE_S:.0f} s deadline", None,
            "within the deadline", s["max_read_syscall_s"] <= READ_DEADLINE_S),
        row(SECTION, "longest CLI call", f"{s['max_cli_s']:.1f} s", f"{CLI_DEADLINE_S:.0f} s deadline", None,
            "within the deadline", s["max_cli_s"] <= CLI_DEADLINE_S),
    ]
    for v in soak.violations[:20]:
        print("broken:", v, file=sys.stderr)
    if soak.violations:  # the run's log outlives the scratch folder
        kept = f"/var/tmp/ptcfs-chaos-seed{seed}.log"
        shutil.copyfile(os.path.join(root, "chaos.log"), kept)
        print(f"the run's events: {kept}", file=sys.stderr)
    return rows, {"stats": s, "violations": soak.violations, "seed": seed}


def main() -> int:
    def configure(ap):
        ap.add_argument("--seconds", type=float, default=600, help="length of the soak")
        ap.add_argument("--seed", type=int, default=1, help="the seed of operations and faults")
    return standalone(__doc__, configure, lambda a, root: run(a.seconds, a.seed, root))


if __name__ == "__main__":
    sys.exit(main())
