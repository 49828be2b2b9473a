"""Bad checkpoints are refused with an error naming the file and tensor at fault, and leave no
trace: no new job or step in `ls`, no new folder in the mount, the same bytes stored, and the
earlier good import still served."""

import json
import os
import shutil

import numpy as np
import pytest

import ptcgen
from ptcfs_harness import (Checkpoint, assert_error, check_ls_step, check_npy, cmp_files, ls_jobs,
                           verify_step)

GOOD = dict(style="gpt", tp=2, pp=2, dp=1, layers=2, hidden=64, vocab=300, seed=3)


@pytest.fixture(scope="module")
def good(module_daemon, tmp_path_factory):
    d = module_daemon
    ck = Checkpoint(str(tmp_path_factory.mktemp("good") / "ckpt"), **GOOD)
    out = d.cli_json("import", ck.path, "--job", "gpt", "--step", "100", "--json")
    assert out["bytes"] == ck.summary["bytes"]
    state = {
        "ls": ls_jobs(d),
        "top": sorted(os.listdir(d.mnt)),
        "job": sorted(os.listdir(os.path.join(d.mnt, "gpt"))),
        "status": d.cli_json("status", "--json"),
    }
    assert state["ls"] == {"gpt": ["100"]}
    return d, ck, state


# --------------------------------------------------------------------------------------
# mutations of a copy of the good checkpoint; each returns (names that must all appear in
# stderr, names of which at least one must appear)

def _header(path):
    data = open(path, "rb").read()
    n, entries, _ = ptcgen.parse_safetensors_header(data)
    return data, n, entries


def _by_offset(entries):
    return sorted(entries, key=lambda k: entries[k][2])


def _rewrite_header(path, fn):
    """Rewrites a rank file's header through fn(header dict) keeping the data area."""
    data, n, entries = _header(path)
    h = {k: {"data_offsets": [b, e], "dtype": dt, "shape": s} for k, (dt, s, b, e) in entries.items()}
    fn(h)
    with open(path, "wb") as f:
        f.write(ptcgen.encode_header(h) + data[8 + n:])


def _rewrite_slices(ck, path, t, p, fn):
    """Rewrites a rank file (canonically) from the oracle's slices after fn(dict name->(dtype, array))."""
    tensors = {name: (ck.ptc["tensors"][name]["dtype"], a) for name, a in ck.slices[(t, p)].items()}
    fn(tensors)
    ptcgen.write_safetensors(path, tensors)


def _edit_ptc(path, fn):
    p = os.path.join(path, "ptc.json")
    with open(p) as f:
        ptc = json.load(f)
    fn(ptc)
    ptcgen.write_ptc_json(p, ptc)


