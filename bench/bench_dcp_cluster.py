#!/usr/bin/env python3
"""A DCP checkpoint loaded at a new mesh on a 3-node cluster whose links are the bottleneck
(docs/BENCHMARKS.md "dcp_cluster"; issue: stock DCP through ptcfs).

The cluster is bench_reconfig's: three network namespaces joined by a switch, every link limited
with tc to --rate both ways, a ptcfsd in each (data on tmpfs). A job of 4 ranks saved the state
(every tensor Shard(0), FSDP's layout, about --gb GB) with stock dcp.save to a folder on n0; the
folder is imported into ptcfs through n0's mount (untimed: where the job's checkpoint already is).
Then a job of 3 ranks, one per node, loads it, timed from its first barrier until every rank
holds its rows:

- ptcfs: ptcfs.dcp.prepare (the step repartitioned to the 3 ranks' boxes: n1 and n2 pull their
  thirds from n0 over the links), then stock dcp.load from each rank's own node's mount;
- stock, what users do without ptcfs: the folder copied from n0 to n1 and n2 (plain TCP,
  bench/netcopy.py, both at once), then stock dcp.load from each node's copy;
- the limit: n0 sends the two thirds n1 and n2 lack through its one link (2/3 of the bytes at
  --rate), and a rank copies its third at memcpy speed (one thread, measured in this run).

Every rank checks every byte it loaded.

A second ptcfs run starts where a job that saved into ptcfs leaves its checkpoint: the same state
saved by 4 ranks, two a node on n0 and n1, with stock dcp.save through their own nodes' mounts (each
node keeps the shards its ranks wrote), then loaded by the 3 ranks as above. Its limit is the
busiest link's share of the bytes that must move (what each new rank lacks on its node, from the
node that holds it) at --rate, and the memcpy of a third. The stock path is the same copy and load.

    $PTCFS_PYTHON bench/bench_dcp_cluster.py [--gb 2] [--rate 2gbit] [--plot PNG] [--json FILE]
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench_lib import HERE, REPO, row, secs, standalone
from bench_reconfig import PORT, Fabric, fabric_daemons, memcpy_rate, rate_bytes, scatter

SECTION = "dcp_cluster"
PY = sys.executable
COLS = 4096
TENSORS = 16


def spec_of(gb: float) -> dict:
    rows = max(4, int(gb * 1e9 / TENSORS / COLS / 4))
    return {"tensors": [[f"model.layers.{k}.w", rows + k, COLS] for k in range(TENSORS)]}


def env(extra=None) -> dict:
    return {**os.environ, "PYTHONPATH": os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **(extra or {})}


def ranks(cmds: list) -> list:
    """Runs the rank processes (each a command line and an environment) at once; their JSON lines."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=e) for c, e in cmds]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"a rank exited {p.returncode}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def load(fab: Fabric, mode: str, dirs: list, spec: dict, secret: str, port: int) -> list:
    rank = os.path.join(HERE, "dcp_rank.py")
    return ranks([([*fab.wrap(r), PY, rank, mode, str(r), "3", f"{fab.addrs[0]}:{port}", dirs[r], json.dumps(spec)],
                   env({"GLOO_SOCKET_IFNAME": fab.ifs[r][1], "PTCFS_DAEMON": f"{fab.addrs[0]}:{PORT}",
                        "PTCFS_SECRET_FILE": secret})) for r in range(3)])


