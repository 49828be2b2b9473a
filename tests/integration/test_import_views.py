"""Import a checkpoint and check every view of it in the mount, and the CLI's JSON, exactly."""

import json
import os

import numpy as np
import pytest

import ptcgen
from ptcfs_harness import check_ls_step, ls_jobs, verify_step


def check_status(d, jobs, steps, bytes_stored):
    st = d.cli_json("status", "--json")
    assert isinstance(st["version"], str) and st["version"], st
    assert os.path.realpath(st["data"]) == d.data, st
    assert os.path.realpath(st["mount"]) == d.mnt, st
    assert st["listen"] == d.addr, st
    assert st["jobs"] == jobs, st
    assert st["steps"] == steps, st
    assert st["bytes_stored"] == bytes_stored, st


def test_import_gpt_every_view(daemon, make_ckpt):
    ck = make_ckpt("gpt100", style="gpt", tp=2, pp=2, dp=1, layers=4, hidden=256, vocab=1000, seed=1)
    # The scenario has what it should: BF16 and F32, a fused parts:2 tensor, real vocab padding,
    # a slash in a name, tensors on the first, last and all stages.
    dtypes = {s["dtype"] for s in ck.ptc["tensors"].values()}
    assert {"BF16", "F32", "I64"} <= dtypes
    assert ck.ptc["tensors"]["layers.0.mlp.dense_h_to_4h.weight"]["parts"] == 2
    assert 1000 % (128 * 2) != 0
    emb = ck.slices[(1, 0)]["embedding.word_embeddings.weight"]
    assert emb.shape[0] * 2 > 1000 and not emb[1000 - emb.shape[0]:].any()
    assert "extra/rng_state" in ck.slices[(0, 1)] and "extra/rng_state" in ck.slices[(1, 0)]

    out = daemon.cli_json("import", ck.path, "--job", "gpt", "--step", "100", "--json")
    for k, v in ck.expected_import("gpt", "100").items():
        assert out.get(k) == v, (k, out)

    assert "gpt" in os.listdir(daemon.mnt)
    assert "100" in os.listdir(os.path.join(daemon.mnt, "gpt"))
    verify_step(daemon, "gpt", "100", ck)

    # The per-tensor view of a padded tensor includes the padding rows; the full view excludes them.
    pad = np.load(os.path.join(daemon.step_dir("gpt", "100"), "tp1-pp0", "embedding.word_embeddings.weight.npy"))
    assert pad.shape == (512, 256) and not pad[1000 - 512:].any()
    full = np.load(os.path.join(daemon.step_dir("gpt", "100"), "full", "embedding.word_embeddings.weight.npy"))
    assert full.shape == (1000, 256) and full.dtype == np.dtype("<u2")
    # A slash in a tensor name is a subfolder.
    assert os.path.isdir(os.path.join(daemon.step_dir("gpt", "100"), "tp0-pp1", "extra"))
    assert os.path.isfile(os.path.join(daemon.step_dir("gpt", "100"), "full", "extra", "rng_state.npy"))

    assert ls_jobs(daemon) == {"gpt": ["100"]}
    j = daemon.cli_json("ls", "gpt", "--json")
    assert j["job"] == "gpt" and sorted(j["steps"]) == ["100"], j
    check_ls_step(daemon, "gpt", "100", ck)
    check_status(daemon, 1, 1, ck.summary["bytes"])

    # A second step of the same job, other values: each step serves its own.
    ck2 = make_ckpt("gpt200", style="gpt", tp=2, pp=2, dp=1, layers=4, hidden=256, vocab=1000, seed=2)
    out2 = daemon.cli_json("import", ck2.path, "--job", "gpt", "--step", "200", "--json")
    for k, v in ck2.expected_import("gpt", "200").items():
        assert out2.get(k) == v, (k, out2)
    assert ls_jobs(daemon) == {"gpt": ["100", "200"]}
    j = daemon.cli_json("ls", "gpt", "--json")
    assert j["job"] == "gpt" and sorted(j["steps"]) == ["100", "200"], j
    verify_step(daemon, "gpt", "200", ck2)
    verify_step(daemon, "gpt", "100", ck)
    check_ls_step(daemon, "gpt", "200", ck2)
    check_status(daemon, 1, 2, ck.summary["bytes"] + ck2.summary["bytes"])

    # The human-readable forms work too.
    for args in (("ls",), ("ls", "gpt"), ("ls", "gpt/100"), ("status",)):
        r = daemon.cli(*args)
        assert r.stdout.strip(), args


