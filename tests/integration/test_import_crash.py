"""Killing the daemon in the middle of an import leaves the step absent or complete, and no orphan blob."""

import os
import random
import subprocess
import time

from ptcfs_harness import PTCFS, ls_jobs, verify_step


def test_kill9_during_import_leaves_nothing_or_everything(daemon, make_ckpt):
    ck = make_ckpt(tp=2, pp=2, layers=4, hidden=1024, vocab=4000)  # ~140 MB: an import takes a little while
    rng = random.Random(5)
    outcomes = []
    # From early in validation to after the commit; jittered, seeded.
    for i, delay in enumerate([0.005, 0.05, 0.12, 0.25, 0.8]):
        step = str(i)
        cli = subprocess.Popen([PTCFS, "--daemon", daemon.addr, "import", ck.path, "--job", "j", "--step", step],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay * rng.uniform(0.8, 1.2))
        daemon.kill9()
        cli.communicate(timeout=30)
        daemon.start()
        steps = ls_jobs(daemon).get("j", [])
        blobs = os.listdir(os.path.join(daemon.data, "blobs"))
        if step in steps:
            outcomes.append("complete")
            verify_step(daemon, "j", step, ck, full_views=False)
        else:
            outcomes.append("absent")
            assert not os.path.exists(daemon.step_dir("j", step))
        # One blob per rank file of every step that exists, nothing else.
        assert len(blobs) == 4 * len(steps), (i, steps, blobs)
        if cli.returncode == 0:
            assert step in steps, "the CLI reported success but the step is gone"
    # Here: absent, absent, complete, complete, complete. Either outcome is correct; a slower machine
    # shifts the mix, which is why it is printed, not asserted.
    print("outcomes:", outcomes)
