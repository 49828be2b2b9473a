"""A daemon with a cluster secret serves only clients that prove they hold it (transport/auth.h)."""

import json
import os
import socket
import subprocess

import pytest

from ptcfs_harness import PTCFS, PTCFSD, Daemon, free_port, require_binaries
from test_control_protocol import frame, read_frame

SECRET = "correct horse battery staple 42\n"


@pytest.fixture
def secret_daemon(tmp_path):
    require_binaries()
    path = tmp_path / "secret"
    path.write_text(SECRET)
    os.chmod(path, 0o600)
    # Listening on every interface is allowed with a secret (and refused without one).
    d = Daemon(str(tmp_path / "d"), secret_file=str(path), listen_host="0.0.0.0")
    try:
        d.start()
        yield d
    finally:
        d.stop(cleanup_mount=True)


def ptcfs(addr, *args, env_secret=None):
    env = dict(os.environ)
    env.pop("PTCFS_SECRET_FILE", None)
    if env_secret:
        env["PTCFS_SECRET_FILE"] = env_secret
    return subprocess.run([PTCFS, "--daemon", addr, *args], capture_output=True, text=True, timeout=30, env=env)


def test_the_secret_opens_the_daemon(secret_daemon, make_ckpt):
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=300)
    secret_daemon.cli("import", ck.path, "--job", "j", "--step", "1")  # cli() passes --secret-file
    r = ptcfs(secret_daemon.addr, "ls", "--json", env_secret=secret_daemon.secret_file)  # or the environment
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"jobs": [{"job": "j", "steps": ["1"], "datasets": [], "pending": []}]}


def test_a_client_without_the_secret_is_refused(secret_daemon):
    r = ptcfs(secret_daemon.addr, "status")
    assert r.returncode == 1
    assert "requires the cluster secret" in r.stderr and "--secret-file" in r.stderr, r.stderr


def test_a_wrong_secret_is_refused_and_the_daemon_keeps_serving(secret_daemon, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("not the right secret at all\n")
    r = ptcfs(secret_daemon.addr, "--secret-file", str(wrong), "status")
    assert r.returncode == 1
    assert "ptcfs: error: authentication failed" in r.stderr, r.stderr
    assert secret_daemon.cli_json("status", "--json")["listen"] == secret_daemon.listen
    assert "authentication failed: wrong proof" in secret_daemon.log_tail()


def test_a_short_secret_file_is_refused_by_the_client(secret_daemon, tmp_path):
    short = tmp_path / "short"
    short.write_text("tooshort\n")
    r = ptcfs(secret_daemon.addr, "--secret-file", str(short), "status")
    assert r.returncode == 1 and "at least 16 bytes" in r.stderr, r.stderr


def test_a_raw_request_before_authenticating_is_refused(secret_daemon):
    with socket.create_connection(("127.0.0.1", secret_daemon.port), timeout=10) as s:
        _, _, ftype, _, hello = read_frame(s)
        assert ftype == 4 and hello["auth"] == "hmac-sha256" and len(hello["nonce"]) == 64
        s.sendall(frame(json.dumps({"op": "status"}).encode()))
        _, _, ftype, _, body = read_frame(s)
        assert ftype == 2 and body["ok"] is False and body["error"]["code"] == "permission_denied", body
        assert s.recv(1) == b""  # closed
    # A replayed proof for another nonce fails too: each connection gets a fresh nonce.
    with socket.create_connection(("127.0.0.1", secret_daemon.port), timeout=10) as s1, \
            socket.create_connection(("127.0.0.1", secret_daemon.port), timeout=10) as s2:
        assert read_frame(s1)[4]["nonce"] != read_frame(s2)[4]["nonce"]


def test_without_a_secret_only_loopback_is_allowed(tmp_path):
    require_binaries()
    port = free_port()
    r = subprocess.run([PTCFSD, "--data", str(tmp_path / "data"), "--mount", str(tmp_path / "mnt"),
                        "--listen", f"0.0.0.0:{port}"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "listens on loopback only" in r.stderr, r.stderr
