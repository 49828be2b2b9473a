"""--cluster/--node: each daemon takes its node's address and the cluster secret from cluster.json."""

import json
import os
import subprocess

import pytest

from ptcfs_harness import PTCFS, PTCFSD, Daemon, free_port, require_binaries


def write_cluster(tmp_path, n=3, secret=True):
    ports = [free_port() for _ in range(n)]
    cluster = {"nodes": [{"id": f"n{i}", "addr": f"127.0.0.1:{p}", "gpus": 2} for i, p in enumerate(ports)]}
    if secret:
        (tmp_path / "secret").write_text("a cluster secret of some length\n")
        cluster["secret_file"] = "secret"  # relative to cluster.json
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    return str(path), ports


def test_three_daemons_join_and_report_the_cluster(tmp_path):
    require_binaries()
    cluster, ports = write_cluster(tmp_path)
    nodes = [Daemon(str(tmp_path / f"n{i}"), name=f"n{i}", port=ports[i], secret_file=str(tmp_path / "secret"),
                    flags=["--cluster", cluster, "--node", f"n{i}"])
             for i in range(3)]
    try:
        for d in nodes:
            d.start()
        for i, d in enumerate(nodes):
            st = d.cli_json("status", "--json")
            assert st["node"] == f"n{i}" and st["listen"] == f"127.0.0.1:{ports[i]}"
            assert st["cluster"] == {"nodes": [{"id": f"n{j}", "addr": f"127.0.0.1:{p}", "gpus": 2, "up": True,
                                                "bytes_sent": 0, "bytes_received": 0}
                                               for j, p in enumerate(ports)],
                                    "membership": {"mode": "static"}}
            assert (st["bytes_sent"], st["bytes_received"]) == (0, 0)
        # A node that is down is reported so.
        nodes[2].stop(cleanup_mount=True)
        down = nodes[0].cli_json("status", "--json")["cluster"]["nodes"][2]
        assert down["up"] is False and "node n2" in down["error"], down
        # The secret comes from cluster.json: a client without it is refused.
        r = subprocess.run([PTCFS, "--daemon", nodes[1].addr, "status"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PTCFS_SECRET_FILE"})
        assert r.returncode == 1 and "requires the cluster secret" in r.stderr, r.stderr
    finally:
        for d in nodes:
            d.stop(cleanup_mount=True)


@pytest.mark.parametrize("args, message", [
    (["--node", "n9"], "not in"),
    (["--node", "n0", "--listen", "127.0.0.1:1"], "differs from node n0's addr"),
    ([], "--cluster and --node go together"),
])
def test_bad_membership_flags_are_refused(tmp_path, args, message):
    require_binaries()
    cluster, _ = write_cluster(tmp_path)
    flags = ["--cluster", cluster, *args] if args else ["--cluster", cluster]
    r = subprocess.run([PTCFSD, "--data", str(tmp_path / "data"), "--mount", str(tmp_path / "mnt"), *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_a_cluster_without_a_secret_stays_on_loopback(tmp_path):
    require_binaries()
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"id": "n0", "addr": f"0.0.0.0:{free_port()}"}]}))
    r = subprocess.run([PTCFSD, "--data", str(tmp_path / "data"), "--mount", str(tmp_path / "mnt"),
                        "--cluster", str(cluster), "--node", "n0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "listens on loopback only" in r.stderr, r.stderr
