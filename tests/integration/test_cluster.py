"""Several daemons on loopback as one cluster: per-node imports, every mount showing every shard,
repartitions that move exactly the missing bytes, growing and shrinking, dead nodes."""

import json
import os
import shutil

import pytest

import ptcgen
from cluster_util import Cluster, min_bytes_oracle, per_node_dirs, rank_nodes
from ptcfs_harness import Checkpoint, ls_jobs, require_binaries, verify_step
from repartition_util import Oracles, par_dict, par_str, wait_for


def repartition(c: Cluster, via: int, to, nodes=None, dry_run=False) -> dict:
    args = ["repartition", "--job", "j", "--step", "1", "--to", par_str(to), "--json"]
    if nodes:
        args += ["--nodes", ",".join(nodes)]
    if dry_run:
        args.append("--dry-run")
    return c[via].cli_json(*args)


def moved_exactly_the_minimum(c: Cluster, r: dict, ptc: dict, frm, frm_gpus, to, to_gpus, before: dict) -> None:
    """bytes_moved == bytes_min == the oracle's minimum, per node too, and the daemons' own
    byte counters moved by exactly that much."""
    want = min_bytes_oracle(ptc, frm, frm_gpus, to, to_gpus)
    assert r["bytes_min"] == sum(want.values()), (r, want)
    assert r["bytes_moved"] == r["bytes_min"], r
    got = {int(n["node"][1:]): n["bytes_received"] for n in r["nodes"]}
    for n, b in want.items():
        assert got[n] == b, (n, got, want)
    after = c.counters(c[0])
    sent = sum(after[k][0] - before[k][0] for k in after)
    received = sum(after[k][1] - before[k][1] for k in after)
    assert sent == received == r["bytes_moved"], (before, after, r["bytes_moved"])


def test_per_node_import_shows_every_shard_on_every_mount(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2)
    pattern = per_node_dirs(root, ck, 2, 2, 1, [2, 2, 2])  # n0: stage 0, n1: stage 1, n2: none
    with Cluster(root, 3) as c:
        r = c[1].cli_json("import", pattern, "--job", "j", "--step", "1", "--json")
        assert (r["shards"], r["tensors"], r["bytes"]) == (4, len(ck.ptc["tensors"]), ck.summary["bytes"]), r
        assert {n["node"]: n["shards"] for n in r["nodes"]} == {"n0": 2, "n1": 2, "n2": 0}, r
        before = c.counters(c[0])
        assert all(v == (0, 0) for v in before.values()), before
        for d in c.nodes:
            assert ls_jobs(d) == {"j": ["1"]}
            verify_step(d, "j", "1", ck)  # n2 holds nothing: all of it comes from n0 and n1
        after = c.counters(c[0])
        assert after["n2"][1] > ck.summary["bytes"] and after["n2"][0] == 0, after
        st = c[2].cli_json("status", "--json")
        assert st["bytes_received"] == after["n2"][1] and st["bytes_sent"] == 0, st


def test_an_import_missing_a_nodes_rank_file_imports_nothing_anywhere(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=64, vocab=300)
    pattern = per_node_dirs(root, ck, 2, 2, 1, [2, 2, 2])
    os.remove(os.path.join(root, "ckpt-n1", "tp1-pp1.safetensors"))
    with Cluster(root, 3) as c:
        r = c[0].cli("import", pattern, "--job", "j", "--step", "1", check=False)
        assert r.returncode == 1, r
        assert "node n1" in r.stderr and "tp1-pp1.safetensors: missing rank file" in r.stderr, r.stderr
        for d in c.nodes:
            assert ls_jobs(d) == {}
            assert os.listdir(os.path.join(d.data, "blobs")) == []


# Placements on four nodes of two GPUs each: a chain that grows onto new nodes, re-splits every
# way, shrinks onto two nodes (the others' bytes pulled from them first) and comes back.
CHAIN = [(2, 1, 4), (4, 2, 1), (1, 2, 2), (2, 2, 1)]


def test_repartition_chain_across_four_nodes_moves_exactly_the_missing_bytes(tmp_path):
    require_binaries()
    root = str(tmp_path)
    gpus = [2, 2, 2, 2]
    ck = Checkpoint(os.path.join(root, "ck"), style="llama", tp=2, pp=2, layers=4, hidden=128, vocab=1000)
    oracles = Oracles(root, ck, 0)
    with Cluster(root, 4) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        frm = (2, 2, 1)
        for i, to in enumerate(CHAIN):
            before = c.counters(c[0])
            dry = repartition(c, i % 4, to, dry_run=True)
            r = repartition(c, i % 4, to)
            assert r["version"] == i + 2 and r["from"] == par_dict(frm) and r["to"] == par_dict(to), r
            assert dry["bytes_min"] == r["bytes_min"] and dry["bytes_moved"] == r["bytes_moved"], (dry, r)
            moved_exactly_the_minimum(c, r, ck.ptc, frm, gpus, to, gpus, before)
            want = oracles(to)
            for k, d in enumerate(c.nodes):
                verify_step(d, "j", "1", want, full_views=(k == i % 4))
            frm = to
        # Back where it started: every mount serves the imported files byte for byte.
        for d in c.nodes:
            verify_step(d, "j", "1", ck, full_views=False)


