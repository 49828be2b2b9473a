"""save_shard / save_ptc / load_shard / load_full on a plain directory, against ptcgen."""

import os

import numpy as np
import pytest

import ptcfs
import ptcgen
from ptcfs import ptc as P


@pytest.fixture
def model():
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, layers=4, hidden=64, vocab=100)
    return ptc, ptcgen.full_tensors(ptc, seed=9)


def save_all(dir, ptc, full):
    ptcfs.save_ptc(dir, ptc)
    tp = ptc["parallelism"]["tp"]
    for t, p in P.shards(ptc):
        ptcfs.save_shard(dir, ptc, t, p, {n: P.split(full[n], ptc["tensors"][n], tp, t)
                                          for n in P.shard_tensors(ptc, t, p)})


def test_saved_rank_files_are_ptcgens_byte_for_byte(tmp_path, model):
    ptc, full = model
    (tmp_path / "ours").mkdir()
    save_all(str(tmp_path / "ours"), ptc, full)
    ptcgen.write_checkpoint(str(tmp_path / "theirs"), ptc, full)
    for t, p in P.shards(ptc):
        f = ptcfs.shard_file(t, p)
        assert (tmp_path / "ours" / f).read_bytes() == (tmp_path / "theirs" / f).read_bytes(), f
    assert ptcfs.load_ptc(str(tmp_path / "ours")) == P.normalize(ptc)


def test_load_shard_and_gathered_full_tensors(tmp_path, model):
    ptc, full = model
    save_all(str(tmp_path), ptc, full)
    oracle = ptcgen.shard_slices(ptc, tensors=full)
    for (t, p), want in oracle.items():
        got = ptcfs.load_shard(str(tmp_path), t, p, ptc=ptc)
        assert sorted(got) == sorted(want)
        for name, arr in want.items():
            assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr), name
    for name, arr in full.items():  # no full/ views here: gathered from the shards
        assert np.array_equal(ptcfs.load_full(str(tmp_path), name), arr), name


def test_torch_tensors_are_saved_as_the_ptc_says(tmp_path):
    torch = pytest.importorskip("torch")
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0,
           "tensors": {"w": {"dtype": "BF16", "shape": [3, 2]}, "b": {"dtype": "F32", "shape": [2]}}}
    w, b = torch.randn(3, 2).to(torch.bfloat16), torch.randn(2)
    ptcfs.save_shard(str(tmp_path), ptc, 0, 0, {"w": w, "b": b})
    f = ptcfs.safetensors.SafetensorsFile(str(tmp_path / "tp0-pp0.safetensors"))
    assert torch.equal(f.torch("w"), w) and torch.equal(f.torch("b"), b)


@pytest.mark.parametrize("change, text", [
    (lambda d: d.pop("final_layernorm.weight"), "lacks final_layernorm.weight"),
    (lambda d: d.update({"stray": np.zeros(1, np.float32)}), "does not place there: stray"),
    (lambda d: d.update({"final_layernorm.weight": np.zeros(3, np.float32)}),
     "tensor 'final_layernorm.weight': slice shape [3], the PTC gives [64]"),
    (lambda d: d.update({"final_layernorm.weight": np.zeros(64, np.float64)}),
     "tensor 'final_layernorm.weight': array of dtype float64 does not hold F32"),
    (lambda d: d.update({"layers.3.mlp.dense_4h_to_h.weight": np.zeros((64, 128), np.float32)}),
     "tensor 'layers.3.mlp.dense_4h_to_h.weight': array of dtype float32 does not hold BF16"),
])
def test_save_shard_refuses_a_wrong_shard_before_writing(tmp_path, model, change, text):
    ptc, full = model
    tensors = {n: P.split(full[n], ptc["tensors"][n], 2, 1) for n in P.shard_tensors(ptc, 1, 1)}
    change(tensors)
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.save_shard(str(tmp_path), ptc, 1, 1, tensors)
    assert text in e.value.message and "tp1-pp1.safetensors" in e.value.message, e.value.message
    assert not os.path.exists(tmp_path / "tp1-pp1.safetensors")


def test_load_shard_checks_against_the_ptc(tmp_path, model):
    ptc, full = model
    save_all(str(tmp_path), ptc, full)
    other = P.with_parallelism(ptc, 1, 2, 1)
    with pytest.raises(ptcfs.Error, match="tp0-pp0.safetensors: tensor '.*' is BF16 .*the PTC gives BF16"):
        ptcfs.load_shard(str(tmp_path), 0, 0, ptc=other)
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.load_shard(str(tmp_path), 5, 0)
    assert e.value.code == "not_found" and "tp5-pp0.safetensors" in e.value.message


def test_step_dir_creates_once_and_checks_names(tmp_path):
    d = ptcfs.step_dir(str(tmp_path), "job", 12, create=True)
    assert d == str(tmp_path / "job" / "12") and os.path.isdir(d)
    assert ptcfs.step_dir(str(tmp_path), "job", "12", create=True) == d  # again: fine
    with pytest.raises(ptcfs.Error, match="step name '..'"):
        ptcfs.step_dir(str(tmp_path), "job", "..")
    with pytest.raises(ptcfs.Error, match="may not be called 'data'"):
        ptcfs.step_dir(str(tmp_path), "job", "data")
