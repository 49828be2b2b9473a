"""The control protocol refuses malformed frames and keeps serving others (docs/FORMATS.md)."""

import json
import socket
import struct

import pytest

HEADER = struct.Struct("<4sHHII")  # magic, version, type, body length, request id


def frame(body: bytes, *, magic=b"PTCF", version=1, ftype=1, rid=7, length=None) -> bytes:
    return HEADER.pack(magic, version, ftype, len(body) if length is None else length, rid) + body


def read_frame(s: socket.socket):
    head = b""
    while len(head) < HEADER.size:
        chunk = s.recv(HEADER.size - len(head))
        if not chunk:
            return None
        head += chunk
    magic, version, ftype, length, rid = HEADER.unpack(head)
    body = b""
    while len(body) < length:
        chunk = s.recv(length - len(body))
        assert chunk, "connection closed inside a frame"
        body += chunk
    return magic, version, ftype, rid, json.loads(body)


def connect(daemon) -> socket.socket:
    """A connection past the daemon's hello (a daemon without a secret asks for no authentication)."""
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    _, version, ftype, _, hello = read_frame(s)
    assert (version, ftype, hello) == (1, 4, {"auth": "none"})
    return s


def closed_by_daemon(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_gets_a_response_with_its_id(daemon):
    with connect(daemon) as s:
        s.sendall(frame(json.dumps({"op": "status"}).encode(), rid=42))
        magic, version, ftype, rid, body = read_frame(s)
        assert (magic, version, ftype, rid) == (b"PTCF", 1, 2, 42)
        assert body["ok"] is True and body["result"]["listen"] == daemon.addr


@pytest.mark.parametrize("bad, why", [
    (frame(b"{}", magic=b"HTTP"), "bad magic"),
    (frame(b"{}", version=9), "protocol version 9 not supported"),
    (frame(b"{}", ftype=77), "unknown frame type 77"),
    (frame(b"", length=(1 << 20) + 1), "exceeds the limit"),
])
def test_malformed_frames_are_refused_and_the_connection_closed(daemon, bad, why):
    with connect(daemon) as s:
        s.sendall(bad)
        _, _, ftype, _, body = read_frame(s)
        assert ftype == 2 and body["ok"] is False
        assert why in body["error"]["message"], body
        assert closed_by_daemon(s)
    # The daemon keeps serving.
    assert daemon.cli_json("status", "--json")["listen"] == daemon.addr


@pytest.mark.parametrize("body, code, text", [
    (b"not json", "invalid_argument", "request is not a JSON object"),
    (b"[1, 2]", "invalid_argument", "request is not a JSON object"),
    (json.dumps({"op": "launch"}).encode(), "invalid_argument", "unknown operation 'launch'"),
    (json.dumps({"op": "ls", "extra": 1}).encode(), "invalid_argument", "unknown key 'extra'"),
    (json.dumps({"op": "import", "dir": "relative", "job": "j", "step": "1"}).encode(), "invalid_argument",
     "must be an absolute path"),
    # A member of the wrong type is the parser's refusal, not an internal error of the metrics after it.
    (json.dumps({"op": "repartition", "job": "j", "step": "1", "to": "tp=1,pp=1,dp=1", "dry_run": "yes"}).encode(),
     "invalid_argument", "dry_run"),
])
def test_bad_requests_get_an_error_and_the_connection_stays_usable(daemon, body, code, text):
    with connect(daemon) as s:
        s.sendall(frame(body, rid=1))
        _, _, ftype, rid, resp = read_frame(s)
        assert (ftype, rid) == (2, 1)
        assert resp["ok"] is False and resp["error"]["code"] == code and text in resp["error"]["message"], resp
        s.sendall(frame(json.dumps({"op": "ls"}).encode(), rid=2))
        _, _, _, rid, resp = read_frame(s)
        assert rid == 2 and resp == {"ok": True, "result": {"jobs": []}}


def test_a_request_nested_too_deep_is_refused(daemon):
    with connect(daemon) as s:
        s.sendall(frame(b'{"op": "ls", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", rid=3))
        _, _, ftype, rid, resp = read_frame(s)
        assert (ftype, rid) == (2, 3) and resp["ok"] is False
        assert "nested deeper than 64" in resp["error"]["message"], resp
        s.sendall(frame(json.dumps({"op": "ls", "path": 5}).encode(), rid=4))  # found by probing
        _, _, _, rid, resp = read_frame(s)
        assert rid == 4 and resp["ok"] is False and resp["error"]["code"] == "invalid_argument"
        assert "'path' must be a string" in resp["error"]["message"], resp


@pytest.mark.parametrize("half_sent", [False, True])
def test_idle_connections_do_not_lock_clients_out(daemon, half_sent):
    """Found by probing: 64 idle connections (the limit) locked every client out for 600 s.
    At the limit, a new connection closes the one idle longest, which is told why."""
    idle = [connect(daemon) for _ in range(64)]
    try:
        if half_sent:  # each stops inside a request frame
            for s in idle:
                s.sendall(frame(json.dumps({"op": "ls"}).encode(), rid=9)[:7])
        for _ in range(3):
            assert daemon.cli_json("status", "--json")["listen"] == daemon.addr
        # The first CLI call took the place of the connection idle longest (the next ones found
        # the place the first left).
        _, _, ftype, rid, body = read_frame(idle[0])
        assert (ftype, rid, body["ok"]) == (2, 0, False)
        assert body["error"]["code"] == "unavailable" and "idle connection" in body["error"]["message"], body
        assert closed_by_daemon(idle[0])
        assert daemon.log_tail().count("closing the one idle longest") == 1
        # The others were left alone and still serve (those with a half frame finish it).
        s = idle[-1]
        if half_sent:
            s.sendall(frame(json.dumps({"op": "ls"}).encode(), rid=9)[7:])
        else:
            s.sendall(frame(json.dumps({"op": "ls"}).encode(), rid=9))
        _, _, _, rid, resp = read_frame(s)
        assert rid == 9 and resp == {"ok": True, "result": {"jobs": []}}
    finally:
        for s in idle:
            s.close()


def test_status_in_the_first_instant_of_serving_reports_the_bound_address(tmp_path):
    """`--listen localhost:PORT` binds 127.0.0.1:PORT, which `status` reports. The daemon pauses
    just after it starts answering (failpoint daemon.serving): a status then must already see
    the bound address, set before the first request can read it (not written while one does)."""
    from ptcfs_harness import Daemon, require_binaries
    require_binaries()
    d = Daemon(str(tmp_path / "d"), listen_host="localhost")
    d.env = {"PTCFS_FAILPOINT": "daemon.serving:3"}
    # The mount answers only once the FUSE loop runs, after the pause: wait for status alone.
    d._mount_live = lambda: True
    try:
        d.start()  # returns once status answers: during the pause
        st = d.cli_json("status", "--json")
        with open(d.log_path, errors="replace") as f:
            log = f.read()
        assert "failpoint daemon.serving reached" in log and "failpoint daemon.serving passed" not in log, log
        assert st["listen"] == f"127.0.0.1:{d.port}", st
        d.wait_log(f"control on 127.0.0.1:{d.port}")
    finally:
        d.stop(cleanup_mount=True)
