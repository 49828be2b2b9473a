"""etcd over TLS with client certificates (docs/DEPLOY.md "etcd and TLS"): a real etcd started
with --client-cert-auth and certificates made by deploy/etcd-certs.sh (openssl). A daemon with
the cluster CA's client certificate joins and sees the others join through its watch; one
without a certificate, with one from another CA, or trusting another CA is refused with the
reason and leaves nothing in etcd."""

import os
import subprocess

from etcd_util import Etcd, live_ids
from cluster_util import write_secret
from ptcfs_harness import PTCFSD, Daemon, free_port, require_binaries
from repartition_util import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CERTS = os.path.join(REPO, "deploy", "etcd-certs.sh")


def make_certs(folder: str) -> str:
    r = subprocess.run(["bash", CERTS, folder, "127.0.0.1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(folder)) == ["ca.crt", "ca.key", "client.crt", "client.key", "server.crt", "server.key"]
    return folder


def tls_flags(certs: str, ca: bool = True, cert: bool = True) -> list:
    out = [f"--etcd-ca={certs}/ca.crt"] if ca else []
    if cert:
        out += [f"--etcd-cert={certs}/client.crt", f"--etcd-key={certs}/client.key"]
    return out


def etcd_node(root: str, etcd: Etcd, name: str, secret: str, tls: list) -> Daemon:
    port = free_port()
    return Daemon(os.path.join(root, name), name=name, port=port, secret_file=secret,
                  flags=["--etcd", etcd.endpoints, "--node", name, "--listen", f"127.0.0.1:{port}",
                         "--secret-file", secret, "--lease-ttl", "2", *tls])


def refused(root: str, etcd: Etcd, name: str, secret: str, tls: list) -> str:
    """Runs a daemon that must fail to join; the reason it gives, its only line on stderr."""
    d = etcd_node(root, etcd, name, secret, tls)
    r = subprocess.run([PTCFSD, "--data", d.data, "--mount", d.mnt, *d.flags], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1, (tls, r.returncode, r.stderr)
    assert not os.path.ismount(d.mnt)
    # One line: no second error from leaving a cluster it never joined.
    (line,) = r.stderr.splitlines()
    return line.split(" ERROR joining the cluster in etcd: ", 1)[1]


def test_daemons_with_the_clusters_client_certificate_join_etcd_over_tls(tmp_path):
    require_binaries()
    root = str(tmp_path)
    certs = make_certs(os.path.join(root, "certs"))
    secret = write_secret(root)
    with Etcd(root, tls=certs) as etcd:
        assert etcd.endpoints.startswith("https://127.0.0.1:")
        a = etcd_node(root, etcd, "n0", secret, tls_flags(certs))
        b = etcd_node(root, etcd, "n1", secret, tls_flags(certs))
        a.start()
        try:
            assert live_ids(a) == ["n0"]
            b.start()
            try:
                # n0 learns of n1 through its watch, which runs over TLS too.
                wait_for(lambda: live_ids(a) == ["n0", "n1"], 10, lambda: f"n0 sees {live_ids(a)}")
                assert live_ids(b) == ["n0", "n1"]
                assert etcd.get_json("/ptcfs/nodes/n1") == {"id": "n1", "addr": b.addr, "gpus": 1}
            finally:
                b.stop()
            wait_for(lambda: live_ids(a) == ["n0"], 5, lambda: f"n0 sees {live_ids(a)}")
        finally:
            a.stop()


def test_daemons_without_a_certificate_of_etcds_ca_are_refused_with_the_reason(tmp_path):
    require_binaries()
    root = str(tmp_path)
    certs = make_certs(os.path.join(root, "certs"))
    other = make_certs(os.path.join(root, "other"))  # another CA, its own client certificate
    secret = write_secret(root)
    with Etcd(root, tls=certs) as etcd:
        endpoint = etcd.endpoints
        refusal = ("refused this node's TLS connection during the TLS handshake (sslv3 alert bad certificate): "
                   "etcd wants a client certificate (--etcd-cert, --etcd-key) signed by the CA it trusts")
        untrusted = ("presented a certificate this node does not trust (unable to get local issuer certificate): "
                     "it must be signed by the CA of --etcd-ca and name 127.0.0.1")
        # No client certificate: etcd's --client-cert-auth refuses the connection.
        assert refused(root, etcd, "nocert", secret, tls_flags(certs, cert=False)) == (
            f"permission_denied: reading node nocert from etcd: etcd at {endpoint} {refusal}")
        # A client certificate another CA signed: refused the same way.
        assert refused(root, etcd, "otherca", secret, [f"--etcd-ca={certs}/ca.crt", f"--etcd-cert={other}/client.crt",
                                                       f"--etcd-key={other}/client.key"]) == (
            f"permission_denied: reading node otherca from etcd: etcd at {endpoint} {refusal}")
        # Trusting another CA: the daemon does not accept etcd's certificate.
        assert refused(root, etcd, "trustsother", secret, [f"--etcd-ca={other}/ca.crt",
                                                           f"--etcd-cert={certs}/client.crt",
                                                           f"--etcd-key={certs}/client.key"]) == (
            f"permission_denied: reading node trustsother from etcd: etcd at {endpoint} {untrusted}")
        # No TLS flags: the system's CAs do not vouch for etcd's certificate either.
        assert refused(root, etcd, "noflags", secret, []) == (
            f"permission_denied: reading node noflags from etcd: etcd at {endpoint} {untrusted}")
        # Plain HTTP to etcd's TLS port: etcd hangs up.
        plain = endpoint.replace("https://", "http://")
        d = etcd_node(root, etcd, "plain", secret, [])
        r = subprocess.run([PTCFSD, "--data", d.data, "--mount", d.mnt, *[plain if a == endpoint else a for a in d.flags]],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and f"etcd at {plain} failed during /v3/kv/range: end of stream" in r.stderr, r.stderr
        # None of them registered.
        assert etcd.keys("/ptcfs/nodes/") == []


def test_bad_etcd_tls_flags_are_refused_before_anything_starts(tmp_path):
    require_binaries()
    root = str(tmp_path)
    certs = make_certs(os.path.join(root, "certs"))
    base = [PTCFSD, "--data", os.path.join(root, "d"), "--mount", os.path.join(root, "m"), "--node", "a",
            "--listen", "127.0.0.1:7"]
    https = ["--etcd", "https://127.0.0.1:1"]
    cases = [
        (["--etcd-ca", f"{certs}/ca.crt"], 2,
         "--etcd-ca, --etcd-cert and --etcd-key go with --etcd https://..."),
        (["--etcd", "http://127.0.0.1:1", "--etcd-ca", f"{certs}/ca.crt"], 1,
         "--etcd-ca, --etcd-cert and --etcd-key need https:// etcd endpoints (--etcd http://127.0.0.1:1)"),
        (["--etcd", "https://127.0.0.1:1,http://127.0.0.1:2"], 1,
         "etcd endpoints 'https://127.0.0.1:1,http://127.0.0.1:2' mix http:// and https://"),
        (https + ["--etcd-ca", f"{root}/missing.crt"], 1, f"--etcd-ca {root}/missing.crt: "),
        (https + ["--etcd-cert", f"{certs}/client.crt"], 1, "--etcd-cert and --etcd-key go together"),
        (https + ["--etcd-cert", f"{certs}/client.crt", "--etcd-key", f"{certs}/server.key"], 1,
         f"--etcd-key {certs}/server.key is not the key of --etcd-cert {certs}/client.crt"),
        (https + ["--etcd-cert", f"{certs}/ca.key", "--etcd-key", f"{certs}/client.key"], 1,
         f"--etcd-cert {certs}/ca.key: "),
        (https + tls_flags(certs), 1, "cannot reach etcd at https://127.0.0.1:1"),
    ]
    for flags, rc, want in cases:
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        assert r.returncode == rc and want in r.stderr, (flags, r.returncode, r.stderr)
        assert not os.path.ismount(os.path.join(root, "m"))
