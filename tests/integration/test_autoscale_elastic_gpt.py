"""`ptcfs autoscale` driving a real training job: examples/elastic_gpt's launcher runs train.py at
the controller's decisions. Two jobs share 2 GPUs (1 each); the job trains iterations 0..3 at
tp=1,pp=1,dp=1 and saves step 4; the other job finishes, the controller gives the first both GPUs
(step 4 repartitioned to dp=2, the dataset re-split with it), and the launcher's next segment
resumes step 4 on 2 ranks: its losses continue those of a run that never stopped. The second test
grows a job that chooses its batch: 1 GPU at batch 8, then 2 GPUs at batch 16, the samples it
trains on staying the dataset's epoch order. After each segment the launcher records the samples
trained in the queue entry's samples_done, keeping what others changed in the entry meanwhile, and
the step it reaches in samples_done_step, so that a retried write counts a segment once."""

import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import ptcds
from etcd_util import Etcd
from ptcfs_harness import PTCFS, require_binaries
from repartition_util import wait_for

PY = sys.executable
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(_REPO, "examples", "elastic_gpt")
P = "/ptcfs-autoscale"
LOSS_RTOL = 1e-5  # examples/elastic_gpt/scenario.py's

pytest.importorskip("torch")


def losses(out):
    with open(os.path.join(out, "losses.jsonl")) as f:
        return [json.loads(line) for line in f]


def trained_ids(out):
    """{iteration: the global batch's sample ids} from train.py's samples-r<rank>.jsonl (every
    segment appends): DP rank 0's chunk, then rank 1's, ...; the ranks of one DP rank agree."""
    per = {}
    for fn in sorted(os.listdir(out)):
        if fn.startswith("samples-r"):
            with open(os.path.join(out, fn)) as f:
                for x in map(json.loads, f):
                    assert per.setdefault(x["iter"], {}).setdefault(x["d"], x["ids"]) == x["ids"], (fn, x)
    return {it: [i for d in sorted(ds) for i in ds[d]] for it, ds in per.items()}


def start_controller(root, etcd, daemon, gpt, other=None, policy="throughput"):
    """Queues job `other` (1 or 2 GPUs) and then `gpt` (its JOBS.json entry `gpt`), and starts a
    controller over 2 GPUs with `policy`: both get 1 GPU until `other` leaves the queue."""
    other = other or {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 150}}
    etcd.ctl("put", f"{P}/queue/other", json.dumps({"job": other, "daemon": daemon.addr}))
    etcd.ctl("put", f"{P}/queue/gpt", json.dumps({"job": gpt, "daemon": daemon.addr}))
    log = open(os.path.join(root, "controller.log"), "w")
    ctl = subprocess.Popen([PTCFS, "autoscale", "--etcd", etcd.endpoints, "--gpus", "2", "--id", "c",
                            "--lease-ttl", "2", "--retry", "0.5", "--policy", policy], stdout=log, stderr=log,
                           start_new_session=True)
    log.close()
    return ctl


def passes(root):
    """The controller's passes so far, from its log: [(etcd revision read, decisions to change)]."""
    with open(os.path.join(root, "controller.log")) as f:
        found = [re.search(r"autoscale: pass at revision (\d+): .*, (\d+) decisions to change", line) for line in f]
    return [(int(m.group(1)), int(m.group(2))) for m in found if m]


def revision(etcd, key):
    """The etcd revision at which `key` was last written."""
    r = etcd.ctl("get", key, "-w", "json")
    return int(json.loads(r.stdout)["kvs"][0]["mod_revision"])


def launcher(etcd, out, common):
    """One segment of 4 iterations of job gpt, up to 8, at its decision."""
    return [PY, os.path.join(EX, "launcher.py"), "--etcd", etcd.endpoints, "--queue-name", "gpt", "--job", "gpt",
            "--every", "4", "--until", "8", "--segments", "1", "--out", out, *common]


