"""A node that lost its data directory, on an etcd cluster writing through to S3 (docs/OPERATIONS.md "A node
that lost its data directory"), against a real S3 server (SeaweedFS) and real etcd: caught up on a
durable step, it holds again the shards no other node holds, over the step's copy, and the first read of
one (through its mount, a peer's read, a repartition) fetches exactly the copy's rank files holding it;
a copy damaged behind ptcfs's back is never served; a step repartitioned since its copy was written is
restored from the copy at the copy's own layout."""

import errno
import os
import re
import shutil

import pytest

from cluster_util import rank_nodes
from etcd_util import Etcd, EtcdCluster, require_etcd
from ptcfs_harness import Checkpoint, read_all, require_binaries, verify_step
from repartition_util import Oracles
from test_s3_durable import BUCKET, copy_of, durable, tier_flags, tier_server, wait_durable

s3 = pytest.fixture(tier_server, name="s3")

LEASE_S = 2
GPUS = [2, 2, 2]


def this_run(d):
    """The node's log since its last start."""
    return open(d.log_path).read().rsplit("===== start #", 1)[-1]


def fetched(d):
    """Bytes this node fetched from the copy, by its log."""
    log = open(d.log_path).read()
    return sum(int(n) for n in re.findall(r"fetched back evicted blob [0-9a-f]+ \((\d+) bytes", log))


def lose_data_directory(c, i):
    """Node i stops, loses everything under its data directory, and starts again (the same id)."""
    c[i].stop()
    shutil.rmtree(c[i].data)
    os.makedirs(c[i].data)
    c.start(i)


def durable_cluster(root, s3, tmp_path):
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    etcd = Etcd(root)
    return ck, etcd, lambda: EtcdCluster(root, etcd, 3, lease_ttl=LEASE_S, extra_flags=tier_flags(tmp_path, s3))


def import_durable(c, ck):
    c.start(0, 1, 2)
    c[0].cli("import", ck.path, "--job", "gpt", "--step", "1")
    for d in c.nodes:
        wait_durable(d, "gpt", "1")