def _llama_with_stage_list():
    ptc = ptcgen.make_ptc("llama", tp=4, pp=3, dp=2, layers=5, hidden=128, vocab=1000)
    ptc["tensors"]["extra.stage_list"] = {"dtype": "F16", "shape": [6, 8], "tp_dim": 1, "stage": [0, 2]}
    ptc["tensors"]["extra.flags"] = {"dtype": "BOOL", "shape": [3, 5], "stage": "last"}
    ptc["tensors"]["extra.counts"] = {"dtype": "I32", "shape": [16], "tp_dim": 0, "stage": "all"}
    return ptc


@pytest.mark.parametrize("kind", ["llama-tp4-pp3-uneven", "gpt-tp1-pp1", "gpt-tp4-pp1"])
def test_import_other_layouts(daemon, make_ckpt, kind):
    if kind == "llama-tp4-pp3-uneven":
        ck = make_ckpt(kind, ptc=_llama_with_stage_list(), seed=9)
        # 5 layers on 3 stages: 2, 2, 1.
        assert [list(r) for r in ptcgen.stage_layers(5, 3)] == [[0, 1], [2, 3], [4]]
    elif kind == "gpt-tp1-pp1":
        ck = make_ckpt(kind, style="gpt", tp=1, pp=1, layers=3, hidden=64, vocab=300, seed=4)
    else:
        ck = make_ckpt(kind, style="gpt", tp=4, pp=1, layers=2, hidden=128, vocab=1000, seed=5)
    out = daemon.cli_json("import", ck.path, "--job", "j-" + kind, "--step", "1", "--json")
    for k, v in ck.expected_import("j-" + kind, "1").items():
        assert out.get(k) == v, (k, out)
    verify_step(daemon, "j-" + kind, "1", ck)
    check_ls_step(daemon, "j-" + kind, "1", ck)
    check_status(daemon, 1, 1, ck.summary["bytes"])
    with open(os.path.join(daemon.step_dir("j-" + kind, "1"), "ptc.json")) as f:
        assert json.load(f) == ck.ptc


def test_a_shard_holding_no_tensor_imports_without_a_blob(daemon, make_ckpt):
    """pp=2 with every tensor on the first stage: tp*-pp1 hold nothing. They import, show as empty
    safetensors files, and store no blob; a repartition to pp=1 and back works."""
    ptc = {"parallelism": {"tp": 2, "pp": 2, "dp": 1}, "num_layers": 2, "tensors": {
        "a": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "stage": "first"},
        "b": {"dtype": "BF16", "shape": [6], "stage": "first"},
    }}
    ck = make_ckpt("empty-stage", ptc=ptc)
    daemon.cli("import", ck.path, "--job", "e", "--step", "1")
    verify_step(daemon, "e", "1", ck)
    blobs = os.listdir(os.path.join(daemon.data, "blobs"))
    assert len(blobs) == 2, blobs  # one per non-empty shard
    with open(os.path.join(daemon.step_dir("e", "1"), "tp1-pp1.safetensors"), "rb") as f:
        assert f.read() == ptcgen.safetensors_bytes({})
    for par in ({"tp": 1, "pp": 1, "dp": 1}, {"tp": 2, "pp": 2, "dp": 1}):
        daemon.cli("repartition", "--job", "e", "--step", "1", "--to", f"tp={par['tp']},pp={par['pp']},dp=1")
        p2 = dict(ptc, parallelism=par)
        verify_step(daemon, "e", "1", make_ckpt(f"e-{par['tp']}-{par['pp']}", ptc=p2))
