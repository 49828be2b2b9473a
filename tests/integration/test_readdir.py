"""Folder listings come with attributes (readdirplus), and a listing that straddles a
repartition never puts the old version's names back into the kernel's cache."""

import io
import os
import stat

import numpy as np

import ptcgen
from ptcfs_harness import read_all


def _npy_size(dtype: str, shape) -> int:
    buf = io.BytesIO()
    np.save(buf, np.zeros(shape, dtype=ptcgen.np_dtype(dtype)))
    return len(buf.getvalue())


def _files(folder: str) -> dict:
    """{relative path: (inode, size)} of every file below folder, from the listings alone."""
    out = {}
    with os.scandir(folder) as it:
        for e in it:
            if e.is_dir():
                out.update({f"{e.name}/{k}": v for k, v in _files(e.path).items()})
            else:
                assert e.is_file(), e.name
                out[e.name] = (e.inode(), e.stat().st_size)
    return out


def test_ls_attributes_match_stat_and_content(daemon, make_ckpt):
    ck = make_ckpt("gpt", style="gpt", tp=2, pp=1, layers=4, hidden=128, vocab=1000, seed=3)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "1")
    full = os.path.join(daemon.step_dir("gpt", "1"), "full")
    files = _files(full)
    specs = ck.ptc["tensors"]
    assert sorted(files) == sorted(n + ".npy" for n in specs)
    for name, (ino, size) in files.items():
        path = os.path.join(full, name)
        spec = specs[name[:-len(".npy")]]
        # The listing's size is the whole tensor's .npy, as numpy writes it.
        assert size == _npy_size(spec["dtype"], spec["shape"]), name
        st = os.stat(path)
        assert stat.S_ISREG(st.st_mode) and (st.st_ino, st.st_size) == (ino, size), name
        assert len(read_all(path)) == size, name


def test_listing_across_a_repartition_leaves_no_stale_names(daemon, tmp_path):
    # 9,000 tensors: the kernel asks for a folder's entries in readdirplus requests of 1 MiB
    # (about 6,000 short names each), so this listing straddles the commit.
    n = 9000
    ptc = {"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "num_layers": 0,
           "tensors": {f"t{i:05d}": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0} for i in range(n)}}
    ck = str(tmp_path / "ck")
    ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    daemon.cli("import", ck, "--job", "many", "--step", "1")
    shard = os.path.join(daemon.step_dir("many", "1"), "tp0-pp0")
    names = []
    with os.scandir(shard) as it:
        for _ in range(5):
            names.append(next(it).name)
        # At tp=1 the shard holds whole tensors: every file doubles in size.
        daemon.cli("repartition", "--job", "many", "--step", "1", "--to", "tp=1,pp=1,dp=2")
        names += [e.name for e in it]
    assert sorted(names) == [f"t{i:05d}.npy" for i in range(n)]
    want = _npy_size("F32", [8, 4])
    # From the kernel's cache where the listing left a name there: it must be the new version's.
    stale = [name for name in names if os.stat(os.path.join(shard, name)).st_size != want]
    assert not stale, f"{len(stale)} names show the old version, e.g. {stale[:3]}"
