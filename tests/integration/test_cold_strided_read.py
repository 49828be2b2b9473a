"""A cold read of a shard strided over its blob reads from the disk only the pages it needs.

One BF16 tensor of 8192 x 8192 (128 MB) imported at tp=1 and repartitioned to tp=4 along its last
dimension, left strided (--compact-below 1): each shard is 4 KiB of every 16 KiB blob row. Its blob
is dropped from the page cache (the daemon restarted first, so that no mapping keeps its pages).
Before, a cold read of one 32 MB shard through the mount read the whole 128 MB blob (each fault in
the mapped blob read ahead around its page); now the reply asks for exactly the pages it copies
(daemon/store/read_ahead.h). The bytes the daemon read from the disk come from /proc/PID/io."""

import os

import ptcgen
from ptcfs_harness import read_all


def disk_read_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split(":")[1]) for line in f if line.startswith("read_bytes:"))


def test_a_cold_strided_shard_reads_its_own_pages_only(remap_daemon, tmp_path):
    d = remap_daemon
    n = 8192
    ptc = {"num_layers": 1, "parallelism": {"tp": 1, "pp": 1, "dp": 1},
           "tensors": {"w": {"dtype": "BF16", "shape": [n, n], "tp_dim": 1}}}
    full = ptcgen.full_tensors(ptc, 5)
    src = str(tmp_path / "ck")
    ptcgen.write_checkpoint(src, ptc, full)
    d.cli("import", src, "--job", "j", "--step", "1")
    d.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1,dp=1")
    d.stop(cleanup_mount=False)
    blobs = os.path.join(d.data, "blobs")
    for b in os.listdir(blobs):
        fd = os.open(os.path.join(blobs, b), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    d.start()
    before = disk_read_bytes(d.proc.pid)
    got = read_all(os.path.join(d.step_dir("j", "1"), "tp1-pp0/w.npy"))
    read = disk_read_bytes(d.proc.pid) - before
    want = full["w"][:, n // 4:n // 2]
    assert got[-want.nbytes:] == want.tobytes()
    # The shard's 32 MB (and the odd page of metadata), not the blob's 128 MB.
    assert read < 1.25 * want.nbytes, f"read {read} bytes from the disk for a {want.nbytes}-byte shard"
