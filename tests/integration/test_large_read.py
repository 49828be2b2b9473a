"""Large reads through the mount: 1 MiB sequential reads, 128 KiB preads at odd offsets,
concurrent preads and mmap, all compared with the source bytes."""

import mmap
import os
import random
import threading

import numpy as np
import pytest

import ptcgen
from ptcfs_harness import Checkpoint

MiB = 1 << 20
K128 = 128 << 10


@pytest.fixture(scope="module")
def big(module_daemon, tmp_path_factory):
    d = module_daemon
    # About 36 MB per rank file: 2 layers of hidden 1024 over tp=2.
    ck = Checkpoint(str(tmp_path_factory.mktemp("big") / "ckpt"), style="gpt", tp=2, pp=1, layers=2,
                    hidden=1024, vocab=5000, seed=21)
    d.cli_json("import", ck.path, "--job", "big", "--step", "1", "--json")
    src = open(ck.shard_path(1, 0), "rb").read()
    assert len(src) > 32 * MiB
    return d, ck, os.path.join(d.step_dir("big", "1"), "tp1-pp0.safetensors"), src


def test_sequential_1mib_reads(big):
    d, ck, path, src = big
    assert os.stat(path).st_size == len(src)
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            b = os.read(fd, MiB)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    assert len(data) == len(src)
    assert data == src


def _pread_all(fd, size, off):
    """pread that tolerates short reads, as any careful reader does."""
    out = []
    while size > 0:
        b = os.pread(fd, size, off)
        if not b:
            break
        out.append(b)
        size -= len(b)
        off += len(b)
    return b"".join(out)


def test_pread_128k_odd_offsets(big):
    d, ck, path, src = big
    n = len(src)
    (hlen,) = np.frombuffer(src[:8], "<u8")
    data_start = 8 + int(hlen)
    rng = random.Random(5)
    offsets = [1, 7, 4095, 4097, K128 - 1, K128 + 1, MiB - 3, MiB + 3, data_start - 7, data_start + 1,
               n - K128 - 1, n - K128 + 1, n - 1]
    offsets += [rng.randrange(0, n) | 1 for _ in range(200)]
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in offsets:
            got = _pread_all(fd, K128, off)
            assert got == src[off:off + K128], f"pread(128 KiB, {off})"
        # A whole pass with every read misaligned by 12345 bytes.
        off = 12345
        while off < n:
            assert _pread_all(fd, K128, off) == src[off:off + K128], f"pread(128 KiB, {off})"
            off += K128
        assert _pread_all(fd, K128, 0)[:12345] == src[:12345]
        # At and past the end: nothing.
        assert os.pread(fd, K128, n) == b""
        assert os.pread(fd, K128, n + 12345) == b""
    finally:
        os.close(fd)


def test_concurrent_preads(big):
    d, ck, path, src = big
    n = len(src)
    errors = []
    fd = os.open(path, os.O_RDONLY)

    def worker(seed):
        rng = random.Random(seed)
        try:
            for _ in range(100):
                off = rng.randrange(0, n)
                size = rng.choice([4096, K128, MiB, 3 * MiB + 17])
                if _pread_all(fd, size, off) != src[off:off + size]:
                    errors.append((seed, off, size))
        except Exception as e:  # noqa: BLE001
            errors.append((seed, repr(e)))

    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(fd)
    assert not errors, errors[:5]


def test_mmap_read(big):
    d, ck, path, src = big
    with open(path, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert len(m) == len(src)
            assert m[:] == src


def test_full_view_odd_offsets(big):
    d, ck, path, src = big
    name = "layers.1.mlp.dense_h_to_4h.weight"  # the biggest tensor: 16 MiB
    fpath = os.path.join(d.step_dir("big", "1"), "full", ptcgen.npy_relpath(name))
    want = ck.full[name].tobytes()
    with open(fpath, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0)
        np.lib.format.read_array_header_1_0(f)
        start = f.tell()
    assert os.stat(fpath).st_size == start + len(want)
    rng = random.Random(9)
    fd = os.open(fpath, os.O_RDONLY)
    try:
        for off in [0, 1, 4097, len(want) - K128 - 3] + [rng.randrange(0, len(want)) | 1 for _ in range(100)]:
            assert _pread_all(fd, K128, start + off) == want[off:off + K128], off
        got = []
        off = start
        while True:
            b = os.pread(fd, MiB, off)
            if not b:
                break
            got.append(b)
            off += len(b)
        assert b"".join(got) == want
    finally:
        os.close(fd)