def segment(launch, *lines):
    """Runs the launcher for one segment; `lines` are what it must print (about the decision it ran, ...)."""
    r = subprocess.run(launch, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for line in lines:
        assert line in r.stderr, r.stderr
    assert "gave up" not in r.stderr, r.stderr


def other_leaves(etcd, daemon):
    """Job `other` finishes: gpt's decision grows to 2 GPUs (returned), step 4 repartitioned to dp=2."""
    etcd.ctl("del", f"{P}/queue/other")
    wait_for(lambda: (etcd.get_json(f"{P}/decision/gpt") or {}).get("gpus") == 2, 60, "gpt to grow")
    assert daemon.cli_json("ls", "gpt/4", "--json")["parallelism"] == {"tp": 1, "pp": 1, "dp": 2}
    return etcd.get_json(f"{P}/decision/gpt")


@pytest.mark.parametrize("policy", ["throughput", "makespan"])
def test_the_job_grows_under_the_controller_and_its_losses_continue(tmp_path, daemon, policy):
    # Both policies give each job 1 GPU, then gpt both once other leaves. The makespan policy plans
    # on the samples left: side by side, other's 100 samples on 1 GPU (1.0 s) outlast gpt's 64
    # (0.64 s), against 0.91 + 0.43 s one after the other on 2; once gpt has trained 32 (the
    # launcher's write wakes the controller), 1.0 s against 0.91 + 0.21: still side by side.
    require_binaries()
    root = str(tmp_path)
    data = os.path.join(root, "train.jsonl")
    subprocess.run([PY, os.path.join(EX, "make_data.py"), data, "--samples", "72"], check=True, capture_output=True)
    for job in ("gpt", "ref"):
        daemon.cli("dataset", "add", "--job", job, "--name", "train", "--format", "jsonl", "--seed", "1",
                   "--global-batch", "8", "--dp", "1", "--copy", data)
    common = ["--mount", daemon.mnt, "--daemon", daemon.addr, "--cpu"]
    ref, out = os.path.join(root, "ref"), os.path.join(root, "gpt")
    subprocess.run([PY, os.path.join(EX, "train.py"), "--job", "ref", "--steps", "8", "--out", ref, *common],
                   check=True, capture_output=True)
    with Etcd(root) as etcd:
        # 64 samples: the 8 iterations at batch 8; samples_done takes only fewer, so the last segment's are not written
        gpt = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 150}, "samples": 64}
        other = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 110}, "samples": 100}
        ctl = start_controller(root, etcd, daemon, gpt, other, policy)
        launch = launcher(etcd, out, common)
        try:
            segment(launch, "launcher: decision 2 (1 GPUs, tp=1,pp=1,dp=1): iterations 0..3")
            assert etcd.get_json(f"{P}/queue/gpt")["samples_done"] == 4 * 8
            # The controller decides again on the entry as the launcher left it: nothing changes.
            written = revision(etcd, f"{P}/queue/gpt")
            wait_for(lambda: any(rev >= written for rev, _ in passes(root)), 60, "a pass over the new samples_done")
            assert [n for rev, n in passes(root) if rev >= written] == [0]
            assert etcd.get_json(f"{P}/decision/gpt")["seq"] == 2
            d = other_leaves(etcd, daemon)
            assert (d["tp"], d["pp"], d["dp"], d["step"], d["seq"]) == (1, 1, 2, "4", 3), d
            segment(launch, f"launcher: decision {d['seq']} (2 GPUs, tp=1,pp=1,dp=2): iterations 4..7",
                    f"launcher: {P}/queue/gpt: 64 of the job's 64 samples trained; samples_done left at 32")
            assert etcd.get_json(f"{P}/queue/gpt") == \
                {"job": gpt, "daemon": daemon.addr, "samples_done": 32, "samples_done_step": 4}
        finally:
            ctl.kill()
            ctl.wait(timeout=10)
    got, want = losses(out), losses(ref)
    assert [(x["iter"], x["dp"]) for x in got] == [(i, 1 if i < 4 else 2) for i in range(8)]
    assert [x["iter"] for x in want] == list(range(8))
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) <= LOSS_RTOL * abs(w["loss"]), (g, w)


