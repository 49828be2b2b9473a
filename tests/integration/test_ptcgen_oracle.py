"""Checks of the test oracle itself (tests/tools/ptcgen.py), against hand-worked examples.

These need no daemon; they guard the generator that every other integration test trusts."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import ptcgen

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PTCGEN = os.path.join(REPO, "tests", "tools", "ptcgen.py")


def test_stage_groups():
    assert [list(r) for r in ptcgen.stage_layers(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(r) for r in ptcgen.stage_layers(4, 2)] == [[0, 1], [2, 3]]
    assert [list(r) for r in ptcgen.stage_layers(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(r) for r in ptcgen.stage_layers(2, 3)] == [[0], [1], []]
    assert ptcgen.stages_of({"stage": "all"}, 4, 3) == [0, 1, 2]
    assert ptcgen.stages_of({"stage": "last"}, 4, 3) == [2]
    assert ptcgen.stages_of({}, 4, 3) == [0]
    assert ptcgen.stages_of({"stage": [2, 0]}, 4, 3) == [0, 2]
    assert ptcgen.stages_of({"layer": 2}, 5, 2) == [0]
    assert ptcgen.stages_of({"layer": 3}, 5, 2) == [1]


def test_split_parts_and_padding():
    full = np.arange(16, dtype=np.int64).reshape(8, 2)
    spec = {"dtype": "I64", "shape": [8, 2], "tp_dim": 0, "parts": 2}
    # parts of 4 rows: [0..3], [4..7]; tp=2 -> rank 0 takes rows 0,1 and 4,5.
    assert ptcgen.tp_slice(full, spec, 2, 0)[:, 0].tolist() == [0, 2, 8, 10]
    assert ptcgen.tp_slice(full, spec, 2, 1)[:, 0].tolist() == [4, 6, 12, 14]
    spec1 = {"dtype": "I64", "shape": [8, 2], "tp_dim": 1}
    assert ptcgen.tp_slice(full, spec1, 2, 1).ravel().tolist() == list(range(1, 16, 2))
    # pad_to 4, tp 2, size 5 -> padded 8, 4 rows per rank; rank 1 = row 4 + 3 zero rows.
    full5 = np.arange(1, 11, dtype=np.int64).reshape(5, 2)
    spec2 = {"dtype": "I64", "shape": [5, 2], "tp_dim": 0, "pad_to": 4}
    assert ptcgen.tp_slice(full5, spec2, 2, 0).tolist() == full5[:4].tolist()
    assert ptcgen.tp_slice(full5, spec2, 2, 1).tolist() == [[9, 10], [0, 0], [0, 0], [0, 0]]
    assert ptcgen.shard_shape(spec2, 2) == [4, 2]
    assert ptcgen.padded_size(1000, 128, 2) == 1024
    assert ptcgen.padded_size(1000, 128, 4) == 1024
    assert ptcgen.padded_size(1025, 128, 1) == 1152
    with pytest.raises(ValueError):
        ptcgen.tp_slice(full5, {"dtype": "I64", "shape": [5, 2], "tp_dim": 0}, 2, 0)


@pytest.mark.parametrize("style,tp,pp,layers", [("gpt", 2, 2, 4), ("gpt", 1, 3, 5), ("llama", 4, 2, 3),
                                                ("llama", 2, 1, 2)])
def test_slices_reassemble(style, tp, pp, layers):
    ptc = ptcgen.make_ptc(style, tp, pp, 1, layers, 128, 1000)
    full = ptcgen.full_tensors(ptc, 7)
    sl = ptcgen.shard_slices(ptc, tensors=full)
    assert sorted(sl) == sorted((t, p) for t in range(tp) for p in range(pp))
    L = ptc["num_layers"]
    for name, spec in ptc["tensors"].items():
        stages = ptcgen.stages_of(spec, L, pp)
        holders = [k for k, v in sl.items() if name in v]
        assert sorted(holders) == sorted((t, p) for t in range(tp) for p in stages), name
        for p in stages:
            parts = [sl[(t, p)][name] for t in range(tp)]
            k = spec.get("tp_dim")
            if k is None:
                for a in parts:
                    assert np.array_equal(a, full[name])
                continue
            n = spec.get("parts", 1)
            if "pad_to" in spec:
                cat = np.concatenate(parts, axis=k)
                assert cat.shape[k] % (spec["pad_to"] * tp) == 0
                idx = [slice(None)] * cat.ndim
                idx[k] = slice(0, full[name].shape[k])
                assert np.array_equal(cat[tuple(idx)], full[name])
                idx[k] = slice(full[name].shape[k], None)
                assert not cat[tuple(idx)].any()
            else:
                # Undo the parts interleave: each rank's slice is n pieces, piece j of part j.
                pieces = [np.split(a, n, axis=k) for a in parts]
                rebuilt = np.concatenate([pieces[t][j] for j in range(n) for t in range(tp)], axis=k)
                assert np.array_equal(rebuilt, full[name]), name


def test_padding_really_exists():
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, 4, 256, 1000)
    assert 1000 % (128 * 2) != 0
    sl = ptcgen.shard_slices(ptc, seed=0)
    emb = sl[(1, 0)]["embedding.word_embeddings.weight"]
    assert emb.shape == (512, 256)
    assert not emb[1000 - 512:].any() and emb[:1000 - 512].any()


def test_bf16_never_nan_and_deterministic():
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, 2, 128, 1000)
    a = ptcgen.full_tensors(ptc, 3)
    b = ptcgen.full_tensors(ptc, 3)
    c = ptcgen.full_tensors(ptc, 4)
    for name in a:
        assert np.array_equal(a[name], b[name])
        assert a[name].dtype == ptcgen.np_dtype(ptc["tensors"][name]["dtype"])
        assert list(a[name].shape) == ptc["tensors"][name]["shape"]
    w = a["layers.0.self_attention.dense.weight"]
    assert w.dtype == np.dtype("<u2")
    f = (w.astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(f).all() and 0.5 < f.std() < 2
    assert not np.array_equal(a["layers.0.self_attention.dense.weight"], c["layers.0.self_attention.dense.weight"])
    # Adding a tensor leaves the others' values unchanged.
    ptc2 = json.loads(json.dumps(ptc))
    ptc2["tensors"]["zzz"] = {"dtype": "F32", "shape": [3]}
    d = ptcgen.full_tensors(ptc2, 3)
    assert all(np.array_equal(a[n], d[n]) for n in a)


def test_safetensors_canonical_bytes(tmp_path):
    p = tmp_path / "x.safetensors"
    a = np.array([[1, 2, 3]], dtype="<f4")
    b = np.array([7], dtype="<u2")
    ptcgen.write_safetensors(str(p), {"b": ("BF16", b), "a": ("F32", a)})
    data = p.read_bytes()
    js = b'{"a":{"data_offsets":[0,12],"dtype":"F32","shape":[1,3]},"b":{"data_offsets":[12,14],"dtype":"BF16","shape":[1]}}'
    js += b" " * (-len(js) % 8)
    assert data == struct.pack("<Q", len(js)) + js + a.tobytes() + b.tobytes()
    assert (8 + len(js)) % 8 == 0
    back = ptcgen.read_safetensors(str(p), canonical=True)
    assert back["a"][0] == "F32" and np.array_equal(back["a"][1], a)
    assert back["b"][0] == "BF16" and back["b"][1].dtype == np.dtype("<u2") and back["b"][1].tolist() == [7]


def _rewrite(h, data_area):
    return ptcgen.encode_header(h) + data_area


def test_strict_reader_refuses(tmp_path):
    good = ptcgen.safetensors_bytes({"a": ("F32", np.zeros((2, 2), "<f4")), "b": ("I64", np.arange(3))})
    ptcgen.parse_safetensors(good, canonical=True)
    (n,) = struct.unpack("<Q", good[:8])
    h = json.loads(good[8:8 + n])
    body = good[8 + n:]
    bad = []
    bad.append(good[:-1])                                # truncated data
    bad.append(good[:8 + n // 2])                        # truncated header
    h1 = json.loads(json.dumps(h)); h1["b"]["data_offsets"] = [16, 48]; bad.append(_rewrite(h1, body))  # past end
    h2 = json.loads(json.dumps(h)); h2["b"]["data_offsets"] = [8, 32]; bad.append(_rewrite(h2, body[:32]))  # overlap
    h3 = json.loads(json.dumps(h)); h3["b"]["dtype"] = "I32"; bad.append(_rewrite(h3, body))  # size mismatch
    h4 = json.loads(json.dumps(h)); h4["b"]["extra"] = 1; bad.append(_rewrite(h4, body))  # unknown member
    bad.append(good + b"\0" * 8)                         # trailing bytes not covered
    for i, blob in enumerate(bad):
        with pytest.raises(ptcgen.SafetensorsError):
            ptcgen.parse_safetensors(blob, where=f"case{i}")
    # Non-canonical but valid: metadata, reversed order.
    h5 = {"__metadata__": {"k": "v"}, "b": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]},
          "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [24, 40]}}
    blob = _rewrite(h5, body[16:] + body[:16])
    out = ptcgen.parse_safetensors(blob)
    assert out["b"][1].tolist() == [0, 1, 2]
    with pytest.raises(ptcgen.SafetensorsError):
        ptcgen.parse_safetensors(blob, canonical=True)


def test_cli_writes_checkpoint_and_reference(tmp_path):
    out, ref = tmp_path / "ck", tmp_path / "ref"
    r = subprocess.run([sys.executable, PTCGEN, str(out), "--style", "gpt", "--tp", "2", "--pp", "2",
                        "--dp", "1", "--layers", "4", "--hidden", "256", "--vocab", "1000", "--seed", "5",
                        "--ref", str(ref), "--json"], capture_output=True, text=True, check=True)
    summary = json.loads(r.stdout)
    ptc = json.loads((out / "ptc.json").read_text())
    assert ptc == ptcgen.make_ptc("gpt", 2, 2, 1, 4, 256, 1000)
    assert sorted(os.listdir(out)) == ["ptc.json", "tp0-pp0.safetensors", "tp0-pp1.safetensors",
                                       "tp1-pp0.safetensors", "tp1-pp1.safetensors"]
    full = ptcgen.full_tensors(ptc, 5)
    oracle = ptcgen.shard_slices(ptc, 2, 2, full)
    total = 0
    for (t, p), want in oracle.items():
        path = out / f"tp{t}-pp{p}.safetensors"
        got = ptcgen.read_safetensors(str(path), canonical=True)
        assert sorted(got) == sorted(want)
        for name, arr in want.items():
            assert got[name][0] == ptc["tensors"][name]["dtype"]
            assert got[name][1].dtype == arr.dtype and np.array_equal(got[name][1], arr)
            total += got[name][1].nbytes
    assert summary["bytes"] == total and summary["shards"] == 4 and summary["tensors"] == len(ptc["tensors"])
    assert os.path.isfile(ref / "extra" / "rng_state.npy")
    back = ptcgen.load_reference(str(ref), ptc)
    for name in full:
        assert back[name].dtype == full[name].dtype and np.array_equal(back[name], full[name])


def test_cli_target_mb(tmp_path):
    r = subprocess.run([sys.executable, PTCGEN, str(tmp_path / "ck"), "--target-mb", "20", "--json"],
                       capture_output=True, text=True, check=True)
    summary = json.loads(r.stdout)
    assert 15e6 < summary["bytes"] < 25e6, summary["bytes"]
    sizes = sum(os.path.getsize(tmp_path / "ck" / f) for f in os.listdir(tmp_path / "ck"))
    assert sizes >= summary["bytes"]
