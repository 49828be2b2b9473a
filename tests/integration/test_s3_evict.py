"""The S3 tier's disk budget (ptcfsd --disk-budget-mib, docs/OPERATIONS.md "A disk budget") against a
real S3 server (SeaweedFS, s3_util.py): over the budget, the blobs of durable steps are evicted from the
node's disk, least recently used first, and a read fetches exactly their bytes back from the copy, after
a restart too; a copy damaged behind ptcfs's back is never served, a stopped server fails the read
rather than hanging it, and a step whose copy is not of the version served (repartitioned since) is
never evicted."""

import errno
import os
import subprocess

import pytest

from ptcfs_harness import PTCFSD, Checkpoint, Daemon, read_all, require_binaries, verify_step
from repartition_util import Oracles, wait_for
from test_s3_durable import BUCKET, tier_daemon, tier_server, wait_durable

s3 = pytest.fixture(tier_server, name="s3")

MIB = 1 << 20


def blob_bytes(d):
    """Bytes of the blob files under DATA/blobs (16 hex digits each), as du would count them."""
    folder = os.path.join(d.data, "blobs")
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if len(n) == 16)


def refills(d):
    return open(d.log_path).read().count("fetched back evicted blob")


def evicted_to_budget(d, budget=1 * MIB):
    wait_for(lambda: blob_bytes(d) <= budget, 30, lambda: f"blobs take {blob_bytes(d)} bytes:\n{d.log_tail(3000)}")


def checkpoint(tmp_path, seed=0):
    ck = Checkpoint(str(tmp_path / f"ckpt{seed}"), tp=2, pp=2, layers=4, hidden=256, vocab=1000, seed=seed)
    # Every rank file (an import's blob) is more than the budget of 1 MiB: all are evicted.
    assert all(os.path.getsize(ck.shard_path(t, p)) > 2 * MIB for t in range(2) for p in range(2))
    return ck


def test_blobs_of_a_durable_step_are_evicted_over_the_budget_and_fetched_back_by_reads(tmp_path, s3):
    require_binaries()
    ck = checkpoint(tmp_path)
    with tier_daemon(tmp_path, s3, budget_mib=1) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        evicted_to_budget(d)
        assert "to stay under the disk budget of 1048576 bytes" in d.log_tail(20000)
        assert refills(d) == 0
        st = d.cli_json("ls", "gpt/1", "--json")["durable"]
        assert st["state"] == "durable" and st["bytes_evicted"] == ck.summary["bytes"], st
        assert "MB evicted from this node's disk)" in d.cli("ls", "gpt/1").stdout
        # Every view reads the step's bytes exactly: its evicted blobs come back from S3 first.
        verify_step(d, "gpt", "1", ck, full_views=True)
        assert refills(d) > 0
        # Evicted again (read a moment ago, but the only step), and fetched back after a restart.
        evicted_to_budget(d)
        d.restart()
        before = refills(d)
        verify_step(d, "gpt", "1", ck, full_views=False)
        assert refills(d) > before
        assert not [n for n in os.listdir(os.path.join(d.data, "blobs")) if n.endswith(".refill")]


def test_a_copy_damaged_behind_ptcfs_is_never_served_and_a_stopped_server_fails_the_read(tmp_path, s3):
    require_binaries()
    ck = checkpoint(tmp_path)
    name = "tp0-pp1.safetensors"
    with tier_daemon(tmp_path, s3, budget_mib=1) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        evicted_to_budget(d)
        c = s3.client()
        key = f"ck/gpt/1/{name}"
        good = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        bad = bytearray(good)
        bad[len(bad) // 2] ^= 0xFF  # one byte of tensor data, the size unchanged
        c.put_object(Bucket=BUCKET, Key=key, Body=bytes(bad))
        path = os.path.join(d.step_dir("gpt", "1"), name)
        with pytest.raises(OSError) as e:
            read_all(path)
        assert e.value.errno == errno.EIO, e.value
        log = d.log_tail(20000)
        assert f"s3://{BUCKET}/{key} are not the ones evicted (XXH3-64 differs)" in log, log
        assert not [n for n in os.listdir(os.path.join(d.data, "blobs")) if n.endswith(".refill")]
        # Put back, the object is fetched back and read exactly.
        c.put_object(Bucket=BUCKET, Key=key, Body=good)
        with open(ck.shard_path(0, 1), "rb") as f:
            assert read_all(path) == f.read()
        # A stopped server fails a read of an evicted blob (within three stalls of 5 s), and once it
        # answers again the read succeeds. (Another file: the kernel keeps the pages of the one read.)
        evicted_to_budget(d)
        path = os.path.join(d.step_dir("gpt", "1"), "tp1-pp0.safetensors")
        s3.stop()
        try:
            with pytest.raises(OSError) as e:
                read_all(path)
            assert e.value.errno in (errno.EIO, errno.EHOSTUNREACH), e.value
        finally:
            s3.cont()
        with open(ck.shard_path(1, 0), "rb") as f:
            assert read_all(path) == f.read()
        # An object deleted behind ptcfs's back fails the read (EIO, the log naming it); put back, it reads.
        evicted_to_budget(d)
        key = "ck/gpt/1/tp1-pp1.safetensors"
        good = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        c.delete_object(Bucket=BUCKET, Key=key)
        path = os.path.join(d.step_dir("gpt", "1"), "tp1-pp1.safetensors")
        with pytest.raises(OSError) as e:
            read_all(path)
        assert e.value.errno == errno.EIO, e.value
        assert f"s3://{BUCKET}/{key}" in d.log_tail(3000).split("fetching back evicted blob")[-1], d.log_tail(3000)
        c.put_object(Bucket=BUCKET, Key=key, Body=good)
        with open(ck.shard_path(1, 1), "rb") as f:
            assert read_all(path) == f.read()


def test_a_step_repartitioned_since_its_copy_is_never_evicted(tmp_path, s3):
    """The copy holds the layout it was written at; the version served now is another one. Only the
    blobs of a step whose copy is of its version go (here the second step's)."""
    require_binaries()
    ck = checkpoint(tmp_path)
    ck2 = checkpoint(tmp_path, seed=1)
    oracles = Oracles(str(tmp_path), ck, 0)
    with tier_daemon(tmp_path, s3, budget_mib=1) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        d.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=2,dp=1")
        d.cli("import", ck2.path, "--job", "gpt", "--step", "2")
        wait_durable(d, "gpt", "2")
        wait_for(lambda: "of gpt/2, read least recently" in d.log_tail(20000), 30, lambda: d.log_tail(3000))
        # Repartitioned at once (before 10 s idle made it evictable): the version served is not the
        # copy's, and its blobs stay on disk whatever the budget.
        log = d.log_tail(20000).split("repartitioned gpt/1")[1]
        assert "of gpt/1, read least recently" not in log, log
        assert blob_bytes(d) >= ck.summary["bytes"]  # gpt/1's blobs all stay
        before = refills(d)
        verify_step(d, "gpt", "1", oracles((1, 2, 1)), full_views=False)
        assert refills(d) == before
        verify_step(d, "gpt", "2", ck2, full_views=False)
        assert refills(d) > before


def test_a_disk_budget_without_the_tier_is_refused_at_start(tmp_path):
    require_binaries()
    d = Daemon(str(tmp_path / "d"))
    r = subprocess.run([PTCFSD, "--data", d.data, "--mount", d.mnt, "--disk-budget-mib", "64"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1, r
    assert "--disk-budget-mib needs --s3-durable" in r.stderr, r.stderr
