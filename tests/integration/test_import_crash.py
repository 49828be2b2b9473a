"""Killing the daemon in the middle of an import leaves the step absent or complete, and no orphan blob.

Each case stops the daemon at a named point of the commit path (PTCFS_FAILPOINT, daemon/store/failpoint.h),
so it asserts the window it claims to hit: before the commit the step is absent after a restart; once the
metadata batch is written (inside the commit, before the new version is published) and after the commit it
is complete.
"""

import os
import subprocess

import pytest

from ptcfs_harness import PTCFS, ls_jobs, verify_step

WINDOWS = [
    ("import.copied", "absent"),    # blobs written and synced, nothing committed
    ("commit.before", "absent"),    # prepared; the metadata batch not written
    ("commit.written", "complete"),  # inside the commit: batch written, version not published
    ("commit.after", "complete"),   # published, the CLI not yet answered
]


@pytest.mark.parametrize("point,outcome", WINDOWS)
def test_kill9_at_each_window_of_an_import(daemon, make_ckpt, point, outcome):
    ck = make_ckpt(tp=2, pp=2, layers=4, hidden=256, vocab=1000)
    daemon.cli("import", ck.path, "--job", "j", "--step", "0")  # one step there before, untouched throughout
    daemon.stop(cleanup_mount=False)
    daemon.env = {"PTCFS_FAILPOINT": point}
    daemon.start()
    cli = subprocess.Popen([PTCFS, "--daemon", daemon.addr, "import", ck.path, "--job", "j", "--step", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    daemon.wait_log(f"failpoint {point} reached")
    daemon.kill9()
    _, err = cli.communicate(timeout=30)
    assert cli.returncode != 0 and "ptcfs: error:" in err, err  # the reply never came
    daemon.env = {}
    daemon.start()

    steps = ls_jobs(daemon).get("j", [])
    if outcome == "complete":
        assert steps == ["0", "1"], (point, steps)
        verify_step(daemon, "j", "1", ck, full_views=False)
    else:
        assert steps == ["0"], (point, steps)
        assert not os.path.exists(daemon.step_dir("j", "1"))
    verify_step(daemon, "j", "0", ck, full_views=False)
    # One blob per rank file of every step that exists, nothing else: the interrupted attempt left no orphan.
    blobs = os.listdir(os.path.join(daemon.data, "blobs"))
    assert len(blobs) == 4 * len(steps), (point, steps, blobs)
    # The name is free again (absent) or taken (complete).
    r = daemon.cli("import", ck.path, "--job", "j", "--step", "1", check=False)
    assert (r.returncode == 0) == (outcome == "absent"), r.stderr
