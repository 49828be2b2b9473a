"""Megatron-LM checkpoints in: `python3 -m ptcfs import-megatron`. The checkpoints are written with
torch in Megatron-LM's layout by tests/tools/megatron_gen.py (its own torch.chunk splits, not
ptcfs code), imported into a real daemon, and every tensor (parameters, Adam state, fp32 master
weights) is read back through the mount and compared with numpy."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import megatron_gen as mg
import ptcgen
from ptcfs_harness import assert_error, check_npy, ls_jobs, npy_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_import(d, *args, check_rc=0):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-m", "ptcfs", "import-megatron", *map(str, args), "--daemon", d.addr],
                       capture_output=True, text=True, timeout=300, env=env)
    if check_rc is not None:
        assert r.returncode == check_rc, (args, r.stdout, r.stderr, d.log_tail())
    return r


def check_full_views(d, job, step, want):
    fdir = os.path.join(d.step_dir(job, step), "full")
    assert npy_tree(fdir) == sorted(want), sorted(set(npy_tree(fdir)) ^ set(want))
    for name, arr in want.items():
        check_npy(os.path.join(fdir, ptcgen.npy_relpath(name)), arr, f"full/{name}")


def test_legacy_tp2_pp2_with_optimizer_state(daemon, tmp_path):
    """fp16 GPT, tied embeddings (the last stage's word_embeddings_for_head), Adam + fp32 masters."""
    s = mg.Spec(tp=2, pp=2, layers=4, dtype=torch.float16)
    full, opt, ranks = mg.write(str(tmp_path / "ckpt"), s)
    r = run_import(daemon, tmp_path / "ckpt", "--job", "gpt", "--json")
    import json
    out = json.loads(r.stdout)
    assert out["step"] == "1000" and out["source"] == {"tp": 2, "pp": 2, "virtual_stages": 1}
    assert out["parallelism"] == {"tp": 2, "pp": 2, "dp": 1} and out["optimizer"] is True
    assert {"rng_state", "opt_param_scheduler", "args", "optimizer.grad_scaler"} <= set(out["not_imported"])
    want = mg.expected(s, full, opt)
    check_full_views(daemon, "gpt", "1000", want)

    # Each shard is exactly what the Megatron rank held, under global names: layers 2-3 live on
    # stage 1 as local layers 0-1.
    sd = daemon.step_dir("gpt", "1000")
    for (t, p), chunks in ranks.items():
        for local, gname, x in chunks[0]:
            check_npy(os.path.join(sd, f"tp{t}-pp{p}", gname + ".npy"), mg.numpy_of(x), f"tp{t}-pp{p}/{gname}")
    assert os.path.exists(os.path.join(sd, "tp0-pp1", "language_model.encoder.layers.3.mlp.dense_4h_to_h.weight.npy"))

    # The imported step repartitions like any other.
    daemon.cli("repartition", "--job", "gpt", "--step", "1000", "--to", "tp=1,pp=1,dp=1")
    check_full_views(daemon, "gpt", "1000", want)


def test_virtual_pipeline_bf16_swiglu_to_another_layout(daemon, tmp_path):
    """Interleaved stages (2 chunks per stage: stage 0 holds layers 0-1 and 4-5), BF16, SwiGLU
    (each rank's h->4h is its part of gate, then its part of up), untied output layer; imported
    straight to tp=4,pp=1 with the padding rows dropped (--vocab-size)."""
    s = mg.Spec(tp=2, pp=2, vp=2, layers=8, dtype=torch.bfloat16, swiglu=True, tied=False, vocab=100)
    full, opt, _ = mg.write(str(tmp_path / "ckpt"), s, iteration=20)
    run_import(daemon, tmp_path / "ckpt", "--job", "llm", "--step", "s20", "--to", "tp=4,pp=1", "--vocab-size", 100)
    want = mg.expected(s, full, opt, vocab_size=100, iteration=20)
    check_full_views(daemon, "llm", "s20", want)
    sd = daemon.step_dir("llm", "s20")
    assert sorted(os.listdir(sd)) == sorted(["ptc.json", "full", "dcp"] + os.listdir(os.path.join(sd, "dcp")) +
                                            [f"tp{t}-pp0{x}" for t in range(4) for x in ("", ".safetensors")])
    # TP rank 3 of 4: vocabulary rows 84-99, then the zero padding to 112 = 4 x 28 rows.
    emb = want["language_model.embedding.word_embeddings.weight"]
    rows = np.zeros((28, s.hidden), dtype=np.uint16)
    rows[:16] = emb[84:100]
    check_npy(os.path.join(sd, "tp3-pp0", "language_model.embedding.word_embeddings.weight.npy"), rows, "emb tp3")
    # SwiGLU at tp=4: rank 1 holds gate rows 32-63 then up rows 32-63 of layer 5 (stage 0's 2nd chunk).
    fc1 = want["language_model.encoder.layers.5.mlp.dense_h_to_4h.weight"]
    check_npy(os.path.join(sd, "tp1-pp0", "language_model.encoder.layers.5.mlp.dense_h_to_4h.weight.npy"),
              np.concatenate([fc1[16:32], fc1[64 + 16:64 + 32]]), "fc1 tp1")


def test_megatron_core_model_only_out_dir(daemon, tmp_path):
    """Megatron Core names (decoder.layers.N.self_attention.linear_qkv...; Transformer Engine's
    _extra_state skipped), --model-only, written with --out and imported by the C++ CLI."""
    s = mg.Spec(tp=2, pp=2, mcore=True, tied=False)
    full, _, _ = mg.write(str(tmp_path / "ckpt"), s)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-m", "ptcfs", "import-megatron", str(tmp_path / "ckpt" / "iter_0001000"),
                        "--out", str(tmp_path / "out"), "--model-only"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "not imported: " in r.stdout and "optimizer" in r.stdout
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["ptc.json"] + [f"tp{t}-pp{p}.safetensors" for t in range(2) for p in range(2)])
    daemon.cli("import", tmp_path / "out", "--job", "core", "--step", "1")
    check_full_views(daemon, "core", "1", mg.expected(s, full, {}))