def m_truncated_data_last(ck, path):
    f = os.path.join(path, "tp1-pp0.safetensors")
    data, n, entries = _header(f)
    last = _by_offset(entries)[-1]
    b, e = entries[last][2:]
    assert e - b >= 2
    with open(f, "r+b") as fh:
        fh.truncate(8 + n + b + (e - b) // 2)
    return ("tp1-pp0.safetensors", last), ()


def m_truncated_data_mid(ck, path):
    f = os.path.join(path, "tp0-pp1.safetensors")
    data, n, entries = _header(f)
    cut = (len(data) - 8 - n) // 2
    hit = tuple(k for k, v in entries.items() if v[3] > cut)
    with open(f, "r+b") as fh:
        fh.truncate(8 + n + cut)
    return ("tp0-pp1.safetensors",), hit


def m_truncated_header(ck, path):
    f = os.path.join(path, "tp0-pp0.safetensors")
    data, n, _ = _header(f)
    with open(f, "r+b") as fh:
        fh.truncate(8 + n // 2)
    return ("tp0-pp0.safetensors",), ()


def m_truncated_length_prefix(ck, path):
    f = os.path.join(path, "tp1-pp1.safetensors")
    with open(f, "r+b") as fh:
        fh.truncate(5)
    return ("tp1-pp1.safetensors",), ()


def m_empty_rank_file(ck, path):
    open(os.path.join(path, "tp0-pp1.safetensors"), "wb").close()
    return ("tp0-pp1.safetensors",), ()


def m_header_not_json(ck, path):
    f = os.path.join(path, "tp1-pp0.safetensors")
    with open(f, "r+b") as fh:
        fh.seek(8)
        fh.write(b"x")
    return ("tp1-pp0.safetensors",), ()


def _nested_header(f, size):
    """Replaces the rank file's header with `size` bytes: an object whose first member opens
    nested '[' to the end (no DOM may be built of it; a header must start with '{')."""
    data, n, _ = _header(f)
    with open(f, "wb") as fh:
        fh.write(size.to_bytes(8, "little") + b'{"a":' + b"[" * (size - 5) + data[8 + n:])


def m_header_nested_arrays(ck, path):
    _nested_header(os.path.join(path, "tp1-pp0.safetensors"), 100_000)
    return ("tp1-pp0.safetensors", "nested deeper than 64"), ()


def m_offsets_past_eof(ck, path):
    f = os.path.join(path, "tp1-pp1.safetensors")
    _, _, entries = _header(f)
    last = _by_offset(entries)[-1]

    def fn(h):
        b, e = h[last]["data_offsets"]
        h[last]["data_offsets"] = [b + 4096, e + 4096]
    _rewrite_header(f, fn)
    return ("tp1-pp1.safetensors", last), ()


def m_offsets_overlap(ck, path):
    f = os.path.join(path, "tp0-pp0.safetensors")
    _, _, entries = _header(f)
    first, second = _by_offset(entries)[:2]
    assert entries[first][3] - entries[first][2] >= 8

    def fn(h):
        b, e = h[second]["data_offsets"]
        h[second]["data_offsets"] = [b - 8, e - 8]
    _rewrite_header(f, fn)
    return ("tp0-pp0.safetensors",), (first, second)


def m_missing_rank_file(ck, path):
    os.unlink(os.path.join(path, "tp1-pp1.safetensors"))
    return ("tp1-pp1.safetensors",), ()


def m_extra_rank_file_tp(ck, path):
    shutil.copy(os.path.join(path, "tp0-pp0.safetensors"), os.path.join(path, "tp2-pp0.safetensors"))
    return ("tp2-pp0.safetensors",), ()


def m_extra_rank_file_pp(ck, path):
    shutil.copy(os.path.join(path, "tp1-pp1.safetensors"), os.path.join(path, "tp1-pp2.safetensors"))
    return ("tp1-pp2.safetensors",), ()


def m_wrong_shape(ck, path):
    name = "layers.1.self_attention.dense.weight"

    def fn(ts):
        dt, a = ts[name]
        ts[name] = (dt, np.ascontiguousarray(a[:, :-1]))
    _rewrite_slices(ck, os.path.join(path, "tp0-pp1.safetensors"), 0, 1, fn)
    return ("tp0-pp1.safetensors", name), ()


def m_wrong_shape_same_size(ck, path):
    name = "layers.0.self_attention.query_key_value.weight"  # [3h/2, h] on each rank

    def fn(ts):
        dt, a = ts[name]
        ts[name] = (dt, np.ascontiguousarray(a).reshape(a.shape[1], a.shape[0]))
    _rewrite_slices(ck, os.path.join(path, "tp1-pp0.safetensors"), 1, 0, fn)
    return ("tp1-pp0.safetensors", name), ()


def m_wrong_dtype(ck, path):
    name = "layers.0.input_layernorm.weight"  # F32

    def fn(ts):
        ts[name] = ("F64", ts[name][1].astype("<f8"))
    _rewrite_slices(ck, os.path.join(path, "tp1-pp0.safetensors"), 1, 0, fn)
    return ("tp1-pp0.safetensors", name), ()


def m_wrong_dtype_same_size(ck, path):
    name = "layers.1.mlp.dense_4h_to_h.weight"  # BF16 -> F16, same bytes

    def fn(ts):
        ts[name] = ("F16", ts[name][1].view("<f2"))
    _rewrite_slices(ck, os.path.join(path, "tp0-pp1.safetensors"), 0, 1, fn)
    return ("tp0-pp1.safetensors", name), ()


def m_missing_tensor(ck, path):
    name = "embedding.position_embeddings.weight"
    _rewrite_slices(ck, os.path.join(path, "tp0-pp0.safetensors"), 0, 0, lambda ts: ts.pop(name))
    return ("tp0-pp0.safetensors", name), ()


def m_missing_ptc_json(ck, path):
    os.unlink(os.path.join(path, "ptc.json"))
    return ("ptc.json",), ()


def m_ptc_not_json(ck, path):
    with open(os.path.join(path, "ptc.json"), "a") as f:
        f.write("}{,")
    return ("ptc.json",), ()


def m_ptc_unknown_top_key(ck, path):
    _edit_ptc(path, lambda p: p.__setitem__("zzz_unknown_key", 1))
    return ("ptc.json", "zzz_unknown_key"), ()


def m_ptc_unknown_tensor_key(ck, path):
    name = "layers.0.self_attention.dense.weight"
    _edit_ptc(path, lambda p: p["tensors"][name].__setitem__("bogus_key", 1))
    return ("ptc.json", name, "bogus_key"), ()


def _add_replicated(ck, path, name):
    """Adds a replicated first-stage tensor `name` consistently to ptc.json and the rank files."""
    _edit_ptc(path, lambda p: p["tensors"].__setitem__(name, {"dtype": "F32", "shape": [4], "stage": "first"}))
    for t in range(ck.tp):
        _rewrite_slices(ck, os.path.join(path, f"tp{t}-pp0.safetensors"), t, 0,
                        lambda ts: ts.__setitem__(name, ("F32", np.arange(4, dtype="<f4"))))


def m_dotdot_name(ck, path):
    _add_replicated(ck, path, "layers/../x")
    return ("layers/../x",), ("ptc.json", "tp0-pp0.safetensors", "tp1-pp0.safetensors")


def m_dotdot_leading(ck, path):
    _add_replicated(ck, path, "../escape")
    return ("../escape",), ("ptc.json", "tp0-pp0.safetensors", "tp1-pp0.safetensors")


def m_not_divisible_tp(ck, path):
    name = "layers.0.self_attention.dense.weight"  # [h, h], tp_dim 1
    _edit_ptc(path, lambda p: p["tensors"][name].__setitem__("shape", [64, 65]))
    return (name,), ("ptc.json", "tp0-pp0.safetensors", "tp1-pp0.safetensors")


def m_not_divisible_parts(ck, path):
    name = "layers.1.mlp.dense_h_to_4h.weight"  # [8h, h], parts 2 -> 257 rows per part, odd
    _edit_ptc(path, lambda p: p["tensors"][name].__setitem__("shape", [514, 64]))
    return (name,), ("ptc.json", "tp0-pp1.safetensors", "tp1-pp1.safetensors")


CASES = {
    "truncated-data-last-tensor": m_truncated_data_last,
    "truncated-data-mid": m_truncated_data_mid,
    "truncated-header": m_truncated_header,
    "truncated-length-prefix": m_truncated_length_prefix,
    "empty-rank-file": m_empty_rank_file,
    "header-not-json": m_header_not_json,
    "header-nested-arrays": m_header_nested_arrays,
    "offsets-past-eof": m_offsets_past_eof,
    "offsets-overlap": m_offsets_overlap,
    "missing-rank-file": m_missing_rank_file,
    "extra-rank-file-tp": m_extra_rank_file_tp,
    "extra-rank-file-pp": m_extra_rank_file_pp,
    "wrong-shape": m_wrong_shape,
    "wrong-shape-same-size": m_wrong_shape_same_size,
    "wrong-dtype": m_wrong_dtype,
    "wrong-dtype-same-size": m_wrong_dtype_same_size,
    "missing-tensor": m_missing_tensor,
    "missing-ptc-json": m_missing_ptc_json,
    "ptc-not-json": m_ptc_not_json,
    "ptc-unknown-top-key": m_ptc_unknown_top_key,
    "ptc-unknown-tensor-key": m_ptc_unknown_tensor_key,
    "dotdot-name": m_dotdot_name,
    "dotdot-leading": m_dotdot_leading,
    "not-divisible-tp": m_not_divisible_tp,
    "not-divisible-parts": m_not_divisible_parts,
}


def check_unchanged(d, ck, state):
    assert ls_jobs(d) == state["ls"], "ls shows a new job or step"
    assert sorted(os.listdir(d.mnt)) == state["top"], "a new folder appeared in the mount"
    assert sorted(os.listdir(os.path.join(d.mnt, "gpt"))) == state["job"], "a new step folder appeared"
    st = d.cli_json("status", "--json")
    for k in ("jobs", "steps", "bytes_stored"):
        assert st[k] == state["status"][k], (k, st)
    # The good import is still served.
    sd = d.step_dir("gpt", "100")
    cmp_files(os.path.join(sd, "tp1-pp1.safetensors"), ck.shard_path(1, 1))
    name = "layers.1.mlp.dense_h_to_4h.weight"
    check_npy(os.path.join(sd, "tp0-pp1", name + ".npy"), ck.slices[(0, 1)][name], name)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_checkpoint_refused(good, tmp_path, case):
    d, ck, state = good
    bad = str(tmp_path / "bad")
    shutil.copytree(ck.path, bad)
    required, any_of = CASES[case](ck, bad)
    # Into a new step of the existing job, and into a new job.
    for job, step in (("gpt", "200"), ("newjob", "1")):
        r = d.cli("import", bad, "--job", job, "--step", step, "--json", check=False)
        assert_error(r, *required, any_of=any_of)
        check_unchanged(d, ck, state)


def test_import_twice_refused(good):
    d, ck, state = good
    r = d.cli("import", ck.path, "--job", "gpt", "--step", "100", "--json", check=False)
    assert_error(r, "gpt", "100")
    check_unchanged(d, ck, state)
    verify_step(d, "gpt", "100", ck)


@pytest.mark.parametrize("job,step", [("../evil", "1"), ("gpt", "../evil"), (".hidden", "1"), ("gpt", ".hidden"),
                                      ("a/b", "1"), ("gpt", "a/b"), ("a b", "1"), ("", "1"), ("gpt", ""),
                                      ("..", "1"), ("gpt", "..")])
def test_bad_names_refused(good, job, step):
    d, ck, state = good
    r = d.cli("import", ck.path, "--job", job, "--step", step, check=False)
    assert r.returncode != 0, f"import --job {job!r} --step {step!r} succeeded"
    assert "error" in r.stderr, r.stderr
    check_unchanged(d, ck, state)
    assert not os.path.exists(os.path.join(d.root, "evil"))
    assert not os.path.exists(os.path.join(d.data, "evil")) and not os.path.exists(os.path.join(d.mnt, "evil"))


def test_missing_directory_refused(good, tmp_path):
    d, ck, state = good
    missing = str(tmp_path / "no-such-checkpoint")
    r = d.cli("import", missing, "--job", "gpt", "--step", "300", check=False)
    assert_error(r, "no-such-checkpoint")
    check_unchanged(d, ck, state)


def test_good_import_intact_after_all(good):
    d, ck, state = good
    verify_step(d, "gpt", "100", ck)
    check_ls_step(d, "gpt", "100", ck)
    assert d.cli_json("status", "--json")["bytes_stored"] == state["status"]["bytes_stored"]


def test_a_header_of_90mb_nested_arrays_costs_no_memory(daemon, tmp_path):
    """Found by probing: ~100 MB of '[' under the header limit took 20 s and 7 GB of memory to
    refuse. The depth is bounded before a DOM is built: refused, and the daemon's peak memory
    stays near the header's own size."""
    ck = Checkpoint(str(tmp_path / "ckpt"), **GOOD)
    _nested_header(ck.shard_path(0, 0), 90_000_000)
    r = daemon.cli("import", ck.path, "--job", "gpt", "--step", "1", check=False)
    assert_error(r, "tp0-pp0.safetensors", "nested deeper than 64")
    with open(f"/proc/{daemon.proc.pid}/status") as f:
        peak_kb = int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
    assert peak_kb < 1 << 20, f"daemon peak memory {peak_kb} kB"
    assert ls_jobs(daemon) == {}
