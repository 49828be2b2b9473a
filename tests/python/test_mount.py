"""The package against what a real daemon's mount serves: byte-identical safetensors and
ptc.json, the same slice geometry after repartitions, zero-copy loads of the views."""

import os

import numpy as np
import pytest

import ptcfs
import ptcgen
from ptcfs import ptc as P
from ptcfs import safetensors as st


def expected_shard_bytes(ptc, full, t, p):
    tp = ptc["parallelism"]["tp"]
    tensors, dtypes = {}, {}
    for name, (dtype, _) in P.shard_tensors(ptc, t, p).items():
        tensors[name] = P.split(full[name], ptc["tensors"][name], tp, t)
        dtypes[name] = dtype
    return st.canonical_bytes(tensors, dtypes)


@pytest.mark.parametrize("style", ["gpt", "llama"])
def test_mount_views_equal_the_packages_canonical_form_across_repartitions(daemon, tmp_path, style):
    ptc = ptcgen.make_ptc(style, 2, 2, 1, layers=4, hidden=128, vocab=300)
    full = ptcgen.full_tensors(ptc, seed=5)
    ptcgen.write_checkpoint(str(tmp_path / "ck"), ptc, full)
    with daemon.client() as c:
        c.import_dir(str(tmp_path / "ck"), "j", "1")
        for tp, pp, dp in [(2, 2, 1), (4, 1, 2), (1, 4, 1), (2, 3, 1)]:
            if (tp, pp, dp) != (2, 2, 1):
                c.repartition("j", "1", (tp, pp, dp))
            sd = os.path.join(daemon.mnt, "j", "1")
            want_ptc = P.with_parallelism(ptc, tp, pp, dp)
            with open(os.path.join(sd, "ptc.json")) as f:
                assert f.read() == P.dumps(want_ptc)  # byte for byte
            assert ptcfs.load_ptc(sd) == P.normalize(want_ptc)
            for t, p in P.shards(want_ptc):
                path = os.path.join(sd, ptcfs.shard_file(t, p))
                with open(path, "rb") as f:
                    assert f.read() == expected_shard_bytes(want_ptc, full, t, p), (tp, pp, path)
                got = ptcfs.load_shard(sd, t, p, ptc=want_ptc)
                for name, arr in got.items():
                    # Read-only: mapped (the direct path or the mount), or gathered where strided.
                    assert not arr.flags.writeable
                    assert np.array_equal(arr, P.split(full[name], want_ptc["tensors"][name], tp, t))
            for name in ("embedding.word_embeddings.weight", "extra/rng_state", "final_layernorm.weight"):
                got = ptcfs.load_full(sd, name)
                assert isinstance(got, np.memmap) and np.array_equal(got, full[name]), name


def test_a_saved_shard_is_byte_identical_to_the_mounts(daemon, tmp_path):
    """What save_shard writes for a rank is what the mount serves for it after import."""
    ptc = ptcgen.make_ptc("gpt", 2, 1, 1, layers=2, hidden=64, vocab=100)
    full = ptcgen.full_tensors(ptc, seed=2)
    out = tmp_path / "saved"
    out.mkdir()
    ptcfs.save_ptc(str(out), ptc)
    for t, p in P.shards(ptc):
        ptcfs.save_shard(str(out), ptc, t, p, {n: P.split(full[n], ptc["tensors"][n], 2, t)
                                              for n in P.shard_tensors(ptc, t, p)})
    with daemon.client() as c:
        c.import_dir(str(out), "j", "7")
    sd = os.path.join(daemon.mnt, "j", "7")
    for t, p in P.shards(ptc):
        with open(out / ptcfs.shard_file(t, p), "rb") as a, open(os.path.join(sd, ptcfs.shard_file(t, p)), "rb") as b:
            assert a.read() == b.read()
    with open(out / "ptc.json") as a, open(os.path.join(sd, "ptc.json")) as b:
        assert a.read() == b.read()
