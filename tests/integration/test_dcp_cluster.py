"""DCP on a cluster (docs/FORMATS.md "Layouts from chunks"): a folder stock dcp.save wrote at 4
FSDP ranks is imported through one node's mount; a job of 3 ranks, one per node, calls
ptcfs.dcp.prepare and then stock dcp.load, each rank from its own node's mount. The step is
repartitioned to tp 3 with the least bytes moved, shard t on node t (the node of global rank t),
every rank loads bit for bit, and the load pulls nothing from a peer: each rank's chunks are on
its own node. A stock save written through one node's mount commits on the cluster, and so does one
whose ranks write through three nodes' mounts, each shard held where its rank wrote it, and so does
one through ptcfs.dcp.StorageWriter across nodes (written as stock files)."""

import errno
import json
import os
import shutil
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

from cluster_util import Cluster  # noqa: E402
from ptcfs_harness import require_binaries  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))  # dcp_worker, test_dcp
import dcp_worker  # noqa: E402


def run_plain(tmp_path, world, mode, step):
    out = tmp_path / f"plain-{mode}-{world}"
    out.mkdir(parents=True)
    mp.spawn(dcp_worker.run_plain, args=(world, str(out / "init"), mode, step, str(out)), nprocs=world, join=True)
    return [json.load(open(out / f"r{r}.json")) for r in range(world)]


def test_prepare_on_a_cluster_puts_each_ranks_chunks_on_its_node_and_the_load_reads_locally(tmp_path, monkeypatch):
    require_binaries()
    src = str(tmp_path / "saved")
    run_plain(tmp_path, 4, "stock_save", src)  # a plain folder, as a job without ptcfs writes it
    with Cluster(str(tmp_path / "c"), 3, gpus=1) as c:
        c[0].cli("import", src, "--format", "dcp", "--job", "j", "--step", "1")
        tensors = json.load(open(os.path.join(c[2].mnt, "j", "1", "ptc.json")))["tensors"]
        assert (tensors["w"]["tp_dim"], tensors["w"]["pad_to"]) == (0, 1)  # recorded from the chunks

        monkeypatch.setenv("PTCFS_DAEMON", c[0].addr)  # rank 0's node
        monkeypatch.setenv("PTCFS_SECRET_FILE", c.secret)
        before = c.counters(c[0])
        # Rank r reads node r's mount: the workers' step path names their own node.
        step = os.path.join(str(tmp_path / "c"), "n{rank}", "mnt", "j", "1")
        assert os.path.isdir(step.replace("{rank}", "2"))
        recs = run_plain(tmp_path, 3, "prepare_load", step)
        res = recs[0]["prepare"]
        assert res["to"] == {"tp": 3, "pp": 1, "dp": 1}, res
        assert res["chunks"]["exact"] == res["chunks"]["tensors"] == 5, res["chunks"]
        assert res["bytes_moved"] == res["bytes_min"] > 0, res
        ls = c[0].cli_json("ls", "j/1", "--json")
        assert ls["parallelism"] == {"tp": 3, "pp": 1, "dp": 1}
        for r in recs:
            assert r["differ"] == [], r
        after = c.counters(c[0])
        # What the nodes received is the repartition's pulls, and nothing more: every rank's
        # load read its own node's shard.
        received = sum(after[k][1] - before[k][1] for k in after)
        assert received == res["bytes_moved"], (before, after, res["bytes_moved"])


def test_a_stock_save_from_one_node_of_a_cluster_commits_and_reads_everywhere(tmp_path):
    require_binaries()
    with Cluster(str(tmp_path / "c"), 3, gpus=1) as c:
        # Both ranks write through n1's mount: the step commits on the cluster, read from n2 too.
        run_plain(tmp_path, 2, "stock_save", os.path.join(c[1].mnt, "j", "1"))
        assert c[0].cli_json("ls", "j/1", "--json")["state"] == "committed"
        ptc = json.load(open(os.path.join(c[2].mnt, "j", "1", "ptc.json")))
        assert ptc["parallelism"]["tp"] == 2 and ptc["tensors"]["w"]["tp_dim"] == 0
        for r in run_plain(tmp_path, 3, "stock_load", os.path.join(c[2].mnt, "j", "1")):
            assert r["differ"] == [], r


