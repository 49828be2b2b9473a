"""ptcfs.plan: the C++ planner through `ptcfs plan`, from a MODEL.json path or a dict."""

import json
import subprocess

import pytest

import ptcfs

MODEL = {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "seq": 128, "global_batch": 8,
         "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}}


def test_plan_equals_the_cli_and_takes_a_dict_or_a_path(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL))
    want = json.loads(subprocess.run([ptcfs.planner.cli_path(), "plan", "--model", str(path), "--gpus", "8", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert ptcfs.plan(str(path), 8) == want
    assert ptcfs.plan(MODEL, 8) == want
    assert ptcfs.plan(MODEL, 8, top=2) == want[:2]
    best = want[0]
    assert best["tp"] * best["pp"] * best["dp"] == 8


def test_plan_raises_the_planners_error():
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.plan(MODEL, 0)
    assert "gpus must be at least 1, got 0" in str(e.value)
    bad = dict(MODEL, bogus=1)
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.plan(bad, 8)
    assert "bogus" in str(e.value)
