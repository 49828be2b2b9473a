"""The live elastic loop (examples/elastic_gpt/live_scenario.py): 4 gloo processes train a small
GPT at tp=2,pp=2,dp=1, reshard live to tp=1,pp=2,dp=2, then tp=1,pp=1,dp=1, then back to
tp=2,pp=2,dp=1, with no checkpoint, each phase 2 iterations; once with the plain optimizer and
once with the distributed one. Checked again here from the records: every loss within the
save/restore path's tolerance of the uninterrupted reference's, and every rank sent and
received exactly what the plan of libptcfs_client says, the sum of what was sent being the
plan's minimum."""

import json
import os
import subprocess
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_REPO, "python"))

from ptcfs import live  # noqa: E402

pytest.importorskip("torch")

PY = sys.executable
SCENARIO = os.path.join(_REPO, "examples", "elastic_gpt", "live_scenario.py")
CONFIGS = [(2, 2, 1), (1, 2, 2), (1, 1, 1), (2, 2, 1)]
ITERS = 2
LOSS_RTOL = 1e-5  # test_elastic_gpt.py's


def model_ptc(c):
    """The example's PTC at config c (examples/elastic_gpt/config.py), in a child: it imports torch."""
    code = ("import sys, json; sys.path[:0] = [sys.argv[1], sys.argv[2]]; from config import ModelConfig, model_ptc; "
            "print(json.dumps(model_ptc(ModelConfig(), *map(int, sys.argv[3:]))))")
    r = subprocess.run([PY, "-c", code, os.path.dirname(SCENARIO), os.path.join(_REPO, "python"), *map(str, c)],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("zero", [False, True], ids=["adam", "distributed-optimizer"])
def test_live_reshards_continue_the_uninterrupted_run_and_move_the_plans_bytes(tmp_path, zero):
    cmd = [PY, SCENARIO, "--iters", str(ITERS), "--workdir", str(tmp_path),
           "--configs", *(",".join(map(str, c)) for c in CONFIGS)]
    if zero:
        cmd.append("--distributed-optimizer")
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "live scenario: OK" in r.stdout

    def records(which):
        return [json.load(open(tmp_path / which / f"live-r{k}.json")) for k in range(4)]

    ref, got = records("ref"), records("live")
    ref_losses = {x["iter"]: x["loss"] for rec in ref for x in rec["losses"]}
    losses = {x["iter"]: x for rec in got for x in rec["losses"]}
    assert sorted(losses) == sorted(ref_losses) == list(range(ITERS * len(CONFIGS)))
    for it, x in losses.items():
        assert x["config"] == "tp={},pp={},dp={}".format(*CONFIGS[it // ITERS])
        assert abs(x["loss"] - ref_losses[it]) <= LOSS_RTOL * abs(ref_losses[it]), it
    for i, (frm, to) in enumerate(zip(CONFIGS, CONFIGS[1:])):
        p = live.reshard_plan(model_ptc(frm), frm, to)
        stats = [rec["reshards"][i] for rec in got]
        assert [s["sent"] for s in stats] == [x["sent"] for x in p["ranks"]]
        assert [s["received"] for s in stats] == [x["received"] for x in p["ranks"]] == [x["min"] for x in p["ranks"]]
        assert sum(s["sent"] for s in stats) == p["bytes_min"] > 0
        # The distributed optimizer gathers moments over DP first, only where dp > 1.
        assert any(s["gathered"] for s in stats) == (zero and frm[2] > 1)
