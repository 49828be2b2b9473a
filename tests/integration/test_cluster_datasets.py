"""Datasets on a cluster: every node serves every rank's view, pulling sample bytes from the
node that holds the files; progress and dp changes reach every node."""

import os
import signal
import threading

import ptcds
from cluster_util import Cluster
from etcd_util import Etcd, EtcdCluster, require_etcd
from dataset_util import check_jsonl_views, state, write_jsonl
from ptcfs_harness import Checkpoint, assert_error, read_all
from repartition_util import wait_for


def import_and_write(c, tmp_path, **jsonl):
    """Imports a dp=4 step gpt/7 onto n0 and n1; writes 200 JSONL samples for n1 to add."""
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, dp=4, layers=2, hidden=64, vocab=128)
    c[0].cli("import", ck.path, "--job", "gpt", "--step", "7", "--nodes", "n0,n1")
    src = str(tmp_path / "home" / "train.jsonl")
    os.makedirs(os.path.dirname(src))
    return src, write_jsonl(src, 200, **jsonl)


def add_train(c, src):
    """n1 adds the JSONL file `src` as dataset gpt/train (seed 5, global batch 16)."""
    c[1].cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 5,
             "--global-batch", 16, src)


def refused_everywhere(c, asker, message, *repartition):
    """A repartition of gpt/7 asked of `asker` is refused with `message`; no node's dataset changes."""
    before = [read_all(os.path.join(d.mnt, "gpt", "data", "train", "state.json")) for d in c.nodes]
    r = asker.cli("repartition", "--job", "gpt", "--step", "7", *repartition, check=False)
    assert_error(r, message)
    assert [read_all(os.path.join(d.mnt, "gpt", "data", "train", "state.json")) for d in c.nodes] == before


def progress_with_n2_down(c, consumed):
    """Progress through n0 while n2 is down; n2 catches up when it comes back."""
    c[2].stop(cleanup_mount=True)
    c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", consumed)
    c[2].start()
    wait_for(lambda: state(c[2], "gpt", "train")["consumed"] == consumed, 30, "n2 to catch up with the progress")


def test_every_node_serves_every_rank_and_follows_progress_and_repartitions(tmp_path):
    with Cluster(str(tmp_path / "c"), 3, gpus=2) as c:
        src, samples = import_and_write(c, tmp_path, seed=4, final_newline=False)
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
        refused_everywhere(c, c[2], "not divisible by dp=3", "--to", "tp=1,pp=1,dp=3")

        # A node down during progress catches up when it comes back.
        progress_with_n2_down(c, 48)
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


def test_a_new_global_batch_reaches_every_node_in_the_repartitions_commit(tmp_path):
    with Cluster(str(tmp_path / "c"), 3, gpus=2) as c:
        src, samples = import_and_write(c, tmp_path, seed=8)
        add_train(c, src)
        c[2].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32)
        order = ptcds.epoch_order(5, 0, 200)
        # dp 2 with a batch of 24 from sample 32: 7 batches to sample 200, nothing dropped.
        rep = c[2].cli_json("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2",
                            "--global-batch", 24, "--json")
        assert rep["datasets"] == [{"name": "train", "from_dp": 4, "to_dp": 2, "from_global_batch": 16,
                                    "to_global_batch": 24}]
        for d in c.nodes:
            st = state(d, "gpt", "train")
            assert (st["global_batch"], st["dp"], st["consumed"], st["batch_offset"], st["dropped"]) == \
                (24, 2, 32, 32, 0)
            rest = check_jsonl_views(d, "gpt", "train", samples, 5, 24, 2, 0, 32, batch_offset=32)
            assert rest == [samples[i] for i in order[32:200]]
        # A batch dp=2 does not divide is refused on every node, nothing changes.
        refused_everywhere(c, c[0], "global batch 25 is not divisible by dp=2", "--to", "tp=1,pp=1,dp=2",
                           "--global-batch", 25)
        # Progress by one batch of 24 reaches a node that was down, at the new batch.
        progress_with_n2_down(c, 56)
        for d in c.nodes:
            check_jsonl_views(d, "gpt", "train", samples, 5, 24, 2, 0, 56, batch_offset=32)
        # A change of batch while a node is down: it catches up to the new batch and offset.
        c[2].stop(cleanup_mount=True)
        c[0].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2", "--global-batch", 12,
                 "--nodes", "n0,n1")
        c[2].start()
        wait_for(lambda: state(c[2], "gpt", "train")["global_batch"] == 12, 30, "n2 to catch up with the batch")
        for d in c.nodes:
            st = state(d, "gpt", "train")
            assert (st["global_batch"], st["consumed"], st["batch_offset"], st["dropped"]) == (12, 56, 56, 0)
            rest = check_jsonl_views(d, "gpt", "train", samples, 5, 12, 2, 0, 56, batch_offset=56)
            assert rest == [samples[i] for i in order[56:200]]


