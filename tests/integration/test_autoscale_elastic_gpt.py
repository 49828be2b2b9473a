"""`ptcfs autoscale` driving a real training job: examples/elastic_gpt's launcher runs train.py at
the controller's decisions. Two jobs share 2 GPUs (1 each); the job trains iterations 0..3 at
tp=1,pp=1,dp=1 and saves step 4; the other job finishes, the controller gives the first both GPUs
(step 4 repartitioned to dp=2, the dataset re-split with it), and the launcher's next segment
resumes step 4 on 2 ranks: its losses continue those of a run that never stopped."""

import json
import os
import subprocess

import pytest

from etcd_util import Etcd
from ptcfs_harness import PTCFS, require_binaries
from repartition_util import wait_for

PY = "/usr/bin/python3"
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(_REPO, "examples", "elastic_gpt")
P = "/ptcfs-autoscale"
LOSS_RTOL = 1e-5  # examples/elastic_gpt/scenario.py's

pytest.importorskip("torch")


def losses(out):
    with open(os.path.join(out, "losses.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_the_job_grows_under_the_controller_and_its_losses_continue(tmp_path, daemon):
    require_binaries()
    root = str(tmp_path)
    data = os.path.join(root, "train.jsonl")
    subprocess.run([PY, os.path.join(EX, "make_data.py"), data, "--samples", "72"], check=True, capture_output=True)
    for job in ("gpt", "ref"):
        daemon.cli("dataset", "add", "--job", job, "--name", "train", "--format", "jsonl", "--seed", "1",
                   "--global-batch", "8", "--dp", "1", "--copy", data)
    common = ["--mount", daemon.mnt, "--daemon", daemon.addr, "--cpu"]
    ref = os.path.join(root, "ref")
    subprocess.run([PY, os.path.join(EX, "train.py"), "--job", "ref", "--steps", "8", "--out", ref, *common],
                   check=True, capture_output=True)
    with Etcd(root) as etcd:
        other = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 150}}
        gpt = {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 100, "2": 190}}
        etcd.ctl("put", f"{P}/queue/other", json.dumps({"job": other, "daemon": daemon.addr}))
        etcd.ctl("put", f"{P}/queue/gpt", json.dumps({"job": gpt, "daemon": daemon.addr}))
        log = open(os.path.join(root, "controller.log"), "w")
        ctl = subprocess.Popen([PTCFS, "autoscale", "--etcd", etcd.endpoints, "--gpus", "2", "--id", "c",
                                "--lease-ttl", "2", "--retry", "0.5"], stdout=log, stderr=log, start_new_session=True)
        log.close()
        out = os.path.join(root, "gpt")
        launch = [PY, os.path.join(EX, "launcher.py"), "--etcd", etcd.endpoints, "--queue-name", "gpt", "--job",
                  "gpt", "--every", "4", "--until", "8", "--segments", "1", "--out", out, *common]
        try:
            r = subprocess.run(launch, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            assert "launcher: decision 2 (1 GPUs, tp=1,pp=1,dp=1): iterations 0..3" in r.stderr, r.stderr
            etcd.ctl("del", f"{P}/queue/other")
            wait_for(lambda: (etcd.get_json(f"{P}/decision/gpt") or {}).get("gpus") == 2, 60, "gpt to grow")
            d = etcd.get_json(f"{P}/decision/gpt")
            assert (d["tp"], d["pp"], d["dp"], d["step"]) == (1, 1, 2, "4"), d
            assert daemon.cli_json("ls", "gpt/4", "--json")["parallelism"] == {"tp": 1, "pp": 1, "dp": 2}
            r = subprocess.run(launch, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            assert f"launcher: decision {d['seq']} (2 GPUs, tp=1,pp=1,dp=2): iterations 4..7" in r.stderr, r.stderr
        finally:
            ctl.kill()
            ctl.wait(timeout=10)
    got, want = losses(out), losses(ref)
    assert [(x["iter"], x["dp"]) for x in got] == [(i, 1 if i < 4 else 2) for i in range(8)]
    assert [x["iter"] for x in want] == list(range(8))
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) <= LOSS_RTOL * abs(w["loss"]), (g, w)