def test_a_stock_save_whose_ranks_write_through_three_nodes_mounts_keeps_each_shard_where_it_was_written(
        tmp_path, monkeypatch):
    """Rank r writes through node r's mount; n0 gets the .metadata. Each node converts the shard
    its rank wrote (reading the replicated tensors, which one rank wrote, from that rank's node),
    and the step commits on every node before any rank's dcp.save returns: a load right after,
    each rank from its own node's mount, or 2 ranks from one, is bit for bit what was saved."""
    require_binaries()
    monkeypatch.setenv("DCP_WORKER_ROWS", "64")  # shards of about 300 KB
    root = tmp_path / "c"
    with Cluster(str(root), 3, gpus=1) as c:
        before = c.counters(c[0])
        step = os.path.join(str(root), "n{rank}", "mnt", "j", "2")
        run_plain(tmp_path / "across", 3, "stock_save", step)
        after = c.counters(c[0])
        infos = [d.cli_json("ls", "j/2", "--json") for d in c.nodes]
        for info in infos:
            assert info["state"] == "committed" and info["parallelism"] == {"tp": 3, "pp": 1, "dp": 1}, info
        shard_bytes = {x["name"]: x["bytes"] for x in infos[0]["shards"]}
        for k, info in enumerate(infos):  # node k holds the shard its rank wrote, and nothing else
            assert info["bytes"] == shard_bytes[f"tp{k}-pp0"], (k, info)
        # What crossed the network: the .metadata, the replicated tensors and the headers of the
        # records the others wrote, not the shards (gathering on n0 would move those of n1 and n2).
        received = sum(after[k][1] - before[k][1] for k in after)
        assert 0 < received < shard_bytes["tp1-pp0"] // 4, (received, shard_bytes)
        for r in run_plain(tmp_path / "own", 3, "stock_load", step):
            assert r["differ"] == [], r
        for r in run_plain(tmp_path / "two", 2, "stock_load", os.path.join(c[2].mnt, "j", "2")):
            assert r["differ"] == [], r
        # dcp.async_save, the same way (its background write ends with the same rename).
        step4 = os.path.join(str(root), "n{rank}", "mnt", "j", "4")
        run_plain(tmp_path / "async", 3, "stock_async_save", step4)
        for k, d in enumerate(c.nodes):
            assert d.cli_json("ls", "j/4", "--json")["bytes"] == shard_bytes[f"tp{k}-pp0"]
        for r in run_plain(tmp_path / "async-load", 3, "stock_load", step4):
            assert r["differ"] == [], r

        # The same through ptcfs.dcp.StorageWriter: its ranks see two mounts at the global plan and
        # write torch's own files, converted the same way (it used to refuse them).
        step3 = os.path.join(str(root), "n{rank}", "mnt", "j", "3")
        for r in run_plain(tmp_path / "writer", 2, "writer_save", step3):
            assert "error" not in r, r
        for k, d in enumerate((c[0], c[1])):
            info = d.cli_json("ls", "j/3", "--json")
            assert info["state"] == "committed" and info["parallelism"]["tp"] == 2, info
            assert info["bytes"] == {x["name"]: x["bytes"] for x in info["shards"]}[f"tp{k}-pp0"], info
        for r in run_plain(tmp_path / "writer-load", 3, "stock_load", os.path.join(c[2].mnt, "j", "3")):
            assert r["differ"] == [], r


