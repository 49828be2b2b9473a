"""The seeded chaos soak (tests/integration/chaos_util.py) in `make test`: a short, bounded run
(PTCFS_SOAK_SECONDS, 150 by default; PTCFS_SOAK_SEED, 1) of random repartitions, saves, removals and
dataset progress on 3 daemons and 3 etcd members, under SIGKILL, SIGSTOP and etcd member kills, with
readers checking every byte. `make bench` runs a longer one (bench/bench_chaos.py). A failure lists
each violated promise; the whole run, with times, is in chaos.log under the test's folder."""

import json
import os

from chaos_util import Soak
from ptcfs_harness import require_binaries


def test_a_seeded_chaos_soak_keeps_every_promise_under_faults(tmp_path):
    require_binaries()
    seconds = float(os.environ.get("PTCFS_SOAK_SECONDS", "150"))
    seed = int(os.environ.get("PTCFS_SOAK_SEED", "1"))
    soak = Soak(str(tmp_path), seed=seed, seconds=seconds, convergence_every=seconds / 2)
    stats = soak.run()
    print(json.dumps(stats))
    assert not soak.violations, (f"seed {seed}: {len(soak.violations)} violations:\n" + "\n".join(soak.violations) +
                                 "\n\nthe run:\n" + "\n".join(soak.events[-200:]))
    # The soak did what it is for: changes went through, faults landed, readers read.
    assert stats["succeeded"] >= 5 and stats["faults"] >= 5 and stats["faults_mid_operation"] >= 1, stats
    assert stats["reads"] >= 50 and stats["open_reads"] >= 10 and stats["convergence_points"] >= 2, stats
