"""Faults in a cluster: a daemon killed in the middle of a repartition, and peers that send
what they should not. The old layout stays complete everywhere; daemons keep serving."""

import errno
import hashlib
import hmac
import json
import os
import socket
import subprocess
import threading
import time

import pytest

import ptcgen
from cluster_util import Cluster, min_bytes_oracle
from ptcfs_harness import Checkpoint, PTCFS, require_binaries, verify_step
from repartition_util import Oracles, wait_for
from test_control_protocol import HEADER, frame, read_frame


def blobs(d):
    return set(os.listdir(os.path.join(d.data, "blobs")))


def old_layout_everywhere(c, old_blobs):
    """Every node of c still at version 1 of j/1, with the blobs it had before the change."""
    for i, d in enumerate(c.nodes):
        assert d.cli_json("ls", "j/1", "--json")["version"] == 1
        assert blobs(d) == old_blobs[i], f"n{i} kept blobs of the aborted change"


@pytest.mark.parametrize("victim", ["receiver", "sender"])
def test_a_daemon_killed_during_a_repartition_leaves_the_old_layout_everywhere(tmp_path, victim):
    require_binaries()
    root = str(tmp_path)
    # ~120 MB on n0 (tp=2 on its two GPUs); the new layout puts a replica on n1 and on n2.
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=1, layers=6, hidden=768, vocab=8000)
    oracles = Oracles(root, ck, 0)
    with Cluster(root, 3) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        old_blobs = [blobs(d) for d in c.nodes]
        cmd = [PTCFS, "--daemon", c[1].addr, "--secret-file", c.secret, "repartition", "--job", "j", "--step", "1",
               "--to", "tp=2,pp=1,dp=3", "--json"]
        cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The receivers create their blob for the pulled bytes before the first byte arrives.
        deadline = time.monotonic() + 30
        while not (blobs(c[2]) - old_blobs[2]) and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.001)
        killed = c[2] if victim == "receiver" else c[0]
        killed.kill9()
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 1, (out, err)
        assert "aborted, the old layout stays" in err, err
        killed.stop(cleanup_mount=True)
        killed.start()
        old_layout_everywhere(c, old_blobs)
        for d in c.nodes:
            verify_step(d, "j", "1", ck, full_views=False)
        # And the cluster can still repartition.
        r = c[1].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=3", "--json")
        want = min_bytes_oracle(ck.ptc, (2, 1, 1), [2, 2, 2], (2, 1, 3), [2, 2, 2])
        assert r["version"] == 2 and r["bytes_moved"] == r["bytes_min"] == sum(want.values()), r
        verify_step(c[2], "j", "1", oracles((2, 1, 3)), full_views=False)


def test_a_damaged_transfer_aborts_the_repartition_and_leaves_the_old_layout_everywhere(tmp_path):
    """The sender's replies carry a checksum one off (the peer.read.damage switch): each
    receiver hashes the bytes as they land, refuses them, and the change aborts."""
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ck"), tp=2, pp=1, layers=2, hidden=256, vocab=2000)
    with Cluster(str(tmp_path), 3) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        old_blobs = [blobs(d) for d in c.nodes]
        c[0].stop(cleanup_mount=True)
        c[0].env["PTCFS_FAILPOINT"] = "peer.read.damage"
        c[0].start()
        r = c[1].cli("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=3", check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "fail their checksum" in r.stderr and "from node n0" in r.stderr, r.stderr
        assert "aborted, the old layout stays" in r.stderr, r.stderr
        old_layout_everywhere(c, old_blobs)
        verify_step(c[0], "j", "1", ck, full_views=False)
        # n1 holds none of it: its mount reads from n0 and refuses the damaged bytes too.
        with pytest.raises(OSError) as e:
            with open(os.path.join(c[1].step_dir("j", "1"), "tp0-pp0.safetensors"), "rb") as f:
                f.read()
        assert e.value.errno == errno.EIO
        # Undamaged, every node reads the old layout, and the same change goes through.
        c[0].stop(cleanup_mount=True)
        del c[0].env["PTCFS_FAILPOINT"]
        c[0].start()
        for d in c.nodes:
            verify_step(d, "j", "1", ck, full_views=False)
        r = c[1].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=3", "--json")
        assert r["version"] == 2 and r["bytes_moved"] == r["bytes_min"], r
        oracles = Oracles(str(tmp_path), ck, 0)
        for d in c.nodes[1:]:
            verify_step(d, "j", "1", oracles((2, 1, 3)), full_views=False)


class Peer:
    """A raw peer connection: the frame protocol and the cluster secret's challenge-response."""

    def __init__(self, port: int, secret: bytes):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=20)
        _, _, ftype, _, hello = read_frame(self.s)
        assert ftype == 4 and hello["auth"] == "hmac-sha256"
        nc = os.urandom(32).hex()
        proof = hmac.new(secret, b"ptcfs-client\0" + hello["nonce"].encode() + nc.encode(), hashlib.sha256).hexdigest()
        self.s.sendall(frame(json.dumps({"nonce": nc, "proof": proof}).encode(), ftype=5, rid=0))
        _, _, ftype, _, ok = read_frame(self.s)
        assert ftype == 6, ok

    def recv_exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def request(self, req: dict, rid: int = 1):
        """(ok, result or error, bytes)."""
        self.s.sendall(frame(json.dumps(req).encode(), rid=rid))
        while True:  # keepalive (8) and progress (3) frames come while a request runs
            _, _, ftype, length, got_rid = HEADER.unpack(self.recv_exact(HEADER.size))
            assert got_rid == rid
            if ftype not in (3, 8):
                break
            self.recv_exact(length)
        if ftype == 7:  # data: u32 JSON length, JSON, bytes
            n = int.from_bytes(self.recv_exact(4), "little")
            body = json.loads(self.recv_exact(n))
            data = self.recv_exact(length - 4 - n)
        else:
            body, data = json.loads(self.recv_exact(length)), b""
        return body["ok"], body.get("result", body.get("error")), data