def test_a_save_across_nodes_missing_a_file_or_a_node_fails_the_rename_naming_it(tmp_path):
    """The files of a 3-rank stock save placed as its ranks would write them through three nodes'
    mounts, then the .metadata renamed on n0: with rank 2's file nowhere, the rename fails naming
    it; with n2 stopped, it fails naming n2. n1, which sealed its file for the conversion, says the
    same on its part. Nothing is committed, and `ptcfs rm` clears the parts."""
    require_binaries()
    src = tmp_path / "saved"
    run_plain(tmp_path, 3, "stock_save", str(src))
    with Cluster(str(tmp_path / "c"), 3, gpus=1) as c:
        def place(step, ranks):
            for r in ranks:
                sd = c[r].step_dir("j", step)
                os.makedirs(sd, exist_ok=True)
                shutil.copyfile(src / f"__{r}_0.distcp", os.path.join(sd, f"__{r}_0.distcp"))
            sd = c[0].step_dir("j", step)
            shutil.copyfile(src / ".metadata", os.path.join(sd, ".metadata.tmp"))
            return sd

        sd = place("1", [0, 1])
        with pytest.raises(OSError) as e:
            os.rename(os.path.join(sd, ".metadata.tmp"), os.path.join(sd, ".metadata"))
        assert e.value.errno == errno.EINVAL, e.value
        ls = c[0].cli_json("ls", "j/1", "--json")
        assert ls["state"] == "pending", ls
        assert "lies in __2_0.distcp, which was not written through any live node's mount" in json.dumps(ls), ls
        # n1 sealed its file for the conversion: its part fails too, saying why, instead of waiting.
        ls = c[1].cli_json("ls", "j/1", "--json")
        assert ls["state"] == "pending" and "the save failed on node n0" in json.dumps(ls), ls

        sd = place("2", [0, 1, 2])
        c[2].stop(cleanup_mount=False)
        with pytest.raises(OSError):
            os.rename(os.path.join(sd, ".metadata.tmp"), os.path.join(sd, ".metadata"))
        ls = c[0].cli_json("ls", "j/2", "--json")
        assert ls["state"] == "pending" and "asking node n2 for its files of j/2" in json.dumps(ls), ls
        ls = c[1].cli_json("ls", "j/2", "--json")
        assert ls["state"] == "pending" and "asking node n2 for its files of j/2" in json.dumps(ls), ls
        for step in ("1", "2"):
            for d in (c[0], c[1]):
                d.cli("rm", f"j/{step}")
            for d in (c[0], c[1]):
                assert step not in d.cli_json("ls", "j", "--json")["steps"]


def test_a_2d_mesh_saved_across_four_nodes_loads_bit_for_bit_at_1_2_3_4_and_8_ranks(tmp_path):
    """dcp_worker's state (a 2-D mesh dp_shard=2 x tp=2 of DTensors, a nested optimizer state, bytes
    items and an RNG state) saved by 4 ranks, each through its own node's mount: each shard is held on
    exactly one node, and stock dcp.load returns every tensor and bytes item bit for bit at 1, 2, 3
    and 8 ranks and other placements, before and after a repartition, each rank from its own mount."""
    from test_dcp import run as run_mesh  # tests/python, on the path above
    require_binaries()
    root = tmp_path / "c"
    with Cluster(str(root), 4, gpus=1) as c:
        own = os.path.join(str(root), "n{rank}", "mnt", "llama", "300")
        run_mesh(tmp_path, 4, "stock_save", own, "mesh2x2")
        infos = [d.cli_json("ls", "llama/300", "--json") for d in c.nodes]
        total = sum(x["bytes"] for x in infos[0]["shards"])
        for info in infos:
            assert info["state"] == "committed" and sum(x["bytes"] for x in info["shards"]) == total, info
        assert sum(info["bytes"] for info in infos) == total  # every shard on exactly one node

        n2 = os.path.join(c[2].mnt, "llama", "300")
        (tmp_path / "before").mkdir()
        (tmp_path / "after").mkdir()
        for world, layout, step in ((1, "plain", n2), (3, "shard1", n2), (2, "shard0", own), (8, "shard0", n2)):
            for rec in run_mesh(tmp_path / "before", world, "stock_load", step, layout):
                assert rec["differ"] == [], (world, layout, rec)
        c[0].cli("repartition", "--job", "llama", "--step", "300", "--to", "tp=2,pp=1,dp=2")
        for world, layout in ((4, "mesh2x2"), (3, "shard0")):
            for rec in run_mesh(tmp_path / "after", world, "stock_load", own, layout):
                assert rec["differ"] == [], ("after repartition", world, layout, rec)