def test_the_job_grows_in_ranks_and_batch_and_trains_on_the_epoch_order(tmp_path, daemon):
    # gpt accepts batches 8..16: alone on 1 GPU, batch 8 is its best (100 > 90 samples/s), on 2 GPUs
    # batch 16 (220 > 150). It trains 0..3 at 1 GPU, batch 8 and saves step 4; the other job leaves;
    # the controller repartitions step 4 to dp=2 (the dataset's dp with it, its batch kept: a segment
    # may still run at 8); the launcher's train.py --global-batch 16 resumes step 4, re-splitting the
    # dataset to batch 16 in that step's commit, and trains 4..7 on 2 ranks at batch 16. Checked: (a) 0..3 equal a run that never stopped;
    # (b) 4..7 equal a run resumed from that run's step 4 at batch 16 on one rank (another layout);
    # (c) the samples of 0..7 are the epoch's order, 4 batches of 8 then 4 of 16, none repeated or skipped.
    require_binaries()
    root = str(tmp_path)
    data, n, seed = os.path.join(root, "train.jsonl"), 112, 1  # 112 = 32 + 5 * 16: 96 read leaves a batch
    subprocess.run([PY, os.path.join(EX, "make_data.py"), data, "--samples", str(n)], check=True,
                   capture_output=True)
    for job in ("gpt", "ref"):
        daemon.cli("dataset", "add", "--job", job, "--name", "train", "--format", "jsonl", "--seed", seed,
                   "--global-batch", "8", "--dp", "1", "--copy", data)
    common = ["--mount", daemon.mnt, "--daemon", daemon.addr, "--cpu"]
    train = [PY, os.path.join(EX, "train.py"), "--job", "ref", *common]
    ref8, ref16, out = os.path.join(root, "ref8"), os.path.join(root, "ref16"), os.path.join(root, "gpt")
    subprocess.run([*train, "--steps", "8", "--save-at", "4", "--out", ref8], check=True, capture_output=True)
    daemon.cli("repartition", "--job", "ref", "--step", "4", "--to", "tp=1,pp=1,dp=1", "--global-batch", "16")
    subprocess.run([*train, "--steps", "8", "--resume", "4", "--global-batch", "16", "--out", ref16], check=True,
                   capture_output=True)
    with Etcd(root) as etcd:
        gpt = {"min_gpus": 1, "max_gpus": 2, "batch": {"min": 8, "max": 16}, "samples": 1000,
               "throughput": {"1": {"8": 100, "16": 90}, "2": {"8": 150, "16": 220}}}
        ctl = start_controller(root, etcd, daemon, gpt)
        launch = launcher(etcd, out, common)
        try:
            segment(launch, "launcher: decision 2 (1 GPUs, global batch 8, tp=1,pp=1,dp=1): iterations 0..3")
            entry = etcd.get_json(f"{P}/queue/gpt")
            assert entry == {"job": gpt, "daemon": daemon.addr, "samples_done": 4 * 8, "samples_done_step": 4}
            d = other_leaves(etcd, daemon)
            # Someone else edits the entry between the segments (the store job named, as it already was):
            # the launcher's next write keeps it.
            etcd.ctl("put", f"{P}/queue/gpt", json.dumps({**entry, "store_job": "gpt"}))
            assert (d["gpus"], d["global_batch"], d["tp"], d["pp"], d["dp"], d["step"]) == (2, 16, 1, 1, 2, "4"), d
            with open(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json")) as f:
                st = json.load(f)
            assert {k: st[k] for k in ("global_batch", "dp", "consumed", "batch_offset")} == \
                {"global_batch": 8, "dp": 2, "consumed": 32, "batch_offset": 0}
            segment(launch, f"launcher: decision {d['seq']} (2 GPUs, global batch 16, tp=1,pp=1,dp=2): iterations 4..7")
            assert etcd.get_json(f"{P}/queue/gpt") == \
                {"job": gpt, "daemon": daemon.addr, "store_job": "gpt", "samples_done": 4 * 8 + 4 * 16,
                 "samples_done_step": 8}
        finally:
            ctl.kill()
            ctl.wait(timeout=10)
    got, want8, want16 = losses(out), losses(ref8), losses(ref16)
    assert [(x["iter"], x["dp"], x["global_batch"]) for x in got] == \
        [(i, 1, 8) for i in range(4)] + [(i, 2, 16) for i in range(4, 8)]
    assert [x["iter"] for x in want8] == list(range(8)) and [x["iter"] for x in want16] == list(range(4, 8))
    for g, w in zip(got, want8[:4] + want16):  # (a) and (b)
        assert abs(g["loss"] - w["loss"]) <= LOSS_RTOL * abs(w["loss"]), (g, w)
    # The batch changed the training: iteration 4 at batch 16 is not iteration 4 at batch 8.
    assert abs(want16[0]["loss"] - want8[4]["loss"]) > LOSS_RTOL * abs(want8[4]["loss"])
    # (c) the samples, iteration by iteration, are the epoch's order (make_data's ids are line numbers).
    order = ptcds.epoch_order(seed, 0, n)
    ids = trained_ids(out)
    assert sorted(ids) == list(range(8))
    assert [len(ids[i]) for i in range(8)] == [8] * 4 + [16] * 4
    assert [x for i in range(8) for x in ids[i]] == order[:96]
    assert {i: ids[i] for i in range(4, 8)} == trained_ids(ref16)
    # Progress counted the new batch: 32 samples at 8, then 4 batches of 16 (batch_offset plus a multiple).
    with open(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json")) as f:
        st = json.load(f)
    assert (st["epoch"], st["consumed"], st["batch_offset"], st["samples_per_epoch"]) == (0, 96, 32, 112)


def load_launcher():
    spec = importlib.util.spec_from_file_location("launcher", os.path.join(EX, "launcher.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_launchers_progress_write_keeps_a_concurrent_edit_and_gives_up_saying_so(tmp_path, monkeypatch, capsys):
    # record_progress against a real etcd, with the test editing the entry between the launcher's read
    # and its transaction (before the first N transactions): the transaction is refused, the launcher
    # reads again and writes samples_done on top of the edit; edited before every try, it gives up.
    lau = load_launcher()
    key = f"{P}/queue/gpt"
    with Etcd(str(tmp_path)) as etcd:
        real, txns = lau._gateway, []

        def edit_before_txn(n):
            def gateway(endpoints, path, body, *unanswered):
                if path == "/v3/kv/txn":
                    txns.append(body)
                    if len(txns) <= n:
                        e = etcd.get_json(key)
                        etcd.ctl("put", key, json.dumps({**e, "store_job": f"edit{len(txns)}"}))
                return real(endpoints, path, body, *unanswered)
            monkeypatch.setattr(lau, "_gateway", gateway)

        job = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100}, "samples": 100}
        # samples_done without samples_done_step: counted by someone else up to a step unknown; iterations
        # 4..8 at batch 8 are added whole and the entry then reaches step 9.
        etcd.ctl("put", key, json.dumps({"job": job, "daemon": "h:1", "samples_done": 8}))
        edit_before_txn(1)
        lau.record_progress(etcd.endpoints, key, {i: 8 for i in range(4, 9)}, 4, 9)
        assert len(txns) == 2
        assert etcd.get_json(key) == \
            {"job": job, "daemon": "h:1", "samples_done": 48, "samples_done_step": 9, "store_job": "edit1"}
        assert capsys.readouterr().err == ""

        txns.clear()
        edit_before_txn(5)
        lau.record_progress(etcd.endpoints, key, {9: 16}, 9, 10, tries=3)
        assert len(txns) == 3
        assert etcd.get_json(key) == \
            {"job": job, "daemon": "h:1", "samples_done": 48, "samples_done_step": 9, "store_job": "edit3"}
        assert capsys.readouterr().err == (
            f"launcher: gave up recording progress (+16 samples, iterations 9..9) in {key} after 3 tries (the last: "
            "the entry changed between its read and the write); training goes on\n")

        # No samples in the job: no samples_done written (the entry would not parse); the entry gone: said.
        txns.clear()
        etcd.ctl("put", key, json.dumps({"job": {"min_gpus": 1, "max_gpus": 1, "throughput": {"1": 1}}}))
        lau.record_progress(etcd.endpoints, key, {0: 16}, 0, 1)
        etcd.ctl("del", key)
        lau.record_progress(etcd.endpoints, key, {0: 16}, 0, 1)
        assert txns == [] and etcd.get_json(key) is None
        assert capsys.readouterr().err == \
            f"launcher: {key} is gone: progress (+16 samples, iterations 0..0) not recorded\n"


def test_the_launchers_progress_write_counts_a_segment_once_and_says_what_nobody_counted(tmp_path, monkeypatch,
                                                                                          capsys):
    # record_progress against a real etcd. (a) The transaction lands but its reply is lost (the gateway
    # raises as on a timeout after the write): the retry reads the entry, which already reaches the
    # segment's end step, and adds nothing; a second call for the same segment adds nothing either, and
    # says so. (b) A segment that starts after the entry's step (the one before it never written): its
    # own samples are added and the gap is said, not guessed. (c) A segment that overlaps the entry's
    # step adds only its iterations from that step on.
    lau = load_launcher()
    key = f"{P}/queue/gpt"
    with Etcd(str(tmp_path)) as etcd:
        real, txns = lau._gateway, []

        def reply_lost(endpoints, path, body, *unanswered):
            r = real(endpoints, path, body, *unanswered)
            if path == "/v3/kv/txn":
                txns.append(r["succeeded"])
                if len(txns) == 1:
                    raise lau.ptcfs.Error("unavailable", "no etcd endpoint answered: timed out")
            return r
        monkeypatch.setattr(lau, "_gateway", reply_lost)

        job = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100}, "samples": 1000}
        etcd.ctl("put", key, json.dumps({"job": job, "daemon": "h:1"}))
        lau.record_progress(etcd.endpoints, key, {0: 8, 1: 8, 2: 8, 3: 8}, 0, 4)
        assert txns == [True]  # the retry sent no second transaction
        assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 32, "samples_done_step": 4}
        assert capsys.readouterr().err == ""
        lau.record_progress(etcd.endpoints, key, {0: 8, 1: 8, 2: 8, 3: 8}, 0, 4)
        assert txns == [True]
        assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 32, "samples_done_step": 4}
        assert capsys.readouterr().err == (
            f"launcher: {key}: samples_done already counts the steps up to 4; iterations 0..3 not added again\n")

        # (b) iterations 4..7 were trained and saved but never written; the segment 8..11 at batch 16 is.
        lau.record_progress(etcd.endpoints, key, {8: 16, 9: 16, 10: 16, 11: 16}, 8, 12)
        assert txns == [True, True]
        assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 96, "samples_done_step": 12}
        assert capsys.readouterr().err == (
            f"launcher: {key}: samples_done counts the steps up to 4, this segment trained iterations 8..11: the "
            "samples of iterations 4..7 are not counted (a launcher stopped between their save and its write?)\n")

        # (c) a segment 10..13 at batch 4: only 12 and 13 are new.
        lau.record_progress(etcd.endpoints, key, {10: 4, 11: 4, 12: 4, 13: 4}, 10, 14)
        assert txns == [True, True, True]
        assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 104, "samples_done_step": 14}
        assert capsys.readouterr().err == ""

        # A fresh entry (no samples_done) counts from step 0: a first segment resumed from step 4 says so.
        etcd.ctl("put", key, json.dumps({"job": job, "daemon": "h:1"}))
        lau.record_progress(etcd.endpoints, key, {4: 8, 5: 8}, 4, 6)
        assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 16, "samples_done_step": 6}
        assert capsys.readouterr().err == (
            f"launcher: {key}: samples_done counts the steps up to 0, this segment trained iterations 4..5: the "
            "samples of iterations 0..3 are not counted (a launcher stopped between their save and its write?)\n")


