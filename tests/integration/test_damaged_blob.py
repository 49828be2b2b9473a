"""A blob cut short behind the daemon's back (disk trouble, a careless hand): reads of the
bytes it lost fail with EIO and a log line, quickly, and everything else reads as before."""

import errno
import os
import subprocess

from ptcfs_harness import PTCFS, cmp_files, errno_of, read_all


def test_read_past_a_truncated_blob_is_eio_not_a_hang(daemon, make_ckpt):
    ck = make_ckpt("gpt", style="gpt", tp=2, pp=2, layers=4, hidden=256, vocab=1000, seed=5)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "1")
    blobs = os.path.join(daemon.data, "blobs")
    # Import writes one blob per shard; cut the largest one to half its size.
    victim = max((os.path.join(blobs, b) for b in os.listdir(blobs)), key=os.path.getsize)
    size = os.path.getsize(victim)
    daemon.stop(cleanup_mount=False)
    os.truncate(victim, size // 2)
    daemon.start()

    step = daemon.step_dir("gpt", "1")
    failed, intact = [], []
    for t, p in ((0, 0), (1, 0), (0, 1), (1, 1)):
        name = os.path.basename(ck.shard_path(t, p))
        # A child process, so that a hang would show as a timeout rather than stall the test.
        r = subprocess.run(["cat", os.path.join(step, name)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        (failed if r.returncode else intact).append((t, p))
        if r.returncode:
            assert "Input/output error" in r.stderr, r.stderr
            assert errno_of(read_all, os.path.join(step, name)) == errno.EIO
    assert len(failed) == 1, f"expected exactly the truncated shard to fail, got {failed}"
    for t, p in intact:  # the mount's rank files are canonical, as the generator writes them
        cmp_files(os.path.join(step, os.path.basename(ck.shard_path(t, p))), ck.shard_path(t, p))
    assert "is shorter than its metadata says" in daemon.log_tail()
    # The daemon still serves its control port.
    subprocess.run([PTCFS, "--daemon", daemon.addr, "status"], check=True, capture_output=True, timeout=10)