def test_a_node_that_lost_its_data_directory_holds_its_shards_again_over_the_durable_copy(tmp_path, s3):
    require_binaries()
    require_etcd()
    root = str(tmp_path)
    ck, etcd, cluster = durable_cluster(root, s3, tmp_path)
    mine = sorted(k for k, nodes in rank_nodes(2, 2, 1, GPUS).items() if nodes == [1])
    assert mine == [(0, 1), (1, 1)]  # n1 alone holds pp stage 1
    with etcd, cluster() as c:
        import_durable(c, ck)
        files, _ = copy_of(s3, "ck/gpt/1/")
        lose_data_directory(c, 1)
        c[1].wait_log("held again over its durable copy in S3", 30)
        wait_durable(c[1], "gpt", "1")  # the copy is there: nothing is read to be sent again
        assert "bytes from this node" not in this_run(c[1])
        assert fetched(c[1]) == 0  # nothing read yet

        # A copy damaged behind ptcfs's back is never served; put back, it is.
        client = s3.client()
        key = "ck/gpt/1/tp0-pp1.safetensors"
        bad = bytearray(files["tp0-pp1.safetensors"])
        bad[len(bad) // 2] ^= 0xFF
        client.put_object(Bucket=BUCKET, Key=key, Body=bytes(bad))
        with pytest.raises(OSError) as e:
            read_all(os.path.join(c[1].step_dir("gpt", "1"), "tp0-pp1.safetensors"))
        assert e.value.errno == errno.EIO, e.value
        assert f"s3://{BUCKET}/{key} are not the ones evicted (XXH3-64 differs)" in c[1].log_tail(20000)
        client.put_object(Bucket=BUCKET, Key=key, Body=files["tp0-pp1.safetensors"])

        # A peer's read of n1's shards fetches them on n1; then every view on n1 reads exactly.
        verify_step(c[0], "gpt", "1", ck, full_views=False)
        verify_step(c[1], "gpt", "1", ck, full_views=True)
        assert fetched(c[1]) == sum(len(files[f"tp{t}-pp{p}.safetensors"]) for t, p in mine)
        assert fetched(c[0]) == fetched(c[2]) == 0

        # A repartition reads n1's shards where they now are, and moves the minimum.
        r = c[2].cli_json("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=2,dp=3", "--json")
        assert r["bytes_moved"] == r["bytes_min"], r
        want = Oracles(root, ck, 0)((1, 2, 3))
        for i, node in enumerate(c.nodes):
            verify_step(node, "gpt", "1", want, full_views=(i == 1))
        # Its durable record is the others' (the copy's version), kept through the repartition and a
        # restart: the step stays durable, nothing sent.
        c[1].stop()
        c.start(1)
        wait_durable(c[1], "gpt", "1")
        assert "bytes from this node" not in this_run(c[1])


def test_a_step_repartitioned_since_its_copy_was_written_is_restored_from_the_copy_at_its_own_layout(
        tmp_path, s3):
    """The copy stays at tp=2,pp=2 when the step goes to tp=4,pp=1 (the same tensors: nothing is sent);
    n1, alone holding tp2-pp0 and tp3-pp0, loses its data directory and holds them again over the copy's
    files holding their bytes (tp1 of both pp stages), fetched whole: their checksums are per file."""
    require_binaries()
    require_etcd()
    root = str(tmp_path)
    ck, etcd, cluster = durable_cluster(root, s3, tmp_path)
    mine = sorted(k for k, nodes in rank_nodes(4, 1, 1, GPUS).items() if nodes == [1])
    assert mine == [(2, 0), (3, 0)]
    with etcd, cluster() as c:
        import_durable(c, ck)
        files, manifest = copy_of(s3, "ck/gpt/1/")
        c[0].cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=4,pp=1,dp=1")
        for d in c.nodes:
            wait_durable(d, "gpt", "1")
        assert copy_of(s3, "ck/gpt/1/") == (files, manifest)  # still the tp=2,pp=2 copy
        lose_data_directory(c, 1)
        c[1].wait_log("held again over its durable copy in S3", 30)
        wait_durable(c[1], "gpt", "1")
        want = Oracles(root, ck, 0)((4, 1, 1))
        verify_step(c[1], "gpt", "1", want, full_views=True)
        assert fetched(c[1]) == len(files["tp1-pp0.safetensors"]) + len(files["tp1-pp1.safetensors"])
        verify_step(c[0], "gpt", "1", want, full_views=False)
        assert durable(c[1], "gpt", "1")["state"] == "durable"


def test_a_node_that_lost_its_data_while_s3_was_stopped_holds_its_shards_again_once_s3_answers(tmp_path, s3):
    """The catch-up asks S3 with the fetch-back client (3 tries of 5 s without a byte): n1 serves the step
    within about 20 s, holding none of its shards (reads of them fail, never hang), and tries again every
    15 s; once S3 answers it holds them over the copy, without a restart."""
    require_binaries()
    require_etcd()
    root = str(tmp_path)
    ck, etcd, cluster = durable_cluster(root, s3, tmp_path)
    with etcd, cluster() as c:
        import_durable(c, ck)
        s3.stop()
        try:
            lose_data_directory(c, 1)
            c[1].wait_log("restoring the bytes no other node holds from its durable copy (tried again within 15 s)", 60)
            with pytest.raises(OSError) as e:
                read_all(os.path.join(c[1].step_dir("gpt", "1"), "tp0-pp1.safetensors"))
            assert e.value.errno in (errno.EIO, errno.EHOSTUNREACH), e.value
        finally:
            s3.cont()
        c[1].wait_log("held again over its durable copy in S3", 60)
        wait_durable(c[1], "gpt", "1")
        verify_step(c[1], "gpt", "1", ck, full_views=False)
        assert "bytes from this node" not in this_run(c[1])
