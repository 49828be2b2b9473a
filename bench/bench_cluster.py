#!/usr/bin/env python3
"""Three-daemon repartition against a plain loopback TCP copy of the same bytes, in one run.

A checkpoint of about --mb MB is imported on n0 (tp=2 on its two GPUs); the repartition to
tp=2,pp=1,dp=3 puts a replica on n1 and on n2, which pull every byte of it from n0. Printed:
the repartition's throughput (bytes_moved / wall time of `ptcfs repartition`) over the
throughput of a plain TCP copy of bytes_moved bytes over loopback (two streams, like the two
receivers; sender and receiver in this process), and bytes_moved / bytes_min. Each round also
prints the CPU time the three daemons used during the repartition (user + system, every thread).

    $PTCFS_PYTHON bench/bench_cluster.py [--mb 1100] [--rounds 2] [--tmpfs] [--json FILE]
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bench_lib import gbps, ptcgen, row, standalone  # noqa: E402  (also puts tests/ on the path)
from cluster_util import Cluster  # noqa: E402

SECTION = "cluster"


def tcp_copy(total: int, streams: int = 2, chunk: int = 16 << 20, sink_dir: str = "") -> float:
    """Seconds to send `total` bytes over loopback in `streams` parallel connections; with
    sink_dir, each receiver also writes what it gets to a file there and fsyncs it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(streams)
    port = srv.getsockname()[1]
    per = total // streams
    payload = memoryview(os.urandom(chunk))

    def receive(conn, k):
        buf = bytearray(chunk)
        view = memoryview(buf)
        fd = os.open(os.path.join(sink_dir, f"sink{k}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if sink_dir else -1
        got = 0
        while got < per:
            n = conn.recv_into(view, min(chunk, per - got))
            if n == 0:
                break
            if fd >= 0:
                os.write(fd, view[:n])
            got += n
        if fd >= 0:
            os.fsync(fd)
            os.close(fd)
            os.unlink(os.path.join(sink_dir, f"sink{k}"))
        conn.close()

    def send():
        s = socket.create_connection(("127.0.0.1", port))
        left = per
        while left > 0:
            n = min(chunk, left)
            s.sendall(payload[:n])
            left -= n
        s.close()

    t0 = time.perf_counter()
    senders = [threading.Thread(target=send) for _ in range(streams)]
    for t in senders:
        t.start()
    receivers = []
    for k in range(streams):
        conn, _ = srv.accept()
        th = threading.Thread(target=receive, args=(conn, k))
        th.start()
        receivers.append(th)
    for t in senders + receivers:
        t.join()
    srv.close()
    return time.perf_counter() - t0


def cpu_seconds(pids) -> float:
    """User + system CPU seconds the processes `pids` (every thread) have used so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def run(mb: float, rounds: int, root: str, tmpfs: bool = False) -> tuple:
    """Returns (table rows, per-round results)."""
    hidden = ptcgen.hidden_for_target("gpt", 2, 1, 1, 8, 32000, int(mb * 1e6))
    ptc = ptcgen.make_ptc("gpt", 2, 1, 1, 8, hidden, 32000)
    ck = os.path.join(root, "ck")
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    print(f"checkpoint: {summary['bytes'] / 1e6:.0f} MB, hidden {hidden}, tp=2,pp=1 on n0", flush=True)
    results = []
    croot = tempfile.mkdtemp(prefix="ptcfs-bench-", dir="/dev/shm") if tmpfs else os.path.join(root, "cluster")
    try:
        with Cluster(croot, 3) as c:
            for i in range(rounds):
                step = str(i + 1)
                c[0].cli("import", ck, "--job", "bench", "--step", step)
                subprocess.run(["sync"], check=True)
                pids = [d.proc.pid for d in c.nodes]
                cpu0 = cpu_seconds(pids)
                t0 = time.perf_counter()
                r = c[0].cli_json("repartition", "--job", "bench", "--step", step, "--to", "tp=2,pp=1,dp=3", "--json")
                wall = time.perf_counter() - t0
                cpu = cpu_seconds(pids) - cpu0
                tcp = tcp_copy(r["bytes_moved"])
                disk = tcp_copy(r["bytes_moved"], sink_dir=c[1].data)
                results.append({"bytes_moved": r["bytes_moved"], "bytes_min": r["bytes_min"], "repartition_s": wall,
                                "daemons_cpu_s": cpu,
                                "tcp_copy_s": tcp, "tcp_to_disk_s": disk, "throughput_ratio": tcp / wall,
                                "ratio_vs_tcp_to_disk": disk / wall,
                                "moved_over_min": r["bytes_moved"] / r["bytes_min"]})
                print(f"round {i + 1}: moved {r['bytes_moved'] / 1e6:.0f} MB (min {r['bytes_min'] / 1e6:.0f} MB) in "
                      f"{wall:.2f} s = {r['bytes_moved'] / wall / 1e9:.2f} GB/s (daemons' CPU {cpu:.2f} s); "
                      f"loopback TCP copy {tcp:.2f} s; "
                      f"TCP copy into fsynced files on the same disk {disk:.2f} s", flush=True)
    finally:
        if tmpfs:
            shutil.rmtree(croot, ignore_errors=True)
    # Each side's best round, as the other sections take each side's best time.
    moved, bmin = results[0]["bytes_moved"], results[0]["bytes_min"]
    ours = min(r["repartition_s"] for r in results)
    tcp = min(r["tcp_copy_s"] for r in results)
    disk = min(r["tcp_to_disk_s"] for r in results)
    where = " (data on tmpfs)" if tmpfs else ""
    rows = [
        row(SECTION, f"3-daemon repartition{where} vs loopback TCP copy", gbps(moved, ours), gbps(moved, tcp),
            tcp / ours, ">= 0.5", tcp / ours >= 0.5),
        row(SECTION, f"3-daemon repartition{where} vs TCP copy into fsynced files", gbps(moved, ours),
            gbps(moved, disk), disk / ours, "", None),
        row(SECTION, "3-daemon repartition: bytes_moved / bytes_min", f"{moved / 1e6:.0f} MB", f"{bmin / 1e6:.0f} MB",
            moved / bmin, "1.00", all(r["bytes_moved"] == r["bytes_min"] for r in results)),
    ]
    return rows, results


def main() -> int:
    def configure(ap):
        ap.add_argument("--mb", type=float, default=1100, help="checkpoint size in MB (10^6 bytes)")
        ap.add_argument("--rounds", type=int, default=2, help="repartitions timed (each from a fresh import)")
        ap.add_argument("--tmpfs", action="store_true",
                        help="put the daemons' data dirs on /dev/shm (no disk: the transport's own throughput)")
    return standalone(__doc__, configure, lambda a, root: run(a.mb, a.rounds, root, a.tmpfs))


if __name__ == "__main__":
    sys.exit(main())
