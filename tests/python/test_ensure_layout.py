"""ensure_layout against a real daemon: idempotent, and from four processes at once exactly
one repartition happens."""

import json
import multiprocessing as mp
import os
import time

import pytest

import ptcfs
import ptcgen


def import_step(daemon, tmp_path, target_mb=None, tp=2, pp=2):
    ck = str(tmp_path / "ck")
    ptc = ptcgen.make_ptc("gpt", tp, pp, 1, layers=4, hidden=ptcgen.hidden_for_target(
        "gpt", tp, pp, 1, 4, 1000, int(target_mb * 1e6)) if target_mb else 64, vocab=1000)
    ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    with daemon.client() as c:
        c.import_dir(ck, "j", "10")
    return ptc


def _rank(addr, mount, barrier, out):
    barrier.wait()
    t0 = time.monotonic()
    try:
        r = ptcfs.ensure_layout("j", 10, 1, 2, 2, mount=mount, daemon=addr, timeout=60)
        out.put({"repartitioned": r["repartitioned"], "refused": r["refused"],
                 "par": r["ptc"]["parallelism"], "s": time.monotonic() - t0})
    except Exception as e:  # reported to the test, which fails on it
        out.put({"error": repr(e)})


def test_four_ranks_at_once_repartition_exactly_once(daemon, tmp_path):
    import_step(daemon, tmp_path, target_mb=60)  # large enough that the callers overlap
    with daemon.client() as c:
        assert c.ls("j/10")["version"] == 1
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(daemon.addr, daemon.mnt if i % 2 else None, barrier, out))
             for i in range(4)]  # half find the mount through the daemon's status
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    print("ensure_layout from 4 processes:", results)
    assert all("error" not in r for r in results), results
    assert all(r["par"] == {"tp": 1, "pp": 2, "dp": 2} for r in results)
    assert sum(r["repartitioned"] for r in results) == 1, results
    with daemon.client() as c:
        assert c.ls("j/10")["version"] == 2  # exactly one new version
    with open(os.path.join(daemon.mnt, "j", "10", "ptc.json")) as f:
        assert json.load(f)["parallelism"] == {"tp": 1, "pp": 2, "dp": 2}


def test_idempotent_and_clear_errors(daemon, tmp_path):
    import_step(daemon, tmp_path)
    first = ptcfs.ensure_layout("j", "10", 4, 1, 1, daemon=daemon.addr)
    assert first["repartitioned"] is True and first["result"]["to"] == {"tp": 4, "pp": 1, "dp": 1}
    again = ptcfs.ensure_layout("j", "10", 4, 1, 1, mount=daemon.mnt, daemon=daemon.addr)
    assert again["repartitioned"] is False and again["result"] is None
    with daemon.client() as c:
        assert c.ls("j/10")["version"] == 2
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.ensure_layout("j", "11", 1, 1, 1, daemon=daemon.addr)
    assert e.value.code == "not_found" and "'11'" in e.value.message
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.ensure_layout("j", "10", 1, 8, 1, daemon=daemon.addr)
    assert e.value.code == "invalid_argument" and "more pipeline stages (8) than layers (4)" in e.value.message


def test_a_mount_that_never_shows_the_layout_times_out(daemon, tmp_path):
    import_step(daemon, tmp_path)
    fake = tmp_path / "fake" / "j" / "10"
    fake.mkdir(parents=True)
    (fake / "ptc.json").write_text(json.dumps({"parallelism": {"tp": 2, "pp": 2, "dp": 1}}))
    t0 = time.monotonic()
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.ensure_layout("j", "10", 1, 1, 1, mount=str(tmp_path / "fake"), daemon=daemon.addr, timeout=1)
    assert e.value.code == "deadline_exceeded" and "does not show it" in e.value.message
    assert 1 <= time.monotonic() - t0 < 10


class FakeLs:
    """A client whose `ls` answers from a script (the v1 daemon has no pending steps)."""

    def __init__(self, answers):
        self.answers = list(answers)

    def ls(self, path):
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, Exception):
            raise a
        return a


