"""Records under /ptcfs/ in etcd that ptcfs did not write (etcdctl, a faulty client): every daemon
logs the key and skips the record, keeps serving, and goes on taking part in changes; a change of
a step whose own record is malformed is refused naming the key (daemon/cluster/etcd_record.h)."""

import os

from etcd_util import Etcd, EtcdCluster
from ptcfs_harness import Checkpoint, require_binaries, verify_step
from repartition_util import Oracles, wait_for

# key -> (value written with etcdctl, what every daemon logs about it)
BAD = {
    "/ptcfs/steps/j/2": ('{"tx": 5}', "etcd key /ptcfs/steps/j/2 lacks 'kind'; ignored"),
    "/ptcfs/steps/j/3": ('{"kind": "repartition", "version": 2, "tx": 5}',
                         "etcd key /ptcfs/steps/j/3 field 'tx' must be a string; ignored"),
    "/ptcfs/steps/j/4": ('{"kind": "repartition", "version": "7", "tx": "x"}',
                         "etcd key /ptcfs/steps/j/4 field 'version' must be a non-negative integer; ignored"),
    "/ptcfs/steps/j/5": ('{"kind": "remove", "removed": "yes"}',
                         "etcd key /ptcfs/steps/j/5 field 'removed' must be true or false; ignored"),
    "/ptcfs/steps/j/6": ("[1, 2]", "etcd key /ptcfs/steps/j/6: expected a JSON object; ignored"),
    "/ptcfs/steps/j/7": ("not json", "etcd key /ptcfs/steps/j/7: expected a JSON object; ignored"),
    "/ptcfs/steps/j/8/9": ('{"kind": "remove", "removed": true}', "etcd key /ptcfs/steps/j/8/9: "),
    "/ptcfs/datasets/j/d": ('{"kind": "dataset_progress", "version": 2, "tx": []}',
                            "etcd key /ptcfs/datasets/j/d field 'tx' must be a string; ignored"),
    "/ptcfs/nodes/n9": ('{"id": "n9", "addr": 5}',
                        "etcd key /ptcfs/nodes/n9: etcd record of node n9 field 'addr' must be a string; ignored"),
    "/ptcfs/other": ("{}", "/ptcfs/other is no step or dataset key; ignored"),
}


def test_malformed_records_are_logged_and_skipped_and_every_daemon_keeps_serving(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    oracles = Oracles(root, ck, 0)
    with Etcd(root) as etcd, EtcdCluster(root, etcd, 3, lease_ttl=2) as c:
        c.start()
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        for key, (value, _) in BAD.items():
            etcd.ctl("put", key, value)
        for d in c.nodes:
            for key, (_, logged) in BAD.items():
                d.wait_log(logged, timeout=15)
            assert d.running(), d.log_tail()
        # The watch goes on: a repartition commits everywhere, on the record each node watches.
        r = c[1].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=3", "--json")
        assert r["version"] == 2, r
        for d in c.nodes:
            assert d.cli_json("ls", "j/1", "--json")["version"] == 2
            verify_step(d, "j", "1", oracles((1, 2, 3)), full_views=(d is c.nodes[2]))
        # A node started now reads every record there is, the malformed ones too, and serves.
        c[2].stop(cleanup_mount=False)
        c.start(2)
        for _, logged in BAD.values():
            c[2].wait_log(logged, timeout=15)
        wait_for(lambda: c[2].cli_json("ls", "j/1", "--json")["version"] == 2, 15, "n2 lost version 2")
        # The step's own record made malformed: nodes keep what they serve, and a change of the
        # step is refused naming the key rather than guessing the version.
        etcd.ctl("put", "/ptcfs/steps/j/1", '{"tx": 5}')
        for d in c.nodes:
            d.wait_log("etcd key /ptcfs/steps/j/1 lacks 'kind'; ignored", timeout=15)
        r = c[0].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=2,dp=1", check=False)
        assert r.returncode == 1 and "etcd key /ptcfs/steps/j/1 lacks 'kind'" in r.stderr, r.stderr
        for d in c.nodes:
            assert d.running(), d.log_tail()
            assert d.cli_json("ls", "j/1", "--json")["version"] == 2
            verify_step(d, "j", "1", oracles((1, 2, 3)), full_views=False)
        # Deleting the malformed record unblocks the step: its next change writes a new one.
        etcd.ctl("del", "/ptcfs/steps/j/1")
        r = c[0].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=2,dp=1", "--json")
        assert r["version"] == 3 and etcd.get_json("/ptcfs/steps/j/1")["version"] == 3, r
        for d in c.nodes:
            assert d.cli_json("ls", "j/1", "--json")["version"] == 3
            verify_step(d, "j", "1", ck, full_views=False)