def test_the_launcher_takes_entries_and_decisions_it_cannot_read_without_dying(tmp_path, capsys):
    # An entry that is JSON but no object: the progress write gives up, saying so (it raised
    # AttributeError and killed the launcher after its segment). A decision that is not JSON, or no
    # object, is taken as absent (the launcher waits for the controller to write it anew).
    lau = load_launcher()
    key = f"{P}/queue/gpt"
    with Etcd(str(tmp_path)) as etcd:
        etcd.ctl("put", key, "[1, 2]")
        lau.record_progress(etcd.endpoints, key, {0: 8}, 0, 1, tries=2)
        assert capsys.readouterr().err == (
            f"launcher: gave up recording progress (+8 samples, iterations 0..0) in {key} after 2 tries (the last: "
            f"{key} is [1, 2], not a JSON object); training goes on\n")
        assert etcd.get_json(key) == [1, 2]
        for value, said in (("{not json", "is not JSON"), ("42", "is 42, not a JSON object")):
            etcd.ctl("put", f"{P}/decision/gpt", value)
            assert lau.etcd_get(etcd.endpoints, f"{P}/decision/gpt") is None
            err = capsys.readouterr().err
            assert f"launcher: {P}/decision/gpt {said}" in err and "taken as absent" in err, err


def test_a_progress_write_whose_first_endpoint_applied_it_unanswered_is_counted_once_in_silence(tmp_path, capsys):
    # The first endpoint is a proxy that passes the transaction to etcd and never answers; the
    # launcher sends it to the second (etcd itself), where it is refused (the entry changed: it was
    # the launcher's own write). It reads again, finds the segment counted, and says nothing: the
    # count may be its own (before, it said the segment was "already counted").
    lau = load_launcher()
    key = f"{P}/queue/gpt"
    with Etcd(str(tmp_path)) as etcd:
        real = etcd.endpoints.split(",")[0]

        class Silent(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = urllib.request.Request(real + self.path, data=body, headers={"Content-Type": "application/json"})
                reply = urllib.request.urlopen(req, timeout=5).read()
                if self.path == "/v3/kv/txn":
                    time.sleep(4)  # past the launcher's 3 s: no answer
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            job = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100}, "samples": 1000}
            etcd.ctl("put", key, json.dumps({"job": job, "daemon": "h:1"}))
            endpoints = f"http://127.0.0.1:{proxy.server_address[1]},{real}"
            lau.record_progress(endpoints, key, {0: 8, 1: 8, 2: 8, 3: 8}, 0, 4)
            assert etcd.get_json(key) == {"job": job, "daemon": "h:1", "samples_done": 32, "samples_done_step": 4}
            assert capsys.readouterr().err == ""
        finally:
            proxy.shutdown()


def test_the_launcher_waits_on_a_decision_that_lacks_what_it_needs(tmp_path, capsys):
    # A decision without tp (an object all the same) is taken as absent, said once; the launcher
    # waits until a whole one comes (it raised KeyError and died).
    lau = load_launcher()
    with Etcd(str(tmp_path)) as etcd:
        key = f"{P}/decision/gpt"
        etcd.ctl("put", key, json.dumps({"queued": False, "gpus": 1, "pp": 1, "dp": 1, "seq": 3}))
        whole = {"queued": False, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "seq": 4}
        threading.Timer(1.0, lambda: etcd.ctl("put", key, json.dumps(whole))).start()
        a = lau.argparse.Namespace(prefix=P, queue_name="gpt", etcd=etcd.endpoints, poll=0.1)
        assert lau.wait_for_decision(a) == whole
        assert capsys.readouterr().err == f"launcher: {key} lacks tp; taken as absent\n"
