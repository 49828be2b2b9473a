"""Nodes that change under a cluster on etcd. A node cut off by a network partition (its own
network namespace, its link taken down) while the others commit, then joined again: it fences
itself instead of changing anything, the others go on without it, and when it is back it
catches up from the record in etcd and serves the committed layout byte for byte. A node that
comes back with another GPU count: the committed placement keeps the counts it was made with.
A node joining in the middle of a repartition: it ends at the committed version."""

import json
import os
import subprocess

from cluster_util import min_bytes_oracle
from etcd_util import Etcd, EtcdCluster, live_ids
from netns_util import NetNs
from ptcfs_harness import PTCFS, Checkpoint, require_binaries, verify_step
from repartition_util import Oracles, wait_for

LEASE_S = 2


def version(d, job="j", step="1"):
    return d.cli_json("ls", f"{job}/{step}", "--json")["version"]


def test_a_partitioned_node_fences_itself_and_catches_up_when_it_is_back(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    oracles = Oracles(root, ck, 0)
    with NetNs() as ns, Etcd(root, host=ns.host_addr) as etcd, \
            EtcdCluster(root, etcd, 3, lease_ttl=LEASE_S, hosts=[ns.host_addr, ns.host_addr, ns.ns_addr]) as c:
        c[2].wrap = ns.wrap  # n2 lives in the namespace; its CLI calls too
        c.start()
        wait_for(lambda: live_ids(c[0]) == ["n0", "n1", "n2"], 15, lambda: f"live: {live_ids(c[0])}")
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        wait_for(lambda: version(c[2]) == 1, 10, "n2 did not get the import")

        ns.partition()
        # The others see its lease end; it cannot renew it and stops taking part in changes.
        wait_for(lambda: live_ids(c[0]) == ["n0", "n1"], 15, lambda: f"live: {live_ids(c[0])}")
        c[2].wait_log("takes part in no cluster change until etcd answers (fenced)", timeout=15)
        r = c[2].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=3", check=False)
        assert r.returncode != 0 and "n2 cannot reach etcd" in r.stderr, r
        assert version(c[2]) == 1
        # The others commit without it (it held no shard of the old layout).
        r = c[0].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=2", "--json")
        want = min_bytes_oracle(ck.ptc, (2, 2, 1), [2, 2, 2], (2, 1, 2), [2, 2])
        assert r["version"] == 2 and r["bytes_moved"] == r["bytes_min"] == sum(want.values()), r
        assert etcd.get_json("/ptcfs/steps/j/1")["nodes"] == ["n0", "n1"]
        assert version(c[2]) == 1  # it heard nothing
        for k in (0, 1):
            verify_step(c[k], "j", "1", oracles((2, 1, 2)), full_views=(k == 0))

        ns.heal()
        # It registers again, reads the record it missed and serves version 2 from its peers.
        wait_for(lambda: live_ids(c[0]) == ["n0", "n1", "n2"], 20, lambda: f"live: {live_ids(c[0])}")
        wait_for(lambda: version(c[2]) == 2, 20, "n2 did not catch up after the partition")
        c[2].wait_log("etcd answers again; it takes part in cluster changes again")
        verify_step(c[2], "j", "1", oracles((2, 1, 2)), full_views=True)
        # ... and takes ranks again.
        r = c[2].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=3", "--json")
        assert r["version"] == 3 and r["bytes_moved"] == r["bytes_min"], r
        for d in c.nodes:
            assert version(d) == 3
            verify_step(d, "j", "1", oracles((1, 2, 3)), full_views=False)


def test_a_node_back_with_another_gpu_count_does_not_move_the_committed_placement(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    oracles = Oracles(root, ck, 0)
    with Etcd(root) as etcd, EtcdCluster(root, etcd, 3, lease_ttl=LEASE_S) as c:
        c.start()
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        rec = etcd.get_json("/ptcfs/steps/j/1")
        assert (rec["nodes"], rec["gpus"]) == (["n0", "n1", "n2"], [2, 2, 2]), rec
        # Ranks 0-1 are on n0, 2-3 on n1. With 4 GPUs n0 would take all four if the placement
        # followed today's counts, and reads of stage 1 would go to a node without it.
        c[0].stop()
        c[0].flags[c[0].flags.index("--gpus") + 1] = "4"
        c[0].start()
        wait_for(lambda: [n["gpus"] for n in c[1].cli_json("status", "--json")["cluster"]["nodes"]] == [4, 2, 2], 15,
                 "n1 did not see n0's 4 GPUs")
        for d in c.nodes:
            verify_step(d, "j", "1", ck, full_views=(d is c.nodes[2]))
        # The next placement uses the counts of now, and pins them.
        r = c[2].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=3", "--json")
        want = min_bytes_oracle(ck.ptc, (2, 2, 1), [2, 2, 2], (1, 2, 3), [4, 2, 2])
        assert r["version"] == 2 and r["bytes_moved"] == r["bytes_min"] == sum(want.values()), r
        rec = etcd.get_json("/ptcfs/steps/j/1")
        assert (rec["nodes"], rec["gpus"]) == (["n0", "n1", "n2"], [4, 2, 2]), rec
        for d in c.nodes:
            verify_step(d, "j", "1", oracles((1, 2, 3)), full_views=(d is c.nodes[1]))
        # A restart of a node reads its pinned placement back from its metadata.
        c[1].stop()
        c[1].start()
        for d in c.nodes:
            verify_step(d, "j", "1", oracles((1, 2, 3)), full_views=False)


def test_a_node_joining_during_a_repartition_ends_at_the_committed_version(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    oracles = Oracles(root, ck, 0)
    with Etcd(root) as etcd, EtcdCluster(root, etcd, 4, lease_ttl=LEASE_S) as c:
        c.start(0, 1, 2)
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        c[0].stop(cleanup_mount=False)
        c[0].env = {"PTCFS_FAILPOINT": "coordinator.prepared:4"}  # every node prepared; 4 s before the decision
        c[0].start()
        cli = subprocess.Popen([PTCFS, "--daemon", c[0].addr, "--secret-file", c.secret, "repartition", "--job", "j",
                                "--step", "1", "--to", "tp=1,pp=2,dp=3", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c[0].wait_log("failpoint coordinator.prepared reached")
        c.start(3)  # joins between the prepare and the decision: it takes no part in this change
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0, err
        r = json.loads(out)
        assert r["version"] == 2 and r["bytes_moved"] == r["bytes_min"], r
        assert etcd.get_json("/ptcfs/steps/j/1")["nodes"] == ["n0", "n1", "n2"]
        wait_for(lambda: version(c[3]) == 2, 15, "n3 did not reach the committed version")
        verify_step(c[3], "j", "1", oracles((1, 2, 3)), full_views=True)
        # The next change places ranks on it.
        r = c[3].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=2,dp=2", "--json")
        assert r["version"] == 3 and r["bytes_moved"] == r["bytes_min"], r
        assert etcd.get_json("/ptcfs/steps/j/1")["nodes"] == ["n0", "n1", "n2", "n3"]
        for d in c.nodes:
            verify_step(d, "j", "1", oracles((2, 2, 2)), full_views=False)
