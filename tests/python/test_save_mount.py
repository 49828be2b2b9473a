"""Saving through the package into a real daemon's mount: whole shards (save_shard) and ZeRO-style
ranges of one tensor from several processes at once (save_tensor_range); the step commits and every
view reads back exactly what was saved."""

import multiprocessing
import os

import numpy as np

import ptcfs
import ptcgen
from ptcfs import ptc as P


def _write_range(dir, ptc, t, p, name, start, values):
    ptcfs.save_tensor_range(dir, ptc, t, p, name, start, values)


def test_save_shard_into_the_mount_commits_and_reads_back(daemon):
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, layers=4, hidden=64, vocab=100)
    full = ptcgen.full_tensors(ptc, seed=3)
    sd = ptcfs.step_dir(daemon.mnt, "s", 10, create=True)
    ptcfs.save_ptc(sd, ptc)
    for t, p in P.shards(ptc):
        ptcfs.save_shard(sd, ptc, t, p, {n: P.split(full[n], ptc["tensors"][n], 2, t) for n in P.shard_tensors(ptc, t, p)})
    info = ptcfs.wait_committed("s", 10, daemon=daemon.addr, timeout=30)
    assert info["version"] == 1
    for name, want in full.items():
        assert np.array_equal(ptcfs.load_full(sd, name, ptc), want), name


def test_zero_ranges_written_by_four_processes_at_once(daemon):
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 4}, "num_layers": 0,
           "tensors": {"optimizer.exp_avg.w": {"dtype": "F32", "shape": [96, 40]},
                       "optimizer.exp_avg.b": {"dtype": "BF16", "shape": [1000]}}}
    full = ptcgen.full_tensors(ptc, seed=5)
    sd = ptcfs.step_dir(daemon.mnt, "zero", 1, create=True)
    ptcfs.save_ptc(sd, ptc)
    procs = []
    for name, arr in full.items():
        flat = arr.reshape(-1)
        cuts = [len(flat) * d // 4 for d in range(5)]
        for d in range(4):  # DP rank d's contiguous quarter
            procs.append(multiprocessing.Process(target=_write_range,
                                                 args=(sd, ptc, 0, 0, name, cuts[d], flat[cuts[d]:cuts[d + 1]])))
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0
    ptcfs.wait_committed("zero", 1, daemon=daemon.addr, timeout=30)
    for name, want in full.items():
        assert np.array_equal(np.load(os.path.join(sd, "full", name + ".npy")), want), name
        assert np.array_equal(np.load(os.path.join(sd, "tp0-pp0", name + ".npy")), want), name


def test_a_range_outside_the_slice_is_refused_before_writing(daemon, tmp_path):
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0,
           "tensors": {"w": {"dtype": "F32", "shape": [4, 4]}}}
    try:
        ptcfs.save_tensor_range(str(tmp_path), ptc, 0, 0, "w", 10, np.zeros(8, dtype=np.float32))
    except ptcfs.Error as e:
        assert "elements [10, 18) lie outside the slice of 16 elements" in str(e)
    else:
        raise AssertionError("no error")
    assert not os.path.exists(tmp_path / "tp0-pp0")