def test_loading_runs_no_code_from_the_file(daemon, tmp_path):
    """A checkpoint whose args hold an object that would run a shell command when unpickled
    imports its tensors; the command never runs."""
    s = mg.Spec(tp=1, pp=1, layers=2, optimizer=False)
    full, _, _ = mg.write(str(tmp_path / "ckpt"), s)
    f = tmp_path / "ckpt" / "iter_0001000" / "mp_rank_00" / "model_optim_rng.pt"
    sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
    marker = tmp_path / "pwned"
    sd["args"].hook = _Evil(f"touch {marker}")
    torch.save(sd, f)
    run_import(daemon, tmp_path / "ckpt", "--job", "safe")
    assert not marker.exists()
    check_full_views(daemon, "safe", "1000", mg.expected(s, full, {}))


class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


@pytest.mark.parametrize("damage", ["not_megatron", "missing_rank", "distributed_optimizer", "unknown_tensor",
                                    "not_a_torch_file", "vocab_size", "embedding_1d", "query_groups"])
def test_bad_checkpoints_are_refused_and_nothing_is_imported(daemon, tmp_path, damage):
    s = mg.Spec(tp=2, pp=2, layers=4)
    root = tmp_path / "ckpt"
    mg.write(str(root), s)
    it = root / "iter_0001000"
    args, names = [], []
    if damage == "not_megatron":
        torch.save({"state_dict": {"w": torch.ones(2)}}, it / "mp_rank_01_001" / "model_optim_rng.pt")
        names = ["mp_rank_01_001/model_optim_rng.pt", "not a Megatron-LM checkpoint"]
    elif damage == "missing_rank":
        os.remove(it / "mp_rank_01_000" / "model_optim_rng.pt")
        os.rmdir(it / "mp_rank_01_000")
        names = ["lacks mp_rank_01_000"]
    elif damage == "distributed_optimizer":
        (it / "mp_rank_00_000" / "distrib_optim.pt").write_bytes(b"x")
        names = ["distrib_optim.pt", "--model-only"]
    elif damage == "unknown_tensor":
        f = it / "mp_rank_00_001" / "model_optim_rng.pt"
        sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
        sd["model"]["language_model"]["encoder"]["layers.0.mystery.weight"] = torch.ones(3)
        torch.save(sd, f)
        names = ["no partitioning rule", "language_model.encoder.layers.2.mystery.weight"]
        args = ["--model-only"]
    elif damage == "not_a_torch_file":
        (it / "mp_rank_00_001" / "model_optim_rng.pt").write_bytes(b"PK\x03\x04 truncated")
        names = ["mp_rank_00_001/model_optim_rng.pt", "not a torch checkpoint"]
    elif damage == "vocab_size":
        args = ["--vocab-size", "90"]  # pads to 96 rows at tp=2, the files hold 104
        names = ["--vocab-size 90", "104"]
    elif damage == "embedding_1d":  # both TP ranks agree, on a shape the args contradict
        for t in range(2):
            f = it / f"mp_rank_0{t}_000" / "model_optim_rng.pt"
            sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
            sd["model"]["language_model"]["embedding"]["word_embeddings"]["weight"] = torch.ones(52, dtype=torch.float16)
            torch.save(sd, f)
        names = ["tensor 'language_model.embedding.word_embeddings.weight' has shape [104]", "say [104, 16]"]
        args = ["--model-only"]
    elif damage == "query_groups":  # args of a GQA run (2 groups of 2 heads): QKV has (4 + 2 x 2) x 4 rows, not 48
        for f in it.glob("mp_rank_*/model_optim_rng.pt"):
            sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
            sd["args"].group_query_attention, sd["args"].num_query_groups = True, 2
            torch.save(sd, f)
        names = ["tensor 'language_model.encoder.layers.0.self_attention.query_key_value.bias' has shape [48]",
                 "say [32]"]
    r = run_import(daemon, root, "--job", "bad", *args, check_rc=None)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert_error(r, *names)
    assert "bad" not in ls_jobs(daemon)


def test_cli_import_format_megatron_names_the_python_command(daemon, tmp_path):
    r = daemon.cli("import", tmp_path, "--format", "megatron", "--job", "j", "--step", "1", check=False)
    assert_error(r, "python3 -m ptcfs import-megatron", str(tmp_path))
    assert "j" not in ls_jobs(daemon)
