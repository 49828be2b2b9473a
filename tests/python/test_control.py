"""The pure-Python control client against a real daemon (and a fake one for the server's proof)."""

import json
import os
import socket
import struct
import threading

import pytest

import ptcfs
import ptcgen
from ptcfs import control
from ptcfs_daemon import Daemon


def test_proof_matches_the_daemons_known_vector():
    # The vector of tests/transport/auth_test.cc: client proof with Ns = "ab", Nc = "cd".
    assert control.proof(b"0123456789abcdef", "client", "ab", "cd") == \
        "ba73e5ec04926a623e77f455c47415a46276231a8006c800c0a82f5f2ec1db71"


def test_status_ls_import_repartition_and_errors(daemon, tmp_path):
    ck = str(tmp_path / "ck")
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, layers=4, hidden=64, vocab=100)
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 1))
    with daemon.client() as c:
        st = c.status()
        assert st["listen"] == daemon.addr and st["mount"] == daemon.mnt and st["steps"] == 0
        assert c.ls() == {"jobs": []}
        seen = []
        r = c.import_dir(ck, "j", 5, progress=seen.append)
        assert (r["job"], r["step"], r["shards"], r["tensors"], r["bytes"]) == \
               ("j", "5", 4, summary["tensors"], summary["bytes"])
        info = c.ls("j/5")
        assert info["version"] == 1 and info["parallelism"] == {"tp": 2, "pp": 2, "dp": 1}
        assert sorted(s["name"] for s in info["shards"]) == ["tp0-pp0", "tp0-pp1", "tp1-pp0", "tp1-pp1"]
        assert c.ls("j")["steps"] == ["5"]
        dry = c.repartition("j", 5, (1, 2, 2), dry_run=True)
        assert dry["dry_run"] is True and dry["shards"] == 2 and c.ls("j/5")["version"] == 1
        done = c.repartition("j", "5", {"tp": 1, "pp": 2, "dp": 2})
        assert done["unchanged"] is False and c.ls("j/5")["version"] == 2
        assert c.repartition("j", "5", "tp=1,pp=2,dp=2")["unchanged"] is True
        assert c.ls("j/5")["version"] == 2
        # the same as the CLI sees it
        assert daemon.cli_json("ls", "j/5")["version"] == 2
        with pytest.raises(ptcfs.Error) as e:
            c.ls("nojob")
        assert (e.value.code, e.value.message) == ("not_found", "no job 'nojob'")
        with pytest.raises(ptcfs.Error) as e:
            c.call("launch")
        assert e.value.code == "invalid_argument" and "unknown operation 'launch'" in e.value.message
        with pytest.raises(ptcfs.Error) as e:
            c.call("ls", extra=1)
        assert "unknown key 'extra'" in e.value.message
        with pytest.raises(ptcfs.Error) as e:
            c.repartition("j", "5", (3, 1, 1))
        assert e.value.code == "invalid_argument" and "tp=3" in e.value.message
        # the connection stays usable after errors; the generic call reaches every op
        assert c.call("ls", path="j/5")["version"] == 2


def test_datasets(daemon, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(20)))
    with daemon.client() as c:
        st = c.dataset_add("j", "train", "jsonl", seed=3, global_batch=4, files=[str(path)], dp=2)
        assert (st["num_samples"], st["samples_per_epoch"], st["dp"], st["consumed"]) == (20, 20, 2, 0)
        st = c.dataset_progress("j", "train", consumed=8)
        assert st["consumed"] == 8 and st["epoch"] == 0
        ls = c.dataset_ls("j")["datasets"]
        assert [(d["name"], d["consumed"]) for d in ls] == [("train", 8)]
        with pytest.raises(ptcfs.Error) as e:
            c.dataset_add("j", "train", "jsonl", seed=3, global_batch=4, files=[str(path)], dp=2)
        assert e.value.code == "already_exists"
    with open(os.path.join(daemon.mnt, "j", "data", "train", "state.json")) as f:
        assert json.load(f)["consumed"] == 8


def test_auth_with_a_secret_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("a-secret-of-at-least-16-bytes\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("another-secret-of-16-bytes\n")
    with Daemon(str(tmp_path / "d"), secret_file=str(secret)) as d:
        with ptcfs.Client(d.addr, str(secret)) as c:
            assert c.status()["listen"] == d.addr
        with pytest.raises(ptcfs.Error) as e:
            ptcfs.Client(d.addr, str(wrong))
        assert e.value.code == "permission_denied"
        old = os.environ.pop("PTCFS_SECRET_FILE", None)
        try:
            with pytest.raises(ptcfs.Error) as e:
                ptcfs.Client(d.addr)
            assert e.value.code == "permission_denied" and "requires the cluster secret" in e.value.message
            os.environ["PTCFS_SECRET_FILE"] = str(secret)  # the environment's secret file
            os.environ["PTCFS_DAEMON"] = d.addr             # and daemon address
            with ptcfs.Client() as c:
                assert c.ls() == {"jobs": []}
        finally:
            os.environ.pop("PTCFS_SECRET_FILE", None)
            os.environ.pop("PTCFS_DAEMON", None)
            if old is not None:
                os.environ["PTCFS_SECRET_FILE"] = old


def fake_daemon(server_proof):
    """A listener that says hello with a nonce and answers any auth with `server_proof(nc, ns)`."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn:
            ns = "ab" * 32
            body = json.dumps({"auth": "hmac-sha256", "nonce": ns}).encode()
            conn.sendall(control.HEADER.pack(b"PTCF", 1, control.HELLO, len(body), 0) + body)
            head = conn.recv(16)
            _, _, _, n, _ = control.HEADER.unpack(head)
            req = json.loads(conn.recv(n))
            body = json.dumps({"proof": server_proof(req["nonce"], ns)}).encode()
            conn.sendall(control.HEADER.pack(b"PTCF", 1, control.AUTH_OK, len(body), 0) + body)
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


def test_client_checks_the_daemons_proof(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"0123456789abcdef0123")
    addr, srv = fake_daemon(lambda nc, ns: control.proof(b"not-the-secret-at-all", "server", nc, ns))
    with srv, pytest.raises(ptcfs.Error) as e:
        ptcfs.Client(addr, str(secret))
    assert e.value.code == "permission_denied" and "does not hold the cluster secret" in e.value.message
    addr, srv = fake_daemon(lambda nc, ns: control.proof(b"0123456789abcdef0123", "server", nc, ns))
    with srv:
        ptcfs.Client(addr, str(secret)).close()  # the right proof is accepted


def test_unreachable_daemon_and_short_secret(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.Client(f"127.0.0.1:{port}")
    assert e.value.code == "unavailable" and f"127.0.0.1:{port}" in e.value.message
    short = tmp_path / "s"
    short.write_text("short\n")
    with pytest.raises(ptcfs.Error, match="at least 16 bytes"):
        control.read_secret(str(short))