def test_a_repartition_racing_a_progress_is_refused_and_the_nodes_stay_alike(tmp_path):
    """A progress of the dataset is prepared on both nodes (its coordinator n1 pauses 3 s before
    deciding: failpoint coordinator.prepared) when a repartition with a new global batch comes
    through n1: it is refused, since the dataset is being changed, naming the progress's
    coordinator and transaction; the progress goes through, and both nodes serve the same dataset
    and step. Without the dataset's claim both changes were prepared side by
    side and could commit in different orders on the two nodes, leaving them apart for good."""
    with Cluster(str(tmp_path / "c"), 2, gpus=2) as c:
        src, samples = import_and_write(c, tmp_path, seed=8)
        add_train(c, src)
        c[1].stop(cleanup_mount=True)
        c[1].env["PTCFS_FAILPOINT"] = "coordinator.prepared:3"
        c[1].start()
        got = {}
        progress = threading.Thread(target=lambda: got.update(r=c[1].cli(
            "dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 16, check=False)))
        progress.start()
        wait_for(lambda: "failpoint coordinator.prepared reached" in c[1].log_tail(), 20, "the progress to be prepared")
        r = c[1].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2", "--global-batch", 8,
                     check=False)
        assert_error(r, "dataset gpt/train is already being changed (a progress or a re-split is prepared): it holds "
                        "the change that node n1 coordinates (transaction")
        progress.join(60)
        assert got["r"].returncode == 0, got["r"].stderr
        for d in c.nodes:
            st = state(d, "gpt", "train")
            assert (st["version"], st["global_batch"], st["dp"], st["consumed"]) == (2, 16, 4, 16)
            assert d.cli_json("ls", "gpt/7", "--json")["version"] == 1
            check_jsonl_views(d, "gpt", "train", samples, 5, 16, 4, 0, 16)
        # Asked again, alone, the repartition goes through on both nodes.
        c[1].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2", "--global-batch", 8)
        order = ptcds.epoch_order(5, 0, 200)
        for d in c.nodes:
            st = state(d, "gpt", "train")
            assert (st["version"], st["global_batch"], st["dp"], st["consumed"], st["batch_offset"]) == (3, 8, 2, 16, 16)
            rest = check_jsonl_views(d, "gpt", "train", samples, 5, 8, 2, 0, 16, batch_offset=16)
            assert rest == [samples[i] for i in order[16:200]]


def _frozen_during_a_progress(c, samples):
    """n2 is stopped (SIGSTOP) past the peer timeout while a progress to 32 goes through without
    it, then resumed, not restarted: it must come to the others' version of the dataset, and the
    job's changes must go on."""
    os.kill(c[2].proc.pid, signal.SIGSTOP)
    try:
        c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32)
    finally:
        os.kill(c[2].proc.pid, signal.SIGCONT)
    wait_for(lambda: state(c[2], "gpt", "train")["version"] == 2, 60, "n2 to take the progress it missed")
    for d in c.nodes:
        assert (state(d, "gpt", "train")["version"], state(d, "gpt", "train")["consumed"]) == (2, 32)
        check_jsonl_views(d, "gpt", "train", samples, 5, 16, 4, 0, 32)
    c[1].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 48)
    c[0].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2", "--global-batch", 24)
    for d in c.nodes:
        st = state(d, "gpt", "train")
        assert (st["version"], st["dp"], st["global_batch"], st["consumed"], st["batch_offset"]) == (4, 2, 24, 48, 48)
        assert d.cli_json("ls", "gpt/7", "--json")["parallelism"] == {"tp": 1, "pp": 1, "dp": 2}


