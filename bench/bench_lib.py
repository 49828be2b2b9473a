"""Helpers shared by the Python benchmarks: result rows, timing of reads and commands,
and a daemon with its mount (the integration tests' harness)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "python"))  # the ptcfs package
os.environ.setdefault("PTCFS_BUILD", os.path.join(REPO, "build"))
BUILD = os.environ["PTCFS_BUILD"]

import ptcgen  # noqa: E402,F401  (re-exported for the benchmarks)
from ptcfs_harness import Daemon  # noqa: E402,F401


def row(section: str, measure: str, ours: str, base: str, ratio, target: str, met=None) -> dict:
    """One line of the table. ratio > 1 means ptcfs is faster (baseline time / ptcfs time),
    except where the measure says otherwise (None: no baseline); met is None where there is
    no budget."""
    return {"section": section, "measure": measure, "ptcfs": ours, "baseline": base, "ratio": ratio,
            "target": target, "met": met}


def secs(s: float) -> str:
    return f"{s:.3f} s" if s < 10 else f"{s:.1f} s"


def gbps(nbytes: int, s: float) -> str:
    return f"{nbytes / s / 1e9:.2f} GB/s"


def drop_page_cache(path: str) -> None:
    """The next read of path is a first read again (no effect on tmpfs, whose pages are the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_dentries() -> None:
    """Drops the kernel's cached names and inodes (tmpfs keeps its own: they are the files)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def timed(cmd, **kw) -> float:
    """Seconds a command takes; it must succeed."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


def read_secs(path: str, block: int) -> float:
    """Seconds to read path to its end with `block`-byte reads (dd, the same tool for every side)."""
    return timed(["dd", f"if={path}", "of=/dev/null", f"bs={block}", "status=none"])


def best(n: int, fn, before=None) -> float:
    """The least of n timings of fn(); before() runs untimed ahead of each."""
    out = float("inf")
    for _ in range(n):
        if before:
            before()
        out = min(out, fn())
    return out


def first_and_reread(path: str, tmpfs_copy: str, block: int) -> tuple:
    """Best-of-three seconds to read path with `block`-byte reads: first read (its cached pages
    dropped before each), re-read (after one untimed re-read: the second read of fresh pages
    also moves them to the kernel's active list), and the same bytes on tmpfs."""
    first = best(3, lambda: read_secs(path, block), before=lambda: drop_page_cache(path))
    read_secs(path, block)
    again = best(3, lambda: read_secs(path, block))
    return first, again, best(3, lambda: read_secs(tmpfs_copy, block))


def print_rows(rows: list) -> None:
    """The table: one line per row, 'MISSED' where a budget is not met."""
    w = max(len(r["measure"]) for r in rows)
    print(f"\n{'section':<12} {'measure':<{w}} {'ptcfs':>12} {'baseline':>12} {'ratio':>7}  target")
    for r in rows:
        mark = "" if r["met"] is None else ("  ok" if r["met"] else "  MISSED")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['section']:<12} {r['measure']:<{w}} {r['ptcfs']:>12} {r['baseline']:>12} {ratio:>7}  "
              f"{r['target']}{mark}")


def standalone(doc: str, configure, run) -> int:
    """The main of one benchmark run on its own: its flags (configure(parser)), a scratch
    folder under /var/tmp, then run(args, folder) -> (rows, raw results), the rows printed
    and, with --json FILE, written with the raw results."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    configure(ap)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ptcfs-bench-", dir="/var/tmp")
    try:
        rows, raw = run(a, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_rows(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "raw": raw}, f, indent=2)
    return 0