def test_wait_committed(daemon, tmp_path):
    import_step(daemon, tmp_path)
    assert ptcfs.wait_committed("j", 10, daemon=daemon.addr)["version"] == 1
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.wait_committed("j", 99, daemon=daemon.addr, timeout=0.3)
    assert e.value.code == "deadline_exceeded" and "j/99 is still not listed" in e.value.message
    fake = FakeLs([ptcfs.Error("not_found", "x"), {"state": "pending"}, {"state": "committed", "version": 1}])
    assert ptcfs.wait_committed("j", 5, client=fake, poll=0.001)["version"] == 1
    fake = FakeLs([{"state": "pending", "bytes_written": 3, "bytes_total": 9}])
    with pytest.raises(ptcfs.Error, match=r"j/5 is still pending \(3 of 9 bytes\)"):
        ptcfs.wait_committed("j", 5, client=fake, timeout=0.2, poll=0.001)
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.wait_committed("j", 5, client=FakeLs([ptcfs.Error("permission_denied", "no")]))
    assert e.value.code == "permission_denied"


def test_a_global_batch_the_datasets_lack_is_taken_in_one_commit_with_the_step(daemon, tmp_path):
    """With global_batch, the layout already shown but the dataset at another batch: one
    repartition (the step's version kept: only the dataset changes), then nothing."""
    import_step(daemon, tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(64)))
    with daemon.client() as c:
        c.dataset_add("j", "train", "jsonl", 1, 8, [str(data)], dp=1)
    state = os.path.join(daemon.mnt, "j", "data", "train", "state.json")
    r = ptcfs.ensure_layout("j", 10, 2, 2, 1, mount=daemon.mnt, daemon=daemon.addr, global_batch=16)
    assert r["repartitioned"] is False  # the layout was there: "unchanged", the datasets re-split
    assert r["result"]["datasets"] == [{"name": "train", "from_dp": 1, "to_dp": 1, "from_global_batch": 8,
                                        "to_global_batch": 16}]
    with open(state) as f:
        assert json.load(f)["global_batch"] == 16
    with daemon.client() as c:
        assert c.ls("j/10")["version"] == 1
    again = ptcfs.ensure_layout("j", 10, 2, 2, 1, mount=daemon.mnt, daemon=daemon.addr, global_batch=16)
    assert (again["repartitioned"], again["result"]) == (False, None)  # shown already: nothing asked


def test_a_dataset_state_unreadable_at_ask_time_is_asked_for_later(daemon, tmp_path, monkeypatch):
    """_mount_batches cannot read a state.json when ensure_layout would ask: it does not ask
    without the batch (which left it waiting for a batch nobody would set); it asks once it can."""
    import_step(daemon, tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(64)))
    with daemon.client() as c:
        c.dataset_add("j", "train", "jsonl", 1, 8, [str(data)], dp=1)
    real, calls = ptcfs.elastic._mount_batches, []

    def flaky(mount, job):
        calls.append(1)
        return None if len(calls) <= 2 else real(mount, job)
    monkeypatch.setattr(ptcfs.elastic, "_mount_batches", flaky)
    r = ptcfs.ensure_layout("j", 10, 1, 2, 2, mount=daemon.mnt, daemon=daemon.addr, global_batch=16, timeout=30)
    assert r["repartitioned"] is True
    assert r["result"]["datasets"] == [{"name": "train", "from_dp": 1, "to_dp": 2, "from_global_batch": 8,
                                        "to_global_batch": 16}]
    with open(os.path.join(daemon.mnt, "j", "data", "train", "state.json")) as f:
        assert (json.load(f)["global_batch"]) == 16


class _BusyThenFree:
    """A client whose dataset_progress is refused as the daemon refuses it while a re-split of the
    dataset is prepared, `busy` times, then answers."""

    def __init__(self, busy, error=None):
        self.busy, self.calls = busy, []
        self.error = error or ptcfs.Error("failed_precondition", "dataset j/train is already being changed "
                                          "(a progress or a re-split is prepared)")

    def dataset_progress(self, job, name, consumed, epoch=None):
        self.calls.append((job, name, consumed, epoch))
        if len(self.calls) <= self.busy:
            raise self.error
        return {"consumed": consumed}


def test_record_dataset_progress_waits_out_a_re_split_and_raises_the_rest():
    c = _BusyThenFree(3)
    assert ptcfs.record_dataset_progress(c, "j", "train", 48, poll=0.01) == {"consumed": 48}
    assert c.calls == [("j", "train", 48, None)] * 4
    other = _BusyThenFree(1, ptcfs.Error("invalid_argument", "consumed 48 is not batch_offset 24 plus a multiple"))
    with pytest.raises(ptcfs.Error, match="not batch_offset"):
        ptcfs.record_dataset_progress(other, "j", "train", 48, poll=0.01)
    assert len(other.calls) == 1
    stuck = _BusyThenFree(10 ** 6)
    with pytest.raises(ptcfs.Error, match="already being changed"):
        ptcfs.record_dataset_progress(stuck, "j", "train", 48, timeout=0.2, poll=0.01)
