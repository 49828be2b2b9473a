"""A real etcd (Debian's etcd-server) for cluster tests, and daemons that keep their
membership and commits in it: one or three etcd members on loopback ports with their own
data dirs, killed at the end; values read back with Debian's etcdctl."""

import json
import os
import shutil
import signal
import subprocess
import time
from typing import List, Optional

import pytest

from cluster_util import Cluster, write_secret
from ptcfs_harness import Daemon, free_port


def require_etcd() -> None:
    for b in ("etcd", "etcdctl"):
        if not shutil.which(b):
            pytest.fail(f"{b} is missing: deploy/install-deps.sh installs etcd-server and etcd-client", pytrace=False)


class Etcd:
    """`members` etcd processes forming one etcd cluster on loopback."""

    def __init__(self, root: str, members: int = 1, host: str = "127.0.0.1", tls: Optional[str] = None):
        """tls: a folder of deploy/etcd-certs.sh's certificates: clients are served over https
        and must present a certificate of its CA (--client-cert-auth)."""
        require_etcd()
        self.host = host
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.root = os.path.join(root, "etcd")
        self.names = [f"e{i}" for i in range(members)]
        self.client_ports = [free_port() for _ in range(members)]
        self.peer_ports = [free_port() for _ in range(members)]
        self.procs: List[Optional[subprocess.Popen]] = [None] * members
        self.initial = ",".join(f"{n}=http://{host}:{p}" for n, p in zip(self.names, self.peer_ports))

    @property
    def endpoints(self) -> str:
        return ",".join(self.endpoint(i) for i in range(len(self.client_ports)))

    def endpoint(self, i: int) -> str:
        return f"{self.scheme}://{self.host}:{self.client_ports[i]}"

    def start(self, i: Optional[int] = None, wait: bool = True) -> None:
        """Starts member i (default: every member) and, with `wait`, waits until every member is healthy."""
        for k in ([i] if i is not None else range(len(self.names))):
            data = os.path.join(self.root, self.names[k])
            os.makedirs(self.root, exist_ok=True)
            log = open(os.path.join(self.root, f"{self.names[k]}.log"), "ab")
            client = f"{self.scheme}://{self.host}:{self.client_ports[k]}"
            peer = f"http://{self.host}:{self.peer_ports[k]}"
            tls = [] if not self.tls else [
                "--client-cert-auth", "--trusted-ca-file", os.path.join(self.tls, "ca.crt"),
                "--cert-file", os.path.join(self.tls, "server.crt"), "--key-file", os.path.join(self.tls, "server.key")]
            self.procs[k] = subprocess.Popen(
                ["etcd", "--name", self.names[k], "--data-dir", data, "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", self.initial, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500", *tls],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            log.close()
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ctl("endpoint", "health", check=False).returncode == 0:
                return
            time.sleep(0.2)
        pytest.fail("etcd did not become healthy; logs under " + self.root, pytrace=False)

    def kill(self, i: int = 0) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        self.procs[i] = None

    def stop(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)

    def ctl(self, *args, check: bool = True, endpoints: Optional[str] = None) -> subprocess.CompletedProcess:
        live = endpoints or ",".join(f"{self.scheme}://{self.host}:{p}" for k, p in enumerate(self.client_ports)
                                     if self.procs[k] is not None and self.procs[k].poll() is None)
        tls = [] if not self.tls else [f"--{flag}={os.path.join(self.tls, name)}" for flag, name in
                                       (("cacert", "ca.crt"), ("cert", "client.crt"), ("key", "client.key"))]
        r = subprocess.run(["etcdctl", "--endpoints", live or self.endpoints, "--command-timeout", "3s", *tls, *args],
                           capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        if check and r.returncode != 0:
            pytest.fail(f"etcdctl {' '.join(args)} exited {r.returncode}: {r.stderr}", pytrace=False)
        return r

    def get_json(self, key: str) -> Optional[dict]:
        out = self.ctl("get", key, "--print-value-only").stdout.strip()
        return json.loads(out) if out else None

    def keys(self, prefix: str) -> List[str]:
        out = self.ctl("get", prefix, "--prefix", "--keys-only").stdout
        return [line for line in out.splitlines() if line]

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class EtcdCluster(Cluster):
    """Daemons n0, n1, ... that register in `etcd`; start(i) starts one at any time (entering the
    `with` starts none). Stopping, indexing and counters are Cluster's."""

    def __init__(self, root: str, etcd: Etcd, n: int, gpus: int = 2, lease_ttl: int = 2,
                 extra_flags: Optional[List[str]] = None,
                 hosts: Optional[List[str]] = None,
                 endpoints: Optional[List[str]] = None):  # pylint: disable=super-init-not-called
        """hosts: per node, the address it listens on (default 127.0.0.1); endpoints: per node, the
        etcd members it knows (default all)."""
        self.root = root
        self.etcd = etcd
        self.secret = write_secret(root)
        self.nodes = []
        for i in range(n):
            port = free_port()
            host = hosts[i] if hosts else "127.0.0.1"
            self.nodes.append(Daemon(
                os.path.join(root, f"n{i}"), name=f"n{i}", port=port, secret_file=self.secret, listen_host=host,
                flags=["--etcd", endpoints[i] if endpoints else etcd.endpoints, "--node", f"n{i}", "--listen", f"{host}:{port}",
                       "--secret-file", self.secret, "--gpus", str(gpus), "--lease-ttl", str(lease_ttl),
                       "--peer-timeout", "3"],
                extra_flags=extra_flags))

    def start(self, *which: int) -> None:
        for i in which or range(len(self.nodes)):
            self.nodes[i].start()

    def __enter__(self):
        return self


def live_ids(d: Daemon) -> List[str]:
    return [n["id"] for n in d.cli_json("status", "--json")["cluster"]["nodes"]]
