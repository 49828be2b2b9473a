"""A node cut off by a network partition (its own network namespace, its link taken down)
while the others commit, then joined again: it fences itself instead of changing anything,
the others go on without it, and when it is back it catches up from the record in etcd and
serves the committed layout byte for byte."""

import os

from cluster_util import min_bytes_oracle
from etcd_util import Etcd, EtcdCluster, live_ids
from netns_util import NetNs
from ptcfs_harness import Checkpoint, require_binaries, verify_step
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