def test_shrinking_pulls_the_leaving_nodes_bytes_then_leaves_them_empty(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=4, pp=1, layers=2, hidden=128, vocab=1000)
    oracles = Oracles(root, ck, 0)
    with Cluster(root, 4, gpus=1) as c:  # one rank per node: tp rank t on node t
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        before = c.counters(c[0])
        r = repartition(c, 0, (2, 1, 1), nodes=["n0", "n1"])
        moved_exactly_the_minimum(c, r, ck.ptc, (4, 1, 1), [1, 1, 1, 1], (2, 1, 1), [1, 1, 0, 0], before)
        after = c.counters(c[0])
        assert after["n2"][0] > before["n2"][0] and after["n3"][0] > before["n3"][0], (before, after)
        for d in c.nodes:
            verify_step(d, "j", "1", oracles((2, 1, 1)), full_views=False)
        # n2 and n3 hold nothing now: their blobs go once the replaced version's short hold for
        # nodes still behind ends (docs/ARCHITECTURE.md, the errno table).
        for d in c.nodes[2:]:
            wait_for(lambda: os.listdir(os.path.join(d.data, "blobs")) == [], 30, f"{d.data}: the old blobs to go")


def test_a_dead_node_is_replaced_by_its_replica(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=1, dp=2, layers=2, hidden=128, vocab=1000)
    oracles = Oracles(root, ck, 0)
    with Cluster(root, 4, gpus=1) as c:  # tp=2, dp=2: n0 tp0, n1 tp1, n2 tp0, n3 tp1
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        c[1].kill9()
        before = c.counters(c[0])
        r = repartition(c, 0, (1, 1, 3), nodes=["n0", "n2", "n3"])
        assert r["version"] == 2, r
        assert {n["node"] for n in r["nodes"]} == {"n0", "n2", "n3"}, r
        after = c.counters(c[0])
        assert after["n3"][0] - before["n3"][0] > 0  # tp1's bytes came from its replica on n3
        assert r["bytes_moved"] == r["bytes_min"], r
        for i in (0, 2, 3):
            verify_step(c[i], "j", "1", oracles((1, 1, 3)), full_views=(i == 0))
        # n1 comes back: it catches up with the version its peers committed, holding none of it.
        c[1].stop(cleanup_mount=True)
        c[1].start()
        wait_for(lambda: c[1].cli_json("ls", "j/1", "--json")["version"] == 2, 30, "n1 to catch up")
        verify_step(c[1], "j", "1", oracles((1, 1, 3)), full_views=False)
        wait_for(lambda: os.listdir(os.path.join(c[1].data, "blobs")) == [], 30, "n1's old blobs to go")


def test_no_live_replica_refuses_the_repartition_and_changes_nothing(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=1, dp=2, layers=2, hidden=64, vocab=300)
    with Cluster(root, 4, gpus=1) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        c[1].kill9()
        c[3].kill9()  # both holders of tp1
        r = c[0].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=2", "--nodes", "n0,n2",
                     check=False)
        assert r.returncode == 1 and "no live node holds" in r.stderr, r.stderr
        r = c[0].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=4", check=False)
        assert r.returncode == 1 and "node n1 is down" in r.stderr, r.stderr
        for i in (0, 2):
            assert c[i].cli_json("ls", "j/1", "--json")["version"] == 1
            got = ptcgen.read_safetensors(os.path.join(c[i].step_dir("j", "1"), "tp0-pp0.safetensors"))
            for name, arr in ck.slices[(0, 0)].items():
                assert (got[name][1] == arr).all(), name


def test_a_file_open_through_one_node_keeps_reading_a_shard_another_holds_after_a_repartition(tmp_path):
    """n2 holds nothing: its open file of tp0-pp0 reads from n0. A repartition replaces the version on
    n0 mid-file; before, n0 dropped the old version at once (nothing of it was open there) and the
    rest of the file failed (ENOENT). Now n0 holds a version its peers read for 60 s after the last
    read, and the file reads to its end, byte for byte."""
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=512, vocab=8000)
    pattern = per_node_dirs(root, ck, 2, 2, 1, [2, 2, 2])  # n0: stage 0, n1: stage 1, n2: none
    with Cluster(root, 3) as c:
        c[1].cli("import", pattern, "--job", "j", "--step", "1")
        with open(os.path.join(ck.path, "tp0-pp0.safetensors"), "rb") as f:
            want = f.read()
        assert len(want) > 4 << 20
        with open(os.path.join(c[2].step_dir("j", "1"), "tp0-pp0.safetensors"), "rb", buffering=0) as f:
            head = f.read(64 << 10)
            c[0].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=3")
            rest = b""
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                rest += b
        assert head + rest == want
        assert c[2].cli_json("ls", "j/1", "--json")["version"] == 2
