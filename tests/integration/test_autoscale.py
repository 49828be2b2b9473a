"""`ptcfs autoscale` with a real etcd and a real daemon: two jobs share 4 GPUs, each job's
latest step is repartitioned to its decision (bytes read back through the mount equal a
checkpoint written directly at that layout); one finishes and the other grows to more ranks
and a larger global batch (its step found already moved, as a controller that died between the
repartition and the decision leaves it); a second controller stands by while the first holds the
lease, takes over after the first is SIGKILLed, and resumes a change the daemon refused while down."""

import json
import os
import signal
import subprocess

import pytest

from dataset_util import state, write_jsonl
from etcd_util import Etcd
from ptcfs_harness import PTCFS, Checkpoint, Daemon, check_ls_step, require_binaries, verify_step
from repartition_util import Oracles, wait_for

P = "/ptcfs-autoscale"
# a: any count, kept at pp=2, so 2 or 4 GPUs; b: tp=2 kept, a global batch from 4 to 16.
A_JOB = {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300}}
B_JOB = {"min_gpus": 1, "max_gpus": 4, "batch": {"min": 4, "max": 16},
         "throughput": {"1": {"4": 50}, "2": {"4": 90, "8": 110}, "4": {"8": 200, "16": 260}}}


def decision(job, gpus, batch, tp, pp, dp, step, controller):
    return {"job": job, "queued": False, "gpus": gpus, "global_batch": batch, "tp": tp, "pp": pp, "dp": dp,
            "micro_batch": None, "step": step, "controller": controller}


def without_seq(d):
    return {k: v for k, v in d.items() if k != "seq"} if d else d


class Controllers:
    """`ptcfs autoscale` processes, each logging to its own file; killed at the end."""

    def __init__(self, root, etcd):
        self.root, self.etcd, self.procs = root, etcd, {}

    def args(self, cid, *extra):
        return [PTCFS, "autoscale", "--etcd", self.etcd.endpoints, "--gpus", "4", "--id", cid, "--lease-ttl", "2",
                "--retry", "0.5", *extra]

    def once(self, cid="once"):
        return subprocess.run(self.args(cid, "--once", "--json"), capture_output=True, text=True, timeout=120)

    def start(self, cid):
        log = open(os.path.join(self.root, cid + ".log"), "w")
        self.procs[cid] = subprocess.Popen(self.args(cid), stdout=log, stderr=log, start_new_session=True)
        log.close()

    def log(self, cid):
        with open(os.path.join(self.root, cid + ".log")) as f:
            return f.read()

    def kill(self, cid):
        p = self.procs.pop(cid)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)

    def stop(self):
        for cid in list(self.procs):
            self.kill(cid)