def test_a_node_that_missed_a_progress_without_restarting_catches_up_static(tmp_path):
    """Static membership: its periodic catch-up (every 10 s) takes the others' version; before, it
    stayed at version 1 until restarted and refused every later change of the dataset."""
    with Cluster(str(tmp_path / "c"), 3, gpus=2, extra_flags=["--peer-timeout", "2"]) as c:
        src, samples = import_and_write(c, tmp_path, seed=8)
        add_train(c, src)
        _frozen_during_a_progress(c, samples)


def test_a_node_that_missed_a_progress_without_restarting_catches_up_etcd(tmp_path):
    """etcd: the progress's record, read when it resumes, commits the change it prepared late (it
    held it, claim and all, until it expired) or brings it to the others' version."""
    require_etcd()
    with Etcd(str(tmp_path)) as etcd, EtcdCluster(str(tmp_path / "c"), etcd, 3, lease_ttl=8) as c:
        c.start()
        src, samples = import_and_write(c, tmp_path, seed=8)
        add_train(c, src)
        _frozen_during_a_progress(c, samples)


def test_a_node_restarted_after_changes_it_missed_serves_them_from_its_first_read_etcd(tmp_path):
    """Found by the chaos soak (seed 7, 10 minutes): a node back from a restart served the dataset
    position it had, one progress behind, until its catch-up committed the others'. Here each commit
    of n2 after its restart pauses 2 s (a failpoint), so its catch-up is slow: its mount must answer
    only once it serves what etcd records, so its first read shows the new position and split."""
    require_etcd()
    with Etcd(str(tmp_path)) as etcd, EtcdCluster(str(tmp_path / "c"), etcd, 3, lease_ttl=2) as c:
        c.start()
        src, samples = import_and_write(c, tmp_path, seed=8)
        add_train(c, src)
        c[2].stop(cleanup_mount=True)  # a clean stop leaves etcd at once
        c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32)
        c[0].cli("repartition", "--job", "gpt", "--step", "7", "--to", "tp=1,pp=1,dp=2")
        c[2].env = {"PTCFS_FAILPOINT": "commit.before:2"}
        c[2].start()
        first = state(c[2], "gpt", "train")
        assert first == state(c[0], "gpt", "train") and (first["consumed"], first["dp"]) == (32, 2), first
        assert c[2].cli_json("ls", "gpt/7", "--json")["parallelism"] == {"tp": 1, "pp": 1, "dp": 2}
        check_jsonl_views(c[2], "gpt", "train", samples, 5, 16, 2, 0, 32)
        c[2].wait_log("caught up with etcd's records in")


def test_progress_is_refused_while_a_live_node_is_fenced_and_goes_through_once_it_is_back(tmp_path):
    """n2 knows only the etcd member that is killed: it fences itself after half its lease and is
    still live in etcd for the other half. A progress then must not succeed without it (it would
    go on serving the old position: a rank restarted there repeats samples). Before, its refusal
    read as "unreachable" and the progress left it out."""
    require_etcd()
    root = str(tmp_path)
    with Etcd(root, members=3) as etcd:
        others = ",".join(etcd.endpoint(i) for i in (0, 1))
        with EtcdCluster(str(tmp_path / "c"), etcd, 3, lease_ttl=30,
                         endpoints=[others, others, etcd.endpoint(2)]) as c:
            c.start()
            src, samples = import_and_write(c, tmp_path, seed=9)
            c[1].cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 5,
                     "--global-batch", 16, src)
            etcd.kill(2)
            wait_for(lambda: c[2].cli_json("status", "--json")["cluster"]["membership"]["fenced"], 25,
                     "n2 did not fence itself")
            before = [state(d, "gpt", "train") for d in c.nodes]
            r = c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32, check=False)
            assert_error(r, "n2 cannot reach etcd")
            assert [state(d, "gpt", "train") for d in c.nodes] == before
            etcd.start(2)
            wait_for(lambda: not c[2].cli_json("status", "--json")["cluster"]["membership"]["fenced"], 30,
                     "n2 stayed fenced")
            c[0].cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 32)
            for d in c.nodes:
                assert state(d, "gpt", "train")["consumed"] == 32
                check_jsonl_views(d, "gpt", "train", samples, 5, 16, 4, 0, 32)