def link_seconds(spec: dict, old_nodes: list, link_rate: float) -> float:
    """Seconds the busiest link needs for the bytes 3 ranks (rank r on node r, rows split evenly)
    lack on their node, each row taken from the node of the old rank that wrote it (`old_nodes`:
    node of each old rank, rows split evenly over them)."""
    sent, got = [0] * 3, [0] * 3
    old_world = len(old_nodes)
    for _, rows, cols in spec["tensors"]:
        c_new, c_old = -(-rows // 3), -(-rows // old_world)
        for r in range(3):
            lo, hi = min(r * c_new, rows), min((r + 1) * c_new, rows)
            for o, node in enumerate(old_nodes):
                olo, ohi = min(o * c_old, rows), min((o + 1) * c_old, rows)
                n = max(0, min(hi, ohi) - max(lo, olo)) * cols * 4
                if node != r:
                    sent[node] += n
                    got[r] += n
    return max(sent + got) / link_rate


def plot(path: str, bars: list, title: str) -> None:
    """Stacked bars (label, transfer seconds, load seconds) as a PNG, with gnuplot."""
    data = path + ".dat"
    with open(data, "w") as f:
        for label, transfer, loading in bars:
            f.write(f'"{label}" {transfer:.3f} {loading:.3f}\n')
    script = f"""set terminal pngcairo size 1000,480 font ",11"
set output "{path}"
set title "{title}"
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
set ylabel "seconds until every rank holds its rows"
set key top left
set grid ytics
set yrange [0:*]
plot "{data}" using 2:xtic(1) title "moving bytes over the links", "" using 3 title "loading (stock dcp.load)"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data)


def run(gb: float, rate: str, root: str, plot_path: str = "") -> tuple:
    link_rate = rate_bytes(rate)
    ckroot = tempfile.mkdtemp(prefix="ptcfs-dcp-cluster-", dir="/dev/shm")
    spec = spec_of(gb)
    try:
        saved = os.path.join(ckroot, "saved")
        t = time.perf_counter()
        ranks([([PY, os.path.join(HERE, "dcp_rank.py"), "save", str(r), "4", "127.0.0.1:29511", saved,
                 json.dumps(spec)], env({"GLOO_SOCKET_IFNAME": "lo"})) for r in range(4)])
        size = sum(os.path.getsize(os.path.join(saved, f)) for f in os.listdir(saved))
        print(f"checkpoint: stock dcp.save of 4 ranks, {size / 1e9:.2f} GB in {time.perf_counter() - t:.1f} s; "
              f"links {rate}", flush=True)
        copy_rate = memcpy_rate()
        with Fabric(3, rate) as fab:
            secret, nodes = fabric_daemons(fab, ckroot, 1)
            try:
                for d in nodes:
                    d.start()
                t = time.perf_counter()
                nodes[0].cli("import", saved, "--format", "dcp", "--job", "j", "--step", "1", timeout=1800)
                print(f"imported through n0's mount in {time.perf_counter() - t:.1f} s", flush=True)
                mounts = [os.path.join(d.mnt, "j", "1") for d in nodes]
                ours = load(fab, "ptcfs", mounts, spec, secret, 29512)

                # Stock: the folder copied from n0 to n1 and n2 at once, then loaded from each copy.
                files = sorted(os.path.join(saved, f) for f in os.listdir(saved))
                copies = [saved] + [os.path.join(ckroot, f"copy{n}") for n in (1, 2)]
                for c in copies[1:]:
                    os.makedirs(c)
                t = time.perf_counter()
                scatter(fab, 0, [(n, copies[n], 5100 + n, files) for n in (1, 2)])
                copy_s = time.perf_counter() - t
                theirs = load(fab, "stock", copies, spec, secret, 29513)

                # Saved into ptcfs: 4 ranks, two a node on n0 and n1, each through its node's mount.
                old_nodes = [0, 0, 1, 1]
                rank = os.path.join(HERE, "dcp_rank.py")
                t = time.perf_counter()
                ranks([([*fab.wrap(n), PY, rank, "save", str(r), "4", f"{fab.addrs[0]}:29514",
                         os.path.join(nodes[n].mnt, "j", "2"), json.dumps(spec)],
                        env({"GLOO_SOCKET_IFNAME": fab.ifs[n][1]})) for r, n in enumerate(old_nodes)])
                held = [nodes[n].cli_json("ls", "j/2", "--json")["bytes"] for n in range(3)]
                print(f"saved by 4 ranks through n0's and n1's mounts in {time.perf_counter() - t:.1f} s; "
                      f"held {[round(b / 1e6) for b in held]} MB", flush=True)
                spread = load(fab, "ptcfs", [os.path.join(d.mnt, "j", "2") for d in nodes], spec, secret, 29515)
            finally:
                for d in nodes:
                    d.stop(cleanup_mount=True)
    finally:
        shutil.rmtree(ckroot, ignore_errors=True)
    assert all(r["ok"] for r in ours + theirs + spread), (ours, theirs, spread)
    ptcfs_s = max(r["seconds"] for r in ours)
    stock_s = copy_s + max(r["seconds"] for r in theirs)
    third = max(r["bytes"] for r in ours)
    limit_s = (size - max(r["bytes"] for r in ours[:1])) / link_rate + third / copy_rate
    moved, least = ours[0]["bytes_moved"], ours[0]["bytes_min"]
    spread_s = max(r["seconds"] for r in spread)
    spread_limit_s = link_seconds(spec, old_nodes, link_rate) + third / copy_rate
    print(f"  ptcfs, saved through n0 and n1: {spread_s:.2f} s (prepare {max(r['prepare_s'] for r in spread):.2f} s, "
          f"moved {spread[0]['bytes_moved'] / 1e6:.0f} MB, min {spread[0]['bytes_min'] / 1e6:.0f} MB); "
          f"limit {spread_limit_s:.2f} s", flush=True)
    print(f"  ptcfs {ptcfs_s:.2f} s (prepare {max(r['prepare_s'] for r in ours):.2f} s, moved {moved / 1e6:.0f} MB, "
          f"min {least / 1e6:.0f} MB; {ours[0]['exact']} of {ours[0]['tensors']} tensors one chunk a rank); "
          f"stock {stock_s:.2f} s (copy {copy_s:.2f} s + load {stock_s - copy_s:.2f} s); limit {limit_s:.2f} s",
          flush=True)
    if plot_path:
        prepare_s = max(r["prepare_s"] for r in ours)
        spread_prepare_s = max(r["prepare_s"] for r in spread)
        plot(plot_path, [("ptcfs (on n0)", prepare_s, ptcfs_s - prepare_s),
                         ("limit (on n0)", limit_s - third / copy_rate, third / copy_rate),
                         ("ptcfs (on n0+n1)", spread_prepare_s, spread_s - spread_prepare_s),
                         ("limit (on n0+n1)", spread_limit_s - third / copy_rate, third / copy_rate),
                         ("stock (copied)", copy_s, stock_s - copy_s)],
             f"A {size / 1e9:.1f} GB DCP checkpoint of 4 ranks (on n0, or saved on n0+n1) loaded by 3 ranks on 3 nodes, "
             f"links {rate}")
    label = f"{size / 1e9:.2f} GB saved at 4 ranks, loaded at 3 (one a node), links {rate}"
    of_limit, vs_stock = limit_s / ptcfs_s, stock_s / ptcfs_s
    rows = [row(SECTION, f"{label}: ptcfs (prepare + stock dcp.load) vs the limit", secs(ptcfs_s), secs(limit_s),
                of_limit, ">= 0.5", of_limit >= 0.5),
            row(SECTION, f"{label}: ptcfs vs stock (folder copied to every node + stock dcp.load)", secs(ptcfs_s),
                secs(stock_s), vs_stock, ">= 3", vs_stock >= 3),
            row(SECTION, f"{label}: bytes moved / the minimum", f"{moved / 1e6:.0f} MB", f"{least / 1e6:.0f} MB",
                moved / least if least else 1.0, "1", moved == least)]
    slabel = f"{size / 1e9:.2f} GB saved at 4 ranks through n0's and n1's mounts, loaded at 3, links {rate}"
    s_moved, s_least = spread[0]["bytes_moved"], spread[0]["bytes_min"]
    rows += [row(SECTION, f"{slabel}: ptcfs vs the limit", secs(spread_s), secs(spread_limit_s),
                 spread_limit_s / spread_s, ">= 0.5", spread_limit_s / spread_s >= 0.5),
             row(SECTION, f"{slabel}: ptcfs vs stock (the folder on n0 copied to every node + stock dcp.load)",
                 secs(spread_s), secs(stock_s), stock_s / spread_s, ">= 3", stock_s / spread_s >= 3),
             row(SECTION, f"{slabel}: bytes moved / the minimum", f"{s_moved / 1e6:.0f} MB", f"{s_least / 1e6:.0f} MB",
                 s_moved / s_least if s_least else 1.0, "1", s_moved == s_least)]
    raw = {"bytes": size, "rate": rate, "link_bytes_per_s": link_rate, "memcpy_bytes_per_s": copy_rate,
           "ptcfs": ours, "stock": theirs, "copy_s": copy_s, "limit_s": limit_s,
           "saved_on_two_nodes": {"ptcfs": spread, "limit_s": spread_limit_s}}
    return rows, raw


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def configure(ap):
        ap.add_argument("--gb", type=float, default=2.0, help="checkpoint size in GB (10^9 bytes)")
        ap.add_argument("--rate", default="2gbit", help="each link's rate, as tc gives it (default 2gbit)")
        ap.add_argument("--plot", metavar="PNG", help="write the plot here")
    return standalone(__doc__, configure, lambda a, root: run(a.gb, a.rate, root, a.plot or ""))


if __name__ == "__main__":
    sys.exit(main())