def test_two_jobs_share_one_finishes_the_other_grows_a_standby_takes_over(tmp_path):
    require_binaries()
    root = str(tmp_path)
    base_a = Checkpoint(os.path.join(root, "ck-a"), tp=2, pp=2, layers=2, hidden=128, vocab=512, seed=0)
    base_b = Checkpoint(os.path.join(root, "ck-b"), tp=2, pp=2, layers=2, hidden=128, vocab=512, seed=1)
    oracle_a, oracle_b = Oracles(root, base_a, 0), Oracles(root, base_b, 1)
    samples = os.path.join(root, "train.jsonl")
    write_jsonl(samples, 64, seed=3)
    d = Daemon(os.path.join(root, "daemon"))
    with Etcd(root) as etcd:
        ctl = Controllers(root, etcd)
        d.start()
        try:
            d.cli("import", base_a.path, "--job", "ja", "--step", "10")
            d.cli("import", base_b.path, "--job", "jb", "--step", "5")
            d.cli("import", base_b.path, "--job", "jb", "--step", "20")
            d.cli("dataset", "add", "--job", "jb", "--name", "train", "--format", "jsonl", "--seed", "1",
                  "--global-batch", "4", samples)
            etcd.ctl("put", f"{P}/queue/a", json.dumps({"job": A_JOB, "daemon": d.addr, "store_job": "ja",
                                                        "layout": {"pp": 2}}))
            etcd.ctl("put", f"{P}/queue/b", json.dumps({"job": B_JOB, "daemon": d.addr, "store_job": "jb",
                                                        "layout": {"tp": 2}}))

            # One pass: 4 GPUs split a 2 (tp1 pp2) + b 2 (tp2, batch 8): 180 + 110 samples/s.
            r = ctl.once()
            assert r.returncode == 0, r.stderr
            want_a = decision("a", 2, None, 1, 2, 1, "10", "once")
            want_b = decision("b", 2, 8, 2, 1, 1, "20", "once")
            printed = [json.loads(line) for line in r.stdout.splitlines()]
            assert [without_seq(x) for x in printed] == [want_a, want_b]
            assert sorted(x["seq"] for x in printed) == [1, 2]
            assert without_seq(etcd.get_json(f"{P}/decision/a")) == want_a
            assert without_seq(etcd.get_json(f"{P}/decision/b")) == want_b
            check_step(d, "ja", "10", oracle_a((1, 2, 1)))
            check_step(d, "jb", "20", oracle_b((2, 1, 1)))
            check_step(d, "jb", "5", base_b)  # not the latest: left as it was
            # The datasets keep their batch: the decision's 8 is the launcher's to apply when it
            # resumes the job (a segment may still run at the old batch).
            st = state(d, "jb", "train")
            assert (st["global_batch"], st["dp"]) == (4, 1)
            assert etcd.keys(f"{P}/leader") == []  # --once gives the lead back

            # Again: nothing changed, nothing done.
            versions = {s: d.cli_json("ls", s, "--json")["version"] for s in ("ja/10", "jb/20")}
            r = ctl.once("again")
            assert (r.returncode, r.stdout) == (0, ""), r.stderr
            assert {s: d.cli_json("ls", s, "--json")["version"] for s in ("ja/10", "jb/20")} == versions

            # c1 leads; c2 stands by; --once is refused while c1 holds the lease.
            ctl.start("c1")
            wait_for(lambda: (etcd.get_json(f"{P}/leader") or {}).get("id") == "c1", 30, "c1 to lead")
            ctl.start("c2")
            wait_for(lambda: "standing by" in ctl.log("c2"), 30, lambda: "c2 to stand by: " + ctl.log("c2"))
            r = ctl.once("third")
            assert r.returncode == 1 and '"id":"c1"' in r.stderr and "nothing done" in r.stderr, r.stderr

            # a finishes: b grows to 4 GPUs (tp2 dp2) and a batch of 16. As if a controller had died
            # after repartitioning jb/20 and before writing the decision, the step is already there:
            # c1 finds it so (no new version) and writes the decision.
            d.cli("repartition", "--job", "jb", "--step", "20", "--to", "tp=2,pp=1,dp=2", "--global-batch", "16")
            moved = d.cli_json("ls", "jb/20", "--json")["version"]
            etcd.ctl("del", f"{P}/queue/a")
            want_b = decision("b", 4, 16, 2, 1, 2, "20", "c1")
            wait_for(lambda: without_seq(etcd.get_json(f"{P}/decision/b")) == want_b, 60,
                     lambda: "b to grow: " + ctl.log("c1"))
            wait_for(lambda: etcd.keys(f"{P}/decision/a") == [], 30, "a's decision to go")
            check_step(d, "jb", "20", oracle_b((2, 1, 2)))
            assert d.cli_json("ls", "jb/20", "--json")["version"] == moved
            assert "jb/20 at {}: already tp=2,pp=1,dp=2".format(d.addr) in ctl.log("c1")
            st = state(d, "jb", "train")
            assert (st["global_batch"], st["dp"]) == (16, 2)
            assert "decision" not in ctl.log("c2")  # the standby never acted

            # c1 dies; the capacity drops to 2 while the daemon is down: c2 takes over after the
            # lease TTL, cannot repartition (logged, no decision written), and does once it is back.
            ctl.kill("c1")
            d.stop()
            etcd.ctl("put", f"{P}/capacity", "2")
            wait_for(lambda: f"listing job 'jb' at {d.addr}" in ctl.log("c2"), 60, lambda: "c2 to try: " + ctl.log("c2"))
            assert without_seq(etcd.get_json(f"{P}/decision/b")) == want_b
            assert (etcd.get_json(f"{P}/leader") or {}).get("id") == "c2"
            d.start()
            want_b = decision("b", 2, 8, 2, 1, 1, "20", "c2")
            wait_for(lambda: without_seq(etcd.get_json(f"{P}/decision/b")) == want_b, 60,
                     lambda: "c2 to shrink b: " + ctl.log("c2"))
            check_step(d, "jb", "20", oracle_b((2, 1, 1)))
            st = state(d, "jb", "train")
            assert (st["global_batch"], st["dp"]) == (16, 1)  # the dp follows; the batch is the launcher's
        finally:
            ctl.stop()
            d.stop()


