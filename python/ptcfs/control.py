"""A client of the daemon's control protocol (docs/FORMATS.md "Control protocol"), in pure
Python: the same frames, authentication and operations the ptcfs CLI uses.

Frames are a 16-byte header (magic "PTCF", u16 version 1, u16 type, u32 body length, u32
request id; little-endian) and a JSON body. The daemon speaks first with a hello; a daemon
with a cluster secret asks for an HMAC-SHA256 challenge-response in which the secret never
crosses the wire and each side proves it holds it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import Error

HEADER = struct.Struct("<4sHHII")
MAGIC = b"PTCF"
VERSION = 1
REQUEST, RESPONSE, PROGRESS, HELLO, AUTH, AUTH_OK, DATA, KEEPALIVE = 1, 2, 3, 4, 5, 6, 7, 8
MAX_REQUEST = 1 << 20     # the daemon refuses larger request frames
MAX_RESPONSE = 256 << 20  # as the CLI: a reply larger than this is a broken stream
DEFAULT_DAEMON = "127.0.0.1:7070"


def read_secret(path: str) -> bytes:
    """The secret in a secret file: its content without trailing whitespace, >= 16 bytes."""
    try:
        with open(path, "rb") as f:
            s = f.read().rstrip(b" \t\n\r\v\f")
    except OSError as e:
        raise Error("not_found", f"secret file {path}: cannot be read: {e.strerror}") from None
    if len(s) < 16:
        raise Error("invalid_argument", f"secret file {path}: the secret must be at least 16 bytes")
    return s


def proof(secret: bytes, role: str, first_nonce: str, second_nonce: str) -> str:
    """HMAC-SHA256(secret, "ptcfs-<role>" NUL first second), hex. The client proves with
    (Ns, Nc), the server with (Nc, Ns)."""
    msg = f"ptcfs-{role}".encode() + b"\0" + first_nonce.encode() + second_nonce.encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def parse_address(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Error("invalid_argument", f"daemon address '{addr}': expected HOST:PORT")
    return host.strip("[]"), int(port)


class Client:
    """One authenticated connection to a daemon.

    daemon: "HOST:PORT" (default $PTCFS_DAEMON, then 127.0.0.1:7070). secret_file: the
    cluster secret (default $PTCFS_SECRET_FILE; only read when the daemon asks for it).
    timeout: seconds for connecting and for each socket read (None: wait as long as a
    repartition takes). Every failure raises Error(code, message) with the daemon's code."""

    def __init__(self, daemon: Optional[str] = None, secret_file: Optional[str] = None,
                 timeout: Optional[float] = 30.0, connect_timeout: float = 10.0):
        self.addr = daemon or os.environ.get("PTCFS_DAEMON") or DEFAULT_DAEMON
        self.secret_file = secret_file or os.environ.get("PTCFS_SECRET_FILE") or None
        self._next_id = 0
        host, port = parse_address(self.addr)
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise Error("unavailable", f"cannot reach the daemon at {self.addr}: {e.strerror or e} "
                                       "(is ptcfsd running? set PTCFS_DAEMON)") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._handshake()
            self._sock.settimeout(timeout)
        except BaseException:
            self._sock.close()
            raise

    # -- framing

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self._sock.recv(n - len(buf))
            except socket.timeout:
                raise Error("deadline_exceeded", f"the daemon at {self.addr} did not answer in time") from None
            except OSError as e:
                raise Error("unavailable", f"connection to the daemon at {self.addr} lost: {e}") from None
            if not chunk:
                raise Error("unavailable", f"connection to the daemon at {self.addr} closed")
            buf += chunk
        return bytes(buf)

    def _send(self, ftype: int, rid: int, body: Dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        if len(data) > MAX_REQUEST:
            raise Error("invalid_argument", f"request of {len(data)} bytes exceeds the daemon's 1 MiB limit")
        try:
            self._sock.sendall(HEADER.pack(MAGIC, VERSION, ftype, len(data), rid) + data)
        except OSError as e:
            raise Error("unavailable", f"connection to the daemon at {self.addr} lost: {e}") from None

    def _read_frame(self) -> Tuple[int, int, Dict[str, Any], Optional[bytes]]:
        """(type, request id, JSON body, data bytes of a data frame or None)."""
        magic, version, ftype, length, rid = HEADER.unpack(self._recv(HEADER.size))
        if magic != MAGIC or version != VERSION:
            raise Error("corrupt", f"the daemon at {self.addr} sent a bad frame header")
        if length > MAX_RESPONSE:
            raise Error("corrupt", f"the daemon at {self.addr} sent a frame of {length} bytes")
        body = self._recv(length)
        data = None
        if ftype == KEEPALIVE:  # the request is still running: nothing in it
            return ftype, rid, {}, None
        if ftype == DATA:
            # u32 JSON length, the JSON response, then the bytes.
            if length < 4:
                raise Error("corrupt", f"the daemon at {self.addr} sent a truncated data frame")
            (jlen,) = struct.unpack("<I", body[:4])
            if jlen > length - 4:
                raise Error("corrupt", f"the daemon at {self.addr} sent a malformed data frame")
            body, data = body[4:4 + jlen], body[4 + jlen:]
            ftype = RESPONSE
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise Error("corrupt", f"the daemon at {self.addr} sent malformed JSON")
        return ftype, rid, obj, data

    @staticmethod
    def _error_of(body: Dict[str, Any]) -> Error:
        err = body.get("error") or {}
        return Error(err.get("code", "internal"), err.get("message", "unknown error"))

    # -- hello and authentication

    def _handshake(self) -> None:
        ftype, _, hello, _ = self._read_frame()
        if ftype == RESPONSE:  # refused, saying why (e.g. every connection busy)
            raise self._error_of(hello)
        if ftype != HELLO:
            raise Error("corrupt", f"the daemon at {self.addr} did not say hello")
        auth = hello.get("auth")
        if auth == "none":
            return
        if auth != "hmac-sha256":
            raise Error("corrupt", f"the daemon at {self.addr} asks for unknown authentication {auth!r}")
        if not self.secret_file:
            raise Error("permission_denied", f"the daemon at {self.addr} requires the cluster secret "
                                             "(give secret_file or set PTCFS_SECRET_FILE)")
        secret = read_secret(self.secret_file)
        ns, nc = str(hello.get("nonce", "")), secrets.token_hex(32)
        self._send(AUTH, 0, {"nonce": nc, "proof": proof(secret, "client", ns, nc)})
        ftype, _, reply, _ = self._read_frame()
        if ftype == RESPONSE:
            raise self._error_of(reply)
        if ftype != AUTH_OK:
            raise Error("corrupt", f"the daemon at {self.addr} sent an unexpected frame")
        if not hmac.compare_digest(str(reply.get("proof", "")), proof(secret, "server", nc, ns)):
            raise Error("permission_denied", f"the daemon at {self.addr} does not hold the cluster secret")

    # -- requests

    def call_data(self, op: str, progress: Optional[Callable[[dict], None]] = None,
                  **fields: Any) -> Tuple[Any, Optional[bytes]]:
        """Sends {"op": op, **fields}; returns (result, bytes of a data frame or None).
        Progress frames go to `progress` ({"phase", "done", "total"})."""
        self._next_id = self._next_id % 0xFFFFFFFF + 1
        rid = self._next_id
        self._send(REQUEST, rid, {"op": op, **{k: v for k, v in fields.items() if v is not None}})
        while True:
            ftype, got, body, data = self._read_frame()
            if ftype == KEEPALIVE:
                continue
            if ftype == PROGRESS and got == rid:
                if progress:
                    progress(body)
                continue
            if ftype == RESPONSE and got == 0:  # the daemon closes this connection, saying why
                raise self._error_of(body)
            if ftype != RESPONSE or got != rid:
                raise Error("corrupt", f"the daemon at {self.addr} sent an unexpected frame (type {ftype})")
            if body.get("ok") is True:
                return body.get("result", {}), data
            raise self._error_of(body)

    def call(self, op: str, progress: Optional[Callable[[dict], None]] = None, **fields: Any) -> Any:
        """Sends {"op": op, **fields} (None fields left out) and returns the result."""
        return self.call_data(op, progress, **fields)[0]

    def status(self) -> dict:
        return self.call("status")

    def ls(self, path: str = "") -> dict:
        """"" lists jobs, "JOB" its steps, "JOB/STEP" the step's version, parallelism, shards."""
        return self.call("ls", path=path)

    def import_dir(self, dir: str, job: str, step: Any, nodes: Optional[Sequence[str]] = None,
                   progress=None) -> dict:
        """Imports a checkpoint directory (ptc.json + rank files) as JOB/STEP."""
        return self.call("import", progress, dir=os.path.abspath(dir), job=job, step=str(step),
                         nodes=list(nodes) if nodes else None)

    def repartition(self, job: str, step: Any, to: Any, dry_run: bool = False,
                    nodes: Optional[Sequence[str]] = None, progress=None,
                    global_batch: Optional[int] = None) -> dict:
        """Re-splits JOB/STEP for `to`: "tp=T,pp=P,dp=D", a (tp, pp, dp) tuple or a dict; with
        `global_batch`, the job's datasets take that global batch in the same commit."""
        return self.call("repartition", progress, job=job, step=str(step), to=format_parallelism(to),
                         dry_run=bool(dry_run), nodes=list(nodes) if nodes else None,
                         global_batch=None if global_batch is None else int(global_batch))

    def dataset_add(self, job: str, name: str, format: str, seed: int, global_batch: int,
                    files: Sequence[str], dp: Optional[int] = None, copy: bool = False, progress=None) -> dict:
        return self.call("dataset.add", progress, job=job, name=name, format=format, seed=int(seed),
                         global_batch=int(global_batch), files=[os.path.abspath(f) for f in files],
                         dp=dp, copy=bool(copy))

    def dataset_progress(self, job: str, name: str, consumed: int, epoch: Optional[int] = None,
                         dp: Optional[int] = None, global_batch: Optional[int] = None,
                         batch_offset: Optional[int] = None) -> dict:
        """Records that training consumed `consumed` samples of epoch `epoch` (default: the
        current one); the rank views then start there. With `dp` or `global_batch` the dataset is
        also re-split there for them, in the same version (as a repartition would). With
        `batch_offset` (and `epoch`, `global_batch`) the position is set to exactly that, whatever
        it was (a job back at a checkpoint)."""
        return self.call("dataset.progress", job=job, name=name, consumed=int(consumed),
                         epoch=None if epoch is None else int(epoch), dp=None if dp is None else int(dp),
                         global_batch=None if global_batch is None else int(global_batch),
                         batch_offset=None if batch_offset is None else int(batch_offset))

    def dataset_ls(self, job: Optional[str] = None) -> dict:
        return self.call("dataset.ls", job=job)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def format_parallelism(to: Any) -> str:
    if isinstance(to, str):
        return to
    if isinstance(to, dict):
        return f"tp={to['tp']},pp={to['pp']},dp={to['dp']}"
    tp, pp, dp = to
    return f"tp={tp},pp={pp},dp={dp}"


def connect(daemon: Optional[str] = None, secret_file: Optional[str] = None, **kw) -> Client:
    """A Client (see there for the defaults)."""
    return Client(daemon, secret_file, **kw)