def read_req(**kw):
    req = {"op": "peer.read", "job": "j", "step": "1", "version": 1, "shard": "tp0-pp0",
           "tensor": "layers.0.mlp.dense_h_to_4h.weight", "lo": 0, "len": 0, "off": 0, "n": 0}
    req.update(kw)
    return req


def test_peers_get_exact_bytes_and_bad_requests_are_refused_while_others_are_served(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=1, layers=2, hidden=128, vocab=1000)
    name = "layers.0.mlp.dense_h_to_4h.weight"  # [1024, 128], two fused parts split along dim 0
    want = ck.slices[(0, 0)][name]
    assert want.shape == (512, 128)
    with Cluster(root, 2) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        secret = open(c.secret, "rb").read().rstrip()
        good, bad = Peer(c.ports[0], secret), Peer(c.ports[0], secret)
        # A slab of rows 10..20, bytes 100.. of it: exact bytes and their XXH3 in the reply.
        ok, res, data = good.request(read_req(lo=10, len=10, off=100, n=1000))
        assert ok and res["n"] == 1000, res
        assert data == want[10:20].tobytes()[100:1100]
        for req, code, text in [
            (read_req(lo=500, len=20, n=8), "out_of_range", "outside its slice"),
            (read_req(lo=0, len=2, off=500, n=100), "out_of_range", "lie outside"),
            (read_req(tensor="no.such.tensor", n=8), "not_found", "no tensor 'no.such.tensor'"),
            (read_req(shard="tp7-pp0", n=8), "not_found", "no shard 'tp7-pp0'"),
            (read_req(version=9, n=8), "not_found", "version 9"),
            (read_req(len=512, n=1 << 30), "resource_exhausted", "exceeds the limit"),
            (read_req(extra=1), "invalid_argument", "unknown key 'extra'"),
        ]:
            ok, err, _ = bad.request(req)
            assert not ok and err["code"] == code and text in err["message"], (req, err)
            ok, _, data = good.request(read_req(len=512, n=want.nbytes))  # the other connection is served
            assert ok and data == want.tobytes()
        # An oversized frame: refused, that connection closed, the others still served.
        bad.s.sendall(HEADER.pack(b"PTCF", 1, 1, (1 << 20) + 1, 3))
        _, _, ftype, _, body = read_frame(bad.s)
        assert ftype == 2 and body["error"]["code"] == "resource_exhausted", body
        assert bad.s.recv(1) == b""
        ok, _, data = good.request(read_req(len=512, n=want.nbytes))
        assert ok and data == want.tobytes()
        # No secret, no peer.
        env = {k: v for k, v in os.environ.items() if k != "PTCFS_SECRET_FILE"}
        r = subprocess.run([PTCFS, "--daemon", c[0].addr, "status"], capture_output=True, text=True, env=env)
        assert r.returncode == 1 and "requires the cluster secret" in r.stderr
        assert "refused a peer read" in c[0].log_tail()


def test_an_abort_that_comes_before_the_prepare_ends_leaves_nothing_prepared(tmp_path):
    """A coordinator that gave up on a slow (or stopped) node aborts the transaction while the node
    still prepares it: the node answers the abort at once, and the prepare that ends later drops
    its change rather than keep it prepared (and its step claimed) for a decision that never comes.
    n1 pauses 3 s with its part prepared (failpoint peer.prepared) while the abort comes on another
    raw peer connection; then an abort that comes before the prepare starts."""
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ck"), tp=2, pp=1, layers=2, hidden=128, vocab=1000)
    with Cluster(str(tmp_path), 2) as c:
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        c[1].stop(cleanup_mount=True)
        c[1].env["PTCFS_FAILPOINT"] = "peer.prepared:3"
        c[1].start()
        secret = open(c.secret, "rb").read().rstrip()
        preparing, aborting = Peer(c.ports[1], secret), Peer(c.ports[1], secret)
        prepare = {"op": "peer.prepare", "tx": "t-slow", "kind": "remove", "job": "j", "step": "1"}
        got = {}
        t = threading.Thread(target=lambda: got.update(r=preparing.request(prepare)))
        t.start()
        wait_for(lambda: "failpoint peer.prepared reached" in c[1].log_tail(), 20, "n1 never prepared")
        ok, res, _ = aborting.request({"op": "peer.abort", "tx": "t-slow"})
        assert ok, res
        t.join(30)
        ok, res, _ = got["r"]
        assert not ok and res["code"] == "failed_precondition", res
        assert "transaction t-slow was aborted by its coordinator before this node had prepared it" in \
            res["message"], res
        assert "dropped the change of transaction t-slow" in c[1].log_tail()
        # An abort before the prepare even starts: refused at once the same way.
        ok, res, _ = aborting.request({"op": "peer.abort", "tx": "t-early"}, rid=2)
        assert ok, res
        ok, res, _ = aborting.request(dict(prepare, tx="t-early"), rid=3)
        assert not ok and "transaction t-early was aborted" in res["message"], res
        # Nothing of them stays: the step is as it was on every node, not claimed, and a removal
        # through the coordinator goes through on both.
        for d in c.nodes:
            assert d.cli_json("ls", "j/1", "--json")["version"] == 1
        c[0].cli("rm", "j/1")
        for d in c.nodes:
            assert d.cli("ls", "j/1", check=False).returncode != 0