def check_step(d, job, step, ck):
    """The step's ptc.json and every shard read through the mount equal `ck`'s files."""
    verify_step(d, job, step, ck, full_views=False)
    check_ls_step(d, job, step, ck)


@pytest.mark.parametrize("bad, needle", [
    ({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}}, "lacks 'daemon'"),
    ({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1", "layout": {"tp": 0}},
     "layout.tp"),
    # tp x pp overflowed an int and divided by zero: the controller died of SIGFPE on every pass.
    ({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1",
      "layout": {"tp": 65536, "pp": 65536}}, "layout.tp x layout.pp (4294967296) is more than the job's max_gpus (2)"),
])
def test_a_bad_queue_entry_is_named_and_the_others_decided(tmp_path, bad, needle):
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        etcd.ctl("put", f"{P}/queue/bad", json.dumps(bad))
        etcd.ctl("put", f"{P}/queue/ok", json.dumps({"job": A_JOB, "daemon": "127.0.0.1:1"}))
        r = Controllers(str(tmp_path), etcd).once()
        # ok has no steps to move? Its daemon is unreachable: not carried out, exit 1, named.
        assert r.returncode == 1, r.stderr
        assert f"{P}/queue/bad" in r.stderr and needle in r.stderr, r.stderr
        assert "job 'bad' is left out until the entry is fixed or removed" in r.stderr, r.stderr  # nothing stored
        assert "job 'ok' not changed" in r.stderr and "127.0.0.1:1" in r.stderr, r.stderr
        assert etcd.keys(f"{P}/decision/") == []


