"""DCP on a cluster (docs/FORMATS.md "Layouts from chunks"): a folder stock dcp.save wrote at 4
FSDP ranks is imported through one node's mount; a job of 3 ranks, one per node, calls
ptcfs.dcp.prepare and then stock dcp.load, each rank from its own node's mount. The step is
repartitioned to tp 3 with the least bytes moved, shard t on node t (the node of global rank t),
every rank loads bit for bit, and the load pulls nothing from a peer: each rank's chunks are on
its own node. A stock save written through one node's mount commits on the cluster; one whose ranks
write through two nodes' mounts is refused at the rename, naming why, and `ptcfs rm` clears it; one
through ptcfs.dcp.StorageWriter is refused on every rank before a byte is written."""

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

from cluster_util import Cluster  # noqa: E402
from ptcfs_harness import require_binaries  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
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


def test_a_stock_save_from_one_node_of_a_cluster_commits_and_a_save_across_nodes_is_refused(tmp_path):
    require_binaries()
    with Cluster(str(tmp_path / "c"), 3, gpus=1) as c:
        # Both ranks write through n1's mount: the step commits on the cluster, read from n2 too.
        run_plain(tmp_path, 2, "stock_save", os.path.join(c[1].mnt, "j", "1"))
        assert c[0].cli_json("ls", "j/1", "--json")["state"] == "committed"
        ptc = json.load(open(os.path.join(c[2].mnt, "j", "1", "ptc.json")))
        assert ptc["parallelism"]["tp"] == 2 and ptc["tensors"]["w"]["tp_dim"] == 0
        for r in run_plain(tmp_path, 3, "stock_load", os.path.join(c[2].mnt, "j", "1")):
            assert r["differ"] == [], r

        # Rank r writes through n<r>'s mount: n0 holds .metadata but not __1_0.distcp.
        step = os.path.join(str(tmp_path / "c"), "n{rank}", "mnt", "j", "2")
        with pytest.raises(Exception):
            run_plain(tmp_path / "across", 2, "stock_save", step)
        ls = c[0].cli_json("ls", "j/2", "--json")
        assert ls["state"] == "pending", ls
        assert any("not written through this node's mount" in e for e in json.dumps(ls).split('"')), ls
        assert c[1].cli_json("ls", "j/2", "--json")["state"] == "pending"
        for d in (c[0], c[1]):
            d.cli("rm", "j/2")
        for d in c.nodes:
            assert "2" not in d.cli_json("ls", "j", "--json")["steps"]

        # The same through ptcfs.dcp.StorageWriter: refused on every rank before a byte is written
        # (it waited 600 s for a commit no node could make).
        recs = run_plain(tmp_path / "writer", 2, "writer_save", step.replace("/2", "/3"))
        for r in recs:
            assert "the ranks write through 2 mounts (nodes)" in r["error"], r
        for d in (c[0], c[1]):
            ls = d.cli_json("ls", "j/3", "--json")
            assert ls["state"] == "pending" and ls["files"] == 0, ls
