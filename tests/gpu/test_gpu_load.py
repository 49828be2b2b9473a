"""Loading views of the mount into GPU memory (docs/ARCHITECTURE.md "Path of a GPU load"): every
tensor that lands on the device equals the generator's oracle byte for byte, imported shards go
up as direct copies, strided shards left by a repartition are gathered by the kernel, padding
is zero-filled on the device, and bad destinations are refused. The loads run with each staging
(PTCFS_GPU_STAGE: memcpy from the mappings, pread of the blob files)."""

import ctypes
import os
import random

import numpy as np
import pytest
import torch

import ptcgen
from ptcfs_harness import require_binaries
from repartition_util import Oracles

import ptcfs
from ptcfs import direct


def host_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).cpu().numpy().tobytes()


def check_on_device(path: str, want: dict):
    """Loads `path` into cuda:0 and compares every tensor with the oracle's bytes; returns the
    copy's stats."""
    with direct.open(path, fallback=False) as f:
        got = f.torch(device="cuda:0")
        assert f.gpu_why_not == "", f.gpu_why_not
        assert sorted(got) == sorted(want), path
        for name, arr in want.items():
            t = got[name]
            assert t.device.type == "cuda" and list(t.shape) == list(arr.shape), (path, name, t.shape)
            assert host_bytes(t) == np.ascontiguousarray(arr).tobytes(), (path, name)
        return f.gpu_stats


@pytest.mark.parametrize("stage", ["copy", "pread"])
def test_imported_shards_and_full_views_load_into_gpu_memory(daemon, make_ckpt, monkeypatch, stage):
    require_binaries()
    monkeypatch.setenv("PTCFS_GPU_STAGE", stage)
    ck = make_ckpt(tp=2, pp=2, layers=2, hidden=256, vocab=1000)  # padded vocabulary: zeros
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    sd = daemon.step_dir("j", "1")
    for (t, p), want in ck.slices.items():
        stats = check_on_device(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want)
        assert stats["gathered_chunks"] == 0 and stats["direct_chunks"] >= 1, stats  # whole slices: straight up
    for name, arr in ck.full.items():  # assembled from the slices of several shards
        check_on_device(os.path.join(sd, "full", ptcgen.npy_relpath(name)), {name.split("/")[-1]: arr})
    # load_shard gives device tensors, checked against the PTC.
    got = ptcfs.load_shard(sd, 1, 1, ptc=ck.ptc, device="cuda:0")
    for name, arr in ck.slices[(1, 1)].items():
        assert got[name].is_cuda and host_bytes(got[name]) == np.ascontiguousarray(arr).tobytes(), name


def test_strided_slices_are_gathered_on_the_device(tmp_path, remap_daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=4, pp=1, layers=2, hidden=512, vocab=512)
    oracles = Oracles(str(tmp_path), ck, 0)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    r = remap_daemon.cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=1", "--json")
    assert r["bytes_remapped"] > 0, r
    sd = remap_daemon.step_dir("j", "1")
    gathered = 0
    for (t, p), want in oracles((2, 1, 1)).slices.items():
        stats = check_on_device(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want)
        gathered += stats["gathered_chunks"]
    assert gathered > 0, "no chunk was gathered by the kernel: the strided path went untested"
    # Back to tp=4 from the strided layout, and tp=1: every shard again.
    for to in ((4, 1, 1), (1, 1, 1)):
        remap_daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=%d,pp=%d,dp=%d" % to)
        for (t, p), want in oracles(to).slices.items():
            check_on_device(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want)


@pytest.mark.parametrize("stage", ["copy", "pread"])
def test_random_ranges_of_a_strided_file_match_the_host_read(tmp_path, remap_daemon, make_ckpt, monkeypatch, stage):
    require_binaries()
    monkeypatch.setenv("PTCFS_GPU_STAGE", stage)
    ck = make_ckpt(tp=4, pp=1, layers=2, hidden=512, vocab=512)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    remap_daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=1")
    path = os.path.join(remap_daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    rng = random.Random(7)
    with direct.open(path, fallback=False) as f:
        assert f.direct
        whole = f.read_range(0, f.size)
        buf = torch.full((f.size,), 0xA5, dtype=torch.uint8, device="cuda:0")
        for _ in range(200):
            off = rng.randrange(f.size)
            n = rng.randrange(min(f.size - off, 3 << 20) + 1)
            buf.fill_(0xA5)
            f._read_device(off, n, buf)
            got = buf[:n].cpu().numpy().tobytes()
            assert got == whole[off:off + n], (off, n)
            assert int((buf[n:] != 0xA5).sum()) == 0, "bytes past the range were written"


def test_bad_destinations_and_ranges_are_refused(daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=1, hidden=128, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    lib = direct.library()
    err = ctypes.create_string_buffer(1024)
    with direct.open(path, fallback=False) as f:
        h = f._handle()
        host = ctypes.create_string_buffer(f.size)
        assert lib.ptcfs_read_device(h.ptr, 0, f.size, ctypes.addressof(host), None, None, err, 1024) == -1
        assert err.value.decode().startswith("invalid_argument: the destination is not device memory"), err.value
        dev = torch.empty(f.size + 1, dtype=torch.uint8, device="cuda:0")
        assert lib.ptcfs_read_device(h.ptr, 1, f.size, dev.data_ptr(), None, None, err, 1024) == -1
        assert err.value.decode().startswith("out_of_range:"), err.value


def test_padding_no_blob_holds_is_zero_filled_on_the_device(tmp_path, remap_daemon, make_ckpt):
    """vocab 900 stored at tp=1; at tp=16 the padded vocabulary has rows that no imported file
    holds: the view lists them as zeros, which the upload fills on the device (cudaMemsetAsync)."""
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=256, vocab=900)
    oracles = Oracles(str(tmp_path), ck, 0)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    remap_daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=16,pp=1,dp=1")
    sd = remap_daemon.step_dir("j", "1")
    zero = 0
    for (t, p), want in oracles((16, 1, 1)).slices.items():
        zero += check_on_device(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want)["zero_bytes"]
    assert zero > 0, "no view had a zero span: the device zero fill went untested"