def test_a_pending_save_is_no_step_a_finished_jobs_bad_decision_goes_and_seq_goes_on(tmp_path, daemon):
    """ja has step 10 and a save of step 20 that never completes (a killed writer's folder): the
    controller repartitions step 10, not 20. The decision of a job that left the queue and does
    not parse is deleted; and the seq goes on from the last one written, 7, although that
    decision is deleted in the same pass."""
    require_binaries()
    ck = Checkpoint(os.path.join(str(tmp_path), "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512, seed=0)
    daemon.cli("import", ck.path, "--job", "ja", "--step", "10")
    os.mkdir(os.path.join(daemon.mnt, "ja", "20"))
    assert daemon.cli_json("ls", "ja", "--json")["pending"] == ["20"]
    with Etcd(str(tmp_path)) as etcd:
        etcd.ctl("put", f"{P}/decision/gone", json.dumps({**decision("gone", 2, None, 1, 1, 2, None, "old"),
                                                          "seq": 7}))
        etcd.ctl("put", f"{P}/decision/broken", "{not json")
        etcd.ctl("put", f"{P}/queue/a", json.dumps({"job": A_JOB, "daemon": daemon.addr, "store_job": "ja",
                                                    "layout": {"pp": 2}}))
        r = Controllers(str(tmp_path), etcd).once()
        assert r.returncode == 0, r.stderr
        assert [json.loads(line) for line in r.stdout.splitlines()] == \
            [{**decision("a", 4, None, 1, 2, 2, "10", "once"), "seq": 8}]
        assert daemon.cli_json("ls", "ja/10", "--json")["parallelism"] == {"tp": 1, "pp": 2, "dp": 2}
        assert "job 'broken' left the queue; its decision removed" in r.stderr, r.stderr
        assert etcd.keys(f"{P}/decision/") == [f"{P}/decision/a"]
        assert etcd.get_json(f"{P}/seq") == 8


def test_with_a_horizon_a_running_job_keeps_its_gpus_when_its_move_does_not_pay(tmp_path, daemon):
    """a runs on 4 GPUs (its stored decision); b arrives on a capacity of 5. Unweighed, a would
    shrink to 1 for b to take 4 (100 + 260 against 300 + 50); a's move costs 300 s, and over
    --horizon 600 its other options count half, so a keeps its 4 and b gets the fifth. Without
    the horizon, the next pass moves a."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        a = {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300}, "move_seconds": 300}
        b = {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 50, "2": 90, "4": 260}}
        kept = {**decision("a", 4, None, 1, 1, 4, None, "old"), "seq": 1}
        etcd.ctl("put", f"{P}/decision/a", json.dumps(kept))
        etcd.ctl("put", f"{P}/queue/a", json.dumps({"job": a, "daemon": daemon.addr}))
        etcd.ctl("put", f"{P}/queue/b", json.dumps({"job": b, "daemon": daemon.addr}))
        etcd.ctl("put", f"{P}/capacity", "5")
        ctl = Controllers(str(tmp_path), etcd)
        r = subprocess.run(ctl.args("h", "--once", "--json", "--horizon", "600"), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert [json.loads(line) for line in r.stdout.splitlines()] == [{**decision("b", 1, None, 1, 1, 1, None, "h"),
                                                                         "seq": 2}]
        assert etcd.get_json(f"{P}/decision/a") == kept
        r = ctl.once("unweighed")
        assert r.returncode == 0, r.stderr
        assert [without_seq(json.loads(line)) for line in r.stdout.splitlines()] == \
            [decision("a", 1, None, 1, 1, 1, None, "unweighed"), decision("b", 4, None, 1, 1, 4, None, "unweighed")]


def test_makespan_policy_and_jobs_with_no_step_yet(tmp_path, daemon):
    """Two jobs of 600 samples, 100 samples/s on 2 GPUs or 150 on 4: side by side on 2 GPUs each
    (6 s) beats one after the other on 4 (8 s), so both start now. Neither has saved a step: each
    just gets its decision."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        for name in ("a", "b"):
            job = {"min_gpus": 2, "max_gpus": 4, "throughput": {"2": 100, "4": 150}, "samples": 600}
            etcd.ctl("put", f"{P}/queue/{name}", json.dumps({"job": job, "daemon": daemon.addr}))
        r = subprocess.run(Controllers(str(tmp_path), etcd).args("m", "--once", "--json", "--policy", "makespan"),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        want = [decision(n, 2, None, 1, 1, 2, None, "m") for n in ("a", "b")]
        assert [without_seq(json.loads(line)) for line in r.stdout.splitlines()] == want
        assert [without_seq(etcd.get_json(f"{P}/decision/{n}")) for n in ("a", "b")] == want


def test_a_grow_waits_for_the_shrink_that_frees_its_gpus(tmp_path, daemon):
    """x held 2 GPUs of 2; y arrives, so x shrinks to 1 and y gets 1. x's daemon is down: x's shrink
    fails, and y is not started on GPUs x still holds. Once x's entry names a daemon that answers,
    both are carried out, the shrink first."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        job = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 180}}
        old_x = {**decision("x", 2, None, 1, 1, 2, None, "old"), "seq": 1}
        etcd.ctl("put", f"{P}/decision/x", json.dumps(old_x))
        etcd.ctl("put", f"{P}/queue/x", json.dumps({"job": job, "daemon": "127.0.0.1:1"}))
        etcd.ctl("put", f"{P}/queue/y", json.dumps({"job": job, "daemon": daemon.addr}))
        etcd.ctl("put", f"{P}/capacity", "2")  # over the controllers' --gpus 4
        ctl = Controllers(str(tmp_path), etcd)
        r = subprocess.run(ctl.args("m", "--once", "--json"), capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and r.stdout == "", r.stderr
        assert "job 'x' not changed: listing job 'x' at 127.0.0.1:1" in r.stderr, r.stderr
        assert "job 'y' not changed: it waits until the jobs giving up GPUs have" in r.stderr, r.stderr
        assert etcd.get_json(f"{P}/decision/x") == old_x
        assert etcd.keys(f"{P}/decision/y") == []
        etcd.ctl("put", f"{P}/queue/x", json.dumps({"job": job, "daemon": daemon.addr}))
        r = subprocess.run(ctl.args("m", "--once", "--json"), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        printed = [json.loads(line) for line in r.stdout.splitlines()]
        assert printed == [{**decision("x", 1, None, 1, 1, 1, None, "m"), "seq": 2},
                           {**decision("y", 1, None, 1, 1, 1, None, "m"), "seq": 3}]


@pytest.mark.parametrize("bad, needle", [
    ("{not json", "not valid JSON"),
    (json.dumps({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100}}, "daemon": "h:1", "gpus": 3}),
     "unknown key 'gpus'"),
])
def test_an_unreadable_entry_keeps_the_gpus_of_its_running_job(tmp_path, daemon, bad, needle):
    """x runs on 2 of the 4 GPUs (its stored decision) when its queue entry turns unreadable: y,
    alone among the readable entries, gets the 2 others, not all 4 (x may still be running on
    its 2); the pass names x's key and what is wrong, in the log and in --json. Once x's entry is
    removed (x finished), its decision goes and y grows to 4."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        job = {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300}}
        old_x = {**decision("x", 2, None, 1, 1, 2, None, "old"), "seq": 1}
        etcd.ctl("put", f"{P}/decision/x", json.dumps(old_x))
        etcd.ctl("put", f"{P}/queue/x", bad)
        etcd.ctl("put", f"{P}/queue/y", json.dumps({"job": job, "daemon": daemon.addr}))
        ctl = Controllers(str(tmp_path), etcd)
        r = ctl.once("m")
        assert r.returncode == 0, r.stderr
        printed = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(printed) == 2, r.stdout
        assert printed[0]["unreadable"] == f"{P}/queue/x" and printed[0]["job"] == "x", printed
        assert printed[0]["reserved_gpus"] == 2 and needle in printed[0]["error"], printed
        assert printed[1] == {**decision("y", 2, None, 1, 1, 2, None, "m"), "seq": 2}
        assert (f"unreadable queue entry {P}/queue/x: {P}/queue/x: " in r.stderr and needle in r.stderr
                and "job 'x' keeps its decision and its 2 GPUs stay reserved" in r.stderr), r.stderr
        assert etcd.get_json(f"{P}/decision/x") == old_x
        assert without_seq(etcd.get_json(f"{P}/decision/y")) == decision("y", 2, None, 1, 1, 2, None, "m")
        etcd.ctl("del", f"{P}/queue/x")
        r = ctl.once("m")
        assert r.returncode == 0, r.stderr
        assert [json.loads(line) for line in r.stdout.splitlines()] == [
            {**decision("y", 4, None, 1, 1, 4, None, "m"), "seq": 3}]
        assert etcd.keys(f"{P}/decision/x") == []


def paused_repartition(root, etcd, pause_s):
    """A daemon holding job ja's step 10 (tp2 pp2), restarted with every commit paused `pause_s`
    (failpoint commit.before), and a queue of one job `a` (pp 2 kept) on it: a --once pass
    repartitions step 10 to tp1 pp2 dp2, a pass longer than the controllers' 2 s lease."""
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512, seed=0)
    d = Daemon(os.path.join(root, "daemon"))
    d.start()
    d.cli("import", ck.path, "--job", "ja", "--step", "10")
    d.stop()
    d.env = {"PTCFS_FAILPOINT": f"commit.before:{pause_s}"}
    d.start()
    etcd.ctl("put", f"{P}/queue/a", json.dumps({"job": A_JOB, "daemon": d.addr, "store_job": "ja",
                                                "layout": {"pp": 2}}))
    return d


def test_once_keeps_its_lease_through_a_pass_longer_than_the_ttl(tmp_path):
    """The repartition pauses 5 s in the daemon, past the 2 s lease: --once keeps its lease alive
    meanwhile (as a leading controller does), so the decision is written under it."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        d = paused_repartition(str(tmp_path), etcd, 5)
        try:
            r = Controllers(str(tmp_path), etcd).once()
            assert r.returncode == 0, r.stderr
            assert "lost the lease" not in r.stderr, r.stderr
            want = decision("a", 4, None, 1, 2, 2, "10", "once")
            assert [without_seq(json.loads(line)) for line in r.stdout.splitlines()] == [want]
            assert without_seq(etcd.get_json(f"{P}/decision/a")) == want
            assert etcd.keys(f"{P}/leader") == []  # given back at the end
        finally:
            d.stop(cleanup_mount=True)


def test_once_gives_up_when_its_lease_is_lost_mid_pass(tmp_path):
    """While the repartition is paused in the daemon, the controller's lease is revoked: the
    keep-alive finds it gone, the pass stops and --once exits 1 naming it; no decision is written."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        d = paused_repartition(str(tmp_path), etcd, 4)
        try:
            p = subprocess.Popen(Controllers(str(tmp_path), etcd).args("once", "--once", "--json"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            d.wait_log("failpoint commit.before reached")
            lease = etcd.get_json(f"{P}/leader")["lease"]
            etcd.ctl("lease", "revoke", format(lease, "x"))
            out, err = p.communicate(timeout=120)
            assert p.returncode == 1, err
            assert f"autoscale: lost the lease of {P}/leader" in err, err
            assert f"once lost the lead of {P}/leader during its pass" in err, err
            assert out == ""
            assert etcd.keys(f"{P}/decision/") == []
        finally:
            d.stop(cleanup_mount=True)


def test_hostile_decisions_never_count_as_gpus_and_a_second_entry_for_one_store_job_is_left_out(tmp_path, daemon):
    """x's stored decision claims 2^32 - 8 GPUs (once read as -8: the capacity grew by 8) while x's
    entry is unreadable, and z's entry names y's store job: the bad decision is refused and
    decided again (it reserves nothing), z is left out naming y, and the GPUs decided never
    exceed the 4 there are."""
    require_binaries()
    with Etcd(str(tmp_path)) as etcd:
        etcd.ctl("put", f"{P}/decision/x", json.dumps({**decision("x", 4294967288, None, 1, 1, 4294967288, None,
                                                                   "old"), "seq": 1}))
        etcd.ctl("put", f"{P}/queue/x", "{not json")
        etcd.ctl("put", f"{P}/queue/y", json.dumps({"job": A_JOB, "daemon": daemon.addr}))
        etcd.ctl("put", f"{P}/queue/z", json.dumps({"job": A_JOB, "daemon": daemon.addr, "store_job": "y"}))
        r = Controllers(str(tmp_path), etcd).once("m")
        assert r.returncode == 0, r.stderr
        printed = [json.loads(line) for line in r.stdout.splitlines()]
        unreadable = {p["job"]: p for p in printed if "unreadable" in p}
        assert unreadable["x"]["reserved_gpus"] == 0
        assert unreadable["z"]["reserved_gpus"] == 0 and (
            "it names store job 'y' at " + daemon.addr + ", as the earlier queue entry of job 'y' does"
            in unreadable["z"]["error"]), unreadable
        assert f"{P}/decision/x: gpus: 4294967288 is outside [0, 1048576]" in r.stderr
        decided = [p for p in printed if "unreadable" not in p]
        assert [d["job"] for d in decided] == ["y"] and decided[0]["gpus"] == 4
        assert sum(d["gpus"] for d in decided) <= 4


def test_daemons_that_never_answer_are_waited_for_side_by_side(tmp_path, daemon):
    """Jobs a1 and a2 name daemons that accept connections and never answer (a call to each waits for
    the CLI's connect deadline, 5 s); job b's daemon answers. Before, jobs were carried out one after
    the other: a2's daemon was asked only once a1's call had given up (closed), and b waited behind
    both, 5 s each. Now they are carried out side by side: the connection to a2 arrives while the
    one to a1 is still open. b gets its decision; a1 and a2 are tried again later."""
    import select
    import socket
    import threading
    require_binaries()
    silent = {name: socket.socket() for name in ("a1", "a2")}
    events, stop = [], threading.Event()

    def listen():  # accepts, never answers; notes each connection and its close, in order
        conns = {}
        while not stop.is_set():
            ready, _, _ = select.select([*silent.values(), *conns], [], [], 0.1)
            for s in ready:
                name = next((n for n, l in silent.items() if l is s), None)
                if name is not None:
                    c, _ = s.accept()
                    conns[c] = name
                    events.append(("open", name))
                elif not s.recv(4096):
                    events.append(("closed", conns.pop(s)))
                    s.close()

    for s in silent.values():
        s.bind(("127.0.0.1", 0))
        s.listen(8)
    t = threading.Thread(target=listen, daemon=True)
    t.start()
    try:
        with Etcd(str(tmp_path)) as etcd:
            job = {"min_gpus": 1, "max_gpus": 1, "throughput": {"1": 100}}
            for name, s in silent.items():
                etcd.ctl("put", f"{P}/queue/{name}", json.dumps({"job": job, "daemon": "127.0.0.1:%d" % s.getsockname()[1]}))
            etcd.ctl("put", f"{P}/queue/b", json.dumps({"job": job, "daemon": daemon.addr}))
            r = Controllers(str(tmp_path), etcd).once("m")
            assert r.returncode == 1, r.stderr
            for name in silent:
                assert f"job '{name}' not changed: listing job '{name}'" in r.stderr, r.stderr
                assert etcd.keys(f"{P}/decision/{name}") == []
            assert "did not answer within 5 s" in r.stderr, r.stderr
            assert [without_seq(json.loads(line)) for line in r.stdout.splitlines()] == \
                [decision("b", 1, None, 1, 1, 1, None, "m")]
            wait_for(lambda: len(events) == 4, 10, lambda: f"connections: {events}")
            assert sorted(events[:2]) == [("open", "a1"), ("open", "a2")], events
    finally:
        stop.set()
        t.join(timeout=5)
        for s in silent.values():
            s.close()
