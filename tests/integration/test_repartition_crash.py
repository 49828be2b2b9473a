"""kill -9 of the daemon during a repartition: after a restart the step shows one complete layout, the
old or the new one, every view verifies against that layout's oracle, and no blob of the interrupted
attempt is left behind.

test_kill9_at_each_window_of_a_repartition stops the daemon at each named point of the commit path
(PTCFS_FAILPOINT, daemon/store/failpoint.h) and asserts the outcome of that window: the old layout before
the metadata batch is written, the new one from then on. The random-moment test below adds kills at
arbitrary moments (planning, compaction, the commit, after the reply); it asserts old-or-new for each
and that the new layout is there whenever the CLI had the reply, and prints which it was."""

import json
import random
import subprocess
import time

import pytest

from ptcfs_harness import PTCFS, verify_step
from repartition_util import (BLOB_NAME, Oracles, blob_usage, check_current, import_step, par_of, par_str,
                              read_ptc_json, reference_blob_usage, repartition, step_version, wait_for)

SEED = 20241121
# GPT, 24 layers, hidden 256: about 51 MB in 221 tensors of at most 1 MiB, so most repartitions
# compact (copy) tens of MB and take tens of milliseconds.
MODEL = dict(style="gpt", layers=24, hidden=256, vocab=1000)
START = (2, 2, 1)
TARGETS = [(4, 3, 1), (8, 1, 2), (1, 4, 1), (2, 6, 1), (8, 2, 1), (4, 8, 2), (1, 1, 1), (2, 2, 1)]


WINDOWS = [
    ("commit.before", "old"),   # compacted blobs written and synced; the metadata batch not written
    ("commit.written", "new"),  # inside the commit: batch written, the version not yet published
    ("commit.after", "new"),    # published; the old blobs not yet collected, the CLI not answered
]


@pytest.mark.parametrize("point,outcome", WINDOWS)
def test_kill9_at_each_window_of_a_repartition(daemon, make_ckpt, tmp_path, point, outcome):
    ck = make_ckpt("small", tp=2, pp=2, dp=1, seed=52, style="gpt", layers=4, hidden=128, vocab=500)
    import_step(daemon, ck, "w", "1")
    oracles = Oracles(str(tmp_path / "oracles"), ck, seed=52)
    to = (4, 1, 2)
    daemon.stop(cleanup_mount=False)
    daemon.env = {"PTCFS_FAILPOINT": point}
    daemon.start()
    cli = subprocess.Popen([PTCFS, "--daemon", daemon.addr, "repartition", "--job", "w", "--step", "1", "--to",
                            par_str(to)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    daemon.wait_log(f"failpoint {point} reached")
    daemon.kill9()
    _, err = cli.communicate(timeout=30)
    assert cli.returncode != 0 and "ptcfs: error:" in err, err
    daemon.env = {}
    daemon.start()
    want = START if outcome == "old" else to
    assert par_of(read_ptc_json(daemon, "w", "1")) == want, point
    check_current(daemon, "w", "1", oracles(want), 1 if outcome == "old" else 2, full_views=False)
    # A restart keeps exactly the blobs of the layout it shows: those of a daemon that made only the
    # repartitions that took effect.
    got = blob_usage(daemon)[:2]
    ref = reference_blob_usage(str(tmp_path / "ref"), ck, [] if outcome == "old" else [to], job="w", like=daemon)
    assert got == ref, (point, got, ref)


def test_kill9_during_repartition_leaves_old_or_new(daemon, make_ckpt, tmp_path):
    rng = random.Random(SEED)
    ck = make_ckpt("big", tp=START[0], pp=START[1], dp=START[2], seed=51, **MODEL)
    assert 40e6 < ck.summary["bytes"] < 70e6
    imported = ck.summary["bytes"]
    import_step(daemon, ck, "big", "1")
    oracles = Oracles(str(tmp_path / "oracles"), ck, seed=51)
    cur, version = START, 1
    committed = []  # the configurations that took effect, in order
    outcomes, usage = [], []

    for i, to in enumerate(TARGETS):
        # Skewed towards short delays (a repartition of this size takes ~30-100 ms), all in 0-300 ms.
        delay = 0.3 * rng.random() ** 2
        cmd = [PTCFS, "--daemon", daemon.addr, "repartition", "--job", "big", "--step", "1", "--to", par_str(to),
               "--json"]
        cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        daemon.kill9()
        out, err = cli.communicate(timeout=60)
        replied = cli.returncode == 0
        if replied:
            reply = json.loads(out)
            assert reply["to"] == {"tp": to[0], "pp": to[1], "dp": to[2]} and reply["version"] == version + 1, reply
        else:
            assert "ptcfs: error:" in err, f"the CLI failed without an error line: rc={cli.returncode}\n{err}"

        daemon.start()
        now = par_of(read_ptc_json(daemon, "big", "1"))
        what = (f"iteration {i}: {par_str(cur)} -> {par_str(to)}, killed after {delay * 1000:.0f} ms, "
                f"CLI rc={cli.returncode}: the restarted daemon shows {par_str(now)}")
        assert now in (cur, to), what
        if replied:
            assert now == to, what + " although the CLI had received the reply"
        if now == to:
            version += 1
            committed.append(to)
        assert step_version(daemon, "big", "1") == version, what
        outcomes.append((par_str(cur), par_str(to), round(delay * 1000), cli.returncode, "new" if now == to else "old"))
        cur = now
        check_current(daemon, "big", "1", oracles(cur), version, full_views=False)
        count, total, names = blob_usage(daemon)
        stray = sorted(n for n in names if not BLOB_NAME.match(n))
        assert not stray, f"{what}; files in the blob directory that are not blobs: {stray}"
        usage.append((count, total))

    print("kill outcomes (from, to, delay ms, CLI rc, layout after restart):", *outcomes, sep="\n  ")
    verify_step(daemon, "big", "1", oracles(cur))
    # The interrupted attempts have the layout they should have; a clean repartition still works after them.
    nxt = (4, 2, 1) if cur != (4, 2, 1) else (2, 4, 1)
    repartition(daemon, "big", "1", nxt, frm=cur, ptc=ck.ptc, version=version)
    version += 1
    committed.append(nxt)
    check_current(daemon, "big", "1", oracles(nxt), version, full_views=False)

    # No orphans: after a restart the blobs are exactly (in number and bytes) those of a daemon that
    # made only the repartitions that took effect, without interruptions.
    daemon.restart()
    got = blob_usage(daemon)[:2]
    want = reference_blob_usage(str(tmp_path / "ref"), ck, committed, job="big", like=daemon)
    assert got == want, (f"blobs (count, bytes) after the kills {got}, after the same repartitions without kills "
                         f"{want}; committed {committed}; outcomes {outcomes}")
    wait_for(lambda: blob_usage(daemon)[1] <= 2 * imported, 15,
             lambda: f"blobs hold {blob_usage(daemon)[1]} bytes, more than 2 x the {imported} imported; "
                     f"(count, bytes) after each restart: {usage}")
    check_current(daemon, "big", "1", oracles(nxt), version, full_views=False)


def test_kill9_during_repartition_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    """The same, with every re-cut slice left strided (no compaction): old or new, never a mix."""
    test_kill9_during_repartition_leaves_old_or_new(remap_daemon, make_ckpt, tmp_path)
