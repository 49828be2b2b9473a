"""Daemon restarts: a clean stop unmounts; a restart (clean or after kill -9) serves the same bytes
under the same inode numbers."""

import errno
import os
import signal
import time

from ptcfs_harness import check_ls_step, is_mounted, ls_jobs, snapshot, verify_step


def _wait_unmounted(path, timeout=2.0):
    deadline = time.monotonic() + timeout
    while is_mounted(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not is_mounted(path)


def _compare(before, after):
    assert sorted(after) == sorted(before), "the mount's tree changed"
    for path, (h, ino, size) in before.items():
        h2, ino2, size2 = after[path]
        assert (h2, size2) == (h, size), f"{path}: content changed"
        if h != "dir":
            assert ino2 == ino, f"{path}: inode {ino} became {ino2}"


def _import(d, ck, job="gpt", step="100"):
    out = d.cli_json("import", ck.path, "--job", job, "--step", step, "--json")
    assert out["bytes"] == ck.summary["bytes"]


def test_restart_after_sigterm(daemon, make_ckpt):
    ck = make_ckpt("gpt", style="gpt", tp=2, pp=2, layers=4, hidden=128, vocab=1000, seed=11)
    _import(daemon, ck)
    ck2 = make_ckpt("gpt7", style="gpt", tp=1, pp=2, layers=3, hidden=64, vocab=500, seed=12)
    _import(daemon, ck2, "other", "7")
    before = snapshot(daemon.mnt)
    ls_before = daemon.cli_json("ls", "--json")
    step_before = daemon.cli_json("ls", "gpt/100", "--json")
    status_before = daemon.cli_json("status", "--json")

    rc = daemon.stop(cleanup_mount=False)
    assert rc == 0, f"ptcfsd exited {rc} on SIGTERM"
    assert _wait_unmounted(daemon.mnt), "mount still in /proc/mounts after the daemon exited on SIGTERM"

    daemon.start()
    _compare(before, snapshot(daemon.mnt))
    verify_step(daemon, "gpt", "100", ck)
    verify_step(daemon, "other", "7", ck2)
    assert daemon.cli_json("ls", "--json") == ls_before
    assert daemon.cli_json("ls", "gpt/100", "--json") == step_before
    check_ls_step(daemon, "gpt", "100", ck)
    status_after = daemon.cli_json("status", "--json")
    for k in ("jobs", "steps", "bytes_stored", "data", "mount", "listen"):
        assert status_after[k] == status_before[k], k

    # And once more, to be sure the restarted daemon's own state persists too.
    assert daemon.stop(cleanup_mount=False) == 0
    assert _wait_unmounted(daemon.mnt)
    daemon.start()
    _compare(before, snapshot(daemon.mnt))


def test_restart_after_kill9_stale_mount(daemon, make_ckpt):
    ck = make_ckpt("gpt", style="gpt", tp=2, pp=2, layers=4, hidden=128, vocab=1000, seed=13)
    _import(daemon, ck)
    before = snapshot(daemon.mnt)
    ls_before = ls_jobs(daemon)

    daemon.kill9()
    if is_mounted(daemon.mnt):
        # The FUSE connection is gone: the mount point answers ENOTCONN until someone unmounts it.
        try:
            os.listdir(daemon.mnt)
            stale_errno = None
        except OSError as e:
            stale_errno = e.errno
        assert stale_errno == errno.ENOTCONN, f"stale mount answered {stale_errno}"

    daemon.start()  # on the same mount point: it must clear the stale mount itself
    _compare(before, snapshot(daemon.mnt))
    verify_step(daemon, "gpt", "100", ck)
    assert ls_jobs(daemon) == ls_before

    # The daemon replaced the stale mount rather than stacking on it: after a clean stop nothing is left.
    assert daemon.stop(cleanup_mount=False) == 0
    assert _wait_unmounted(daemon.mnt), "a mount is left at the mount point after a clean stop"
    daemon.start()
    _compare(before, snapshot(daemon.mnt))


def test_sigint_stops_cleanly_and_unmounts(daemon, make_ckpt):
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=300)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.proc.wait(timeout=10) == 0
    assert not is_mounted(daemon.mnt)
    daemon.proc = None
    daemon.start()  # and the store is intact
    verify_step(daemon, "j", "1", ck)
