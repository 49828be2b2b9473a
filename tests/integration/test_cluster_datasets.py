"""Datasets on a cluster: every node serves every rank's view, pulling sample bytes from the
node that holds the files; progress and dp changes reach every node."""

import os

import ptcds
from cluster_util import Cluster
from dataset_util import check_jsonl_views, state, write_jsonl
from ptcfs_harness import Checkpoint, assert_error, read_all
from repartition_util import wait_for


def test_every_node_serves_every_rank_and_follows_progress_and_repartitions(tmp_path):
    root = str(tmp_path / "c")
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, dp=4, layers=2, hidden=64, vocab=128)
    with Cluster(root, 3, gpus=2) as c:
        c[0].cli("import", ck.path, "--job", "gpt", "--step", "7", "--nodes", "n0,n1")
        src = str(tmp_path / "home" / "train.jsonl")
        os.makedirs(os.path.dirname(src))
        samples = write_jsonl(src, 200, seed=4, final_newline=False)
        p = str(tmp_path / "home" / "tok")
        seqs = [list(range(i, i + (i % 9))) for i in range(64)]
        ptcds.write_megatron(p, seqs, 4)
        r = c[1].cli_json("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 5,
                          "--global-batch", 16, src, "--json")
        assert (r["dp"], r["home"], r["nodes"]) == (4, "n1", 3)
        c[1].cli("dataset", "add", "--job", "gpt", "--name", "tok", "--format", "megatron", "--seed", 6,
                 "--global-batch", 16, p)
        sent_before = c.counters(c[0])["n1"][0]
        for d in c.nodes:
            check_jsonl_views(d, "gpt", "train", samples, 5, 16, 4, 0, 0)
        # The other nodes pulled the sample bytes from n1.
        assert c.counters(c[0])["n1"][0] >= sent_before + 2 * sum(len(s) + 1 for s in samples[:192]) - 1

        # Progress through n2 reaches every node.
        c[2].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32)
        for d in c.nodes:
            assert state(d, "gpt", "train")["consumed"] == 32
            check_jsonl_views(d, "gpt", "train", samples, 5, 16, 4, 0, 32)

        # A repartition to dp=2 re-splits both datasets on every node, in the same commit.
        rep = c[0].cli_json("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2", "--json")
        assert sorted(x["name"] for x in rep["datasets"]) == ["tok", "train"]
        order = ptcds.epoch_order(6, 0, 64)
        for d in c.nodes:
            check_jsonl_views(d, "gpt", "train", samples, 5, 16, 2, 0, 32)
            for rank in range(2):
                code, got, _ = ptcds.read_megatron(os.path.join(d.mnt, "gpt", "data", "tok", f"dp{rank}"))
                assert [g.tolist() for g in got] == [seqs[i] for i in ptcds.rank_samples(order, 16, 2, rank, 0)]

        # dp=3 does not divide 16: refused on every node, nothing changes.
        before = [read_all(os.path.join(d.mnt, "gpt", "data", "train", "state.json")) for d in c.nodes]
        r = c[2].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=3", check=False)
        assert_error(r, "not divisible by dp=3")
        assert [read_all(os.path.join(d.mnt, "gpt", "data", "train", "state.json")) for d in c.nodes] == before

        # A node down during progress catches up when it comes back.
        c[2].stop(cleanup_mount=True)
        c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 48)
        c[2].start()
        wait_for(lambda: state(c[2], "gpt", "train")["consumed"] == 48, 30, "n2 to catch up with the progress")
        check_jsonl_views(c[2], "gpt", "train", samples, 5, 16, 2, 0, 48)


def test_a_cluster_add_with_a_node_down_adds_nothing(tmp_path):
    root = str(tmp_path / "c")
    with Cluster(root, 2) as c:
        src = str(tmp_path / "a.jsonl")
        write_jsonl(src, 40)
        c[1].stop(cleanup_mount=True)
        r = c[0].cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 1,
                     "--global-batch", 8, "--dp", 2, src, check=False)
        assert_error(r, "added on no node")
        assert c[0].cli_json("dataset", "ls", "--json")["datasets"] == []
        blobs = os.path.join(c[0].data, "blobs")
        assert [f for _, _, fs in os.walk(blobs) for f in fs] == []
        c[1].start()
        c[0].cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 1,
                 "--global-batch", 8, "--dp", 2, src)
        assert state(c[1], "gpt", "train")["num_samples"] == 40
