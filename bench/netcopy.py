#!/usr/bin/env python3
"""Files over plain TCP, for bench/bench_reconfig.py's central baseline and link test (run in a
node's network namespace, like scp without the encryption).

    netcopy.py recv PORT DIR CONNS      # accept CONNS connections; DIR "-" throws the bytes away
    netcopy.py send HOST:PORT FILE...   # one connection, the files one after another
    netcopy.py send HOST:PORT --zeros N # N bytes of one buffer, named "-" (the link test)

A file on the wire: name length (u32), name, size (u64), bytes. The receiver prints "ready"
once it listens, and at the end one JSON line: {"bytes", "seconds"} (first byte to last)."""

import json
import os
import socket
import struct
import sys
import threading
import time

CHUNK = 4 << 20


def recv_exact(conn, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = conn.recv(n - len(out))
        if not b:
            return bytes(out)
        out += b
    return bytes(out)


def receive(conn, folder: str, stats: dict, lock) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    got = 0
    first = None
    while True:
        head = recv_exact(conn, 4)
        if not head:
            break
        first = first or time.perf_counter()
        (n,) = struct.unpack("<I", head)
        name = recv_exact(conn, n).decode()
        (size,) = struct.unpack("<Q", recv_exact(conn, 8))
        fd = -1 if folder == "-" else os.open(os.path.join(folder, os.path.basename(name)),
                                              os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        left = size
        while left:
            k = conn.recv_into(view, min(CHUNK, left))
            if k == 0:
                raise SystemExit(f"netcopy: connection closed with {left} bytes of {name} to come")
            if fd >= 0:
                w = 0
                while w < k:
                    w += os.write(fd, view[w:k])
            left -= k
        if fd >= 0:
            os.close(fd)  # like scp and torch.save: no fsync
        got += size
    conn.close()
    with lock:
        stats["bytes"] += got
        if first:
            stats["first"] = min(stats.get("first", first), first)
        stats["last"] = time.perf_counter()


def recv_main(port: int, folder: str, conns: int) -> int:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(conns)
    print("ready", flush=True)
    stats, lock, threads = {"bytes": 0}, threading.Lock(), []
    for _ in range(conns):
        conn, _ = srv.accept()
        t = threading.Thread(target=receive, args=(conn, folder, stats, lock))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    srv.close()
    print(json.dumps({"bytes": stats["bytes"], "seconds": stats.get("last", 0) - stats.get("first", 0)}), flush=True)
    return 0


def send_main(addr: str, args: list) -> int:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))

    def head(name: str, size: int) -> None:
        raw = name.encode()
        s.sendall(struct.pack("<I", len(raw)) + raw + struct.pack("<Q", size))

    if args[:1] == ["--zeros"]:
        total = int(args[1])
        head("-", total)
        payload = memoryview(bytes(CHUNK))
        while total:
            n = min(CHUNK, total)
            s.sendall(payload[:n])
            total -= n
    else:
        for path in args:
            size = os.path.getsize(path)
            head(os.path.basename(path), size)
            with open(path, "rb") as f:
                off = 0
                while off < size:
                    off += os.sendfile(s.fileno(), f.fileno(), off, size - off)
    s.close()
    return 0


def main() -> int:
    if len(sys.argv) >= 5 and sys.argv[1] == "recv":
        return recv_main(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    if len(sys.argv) >= 4 and sys.argv[1] == "send":
        return send_main(sys.argv[2], sys.argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
