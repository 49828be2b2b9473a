#!/usr/bin/env python3
"""The S3 tier on three daemons against the S3 server's own throughput, in one run (docs/OPERATIONS.md
"The S3 tier").

A checkpoint of about --mb MB (tp=2,pp=2: four ranks on n0 and n1 of a 3-node cluster, two GPUs each)
and a SeaweedFS S3 server (the tests' s3_util.S3Server) on loopback, on the same disk.

- write-through: the step is imported on a cluster running --s3-durable; measured from the import's end
  until every node says durable, against boto3 uploading the same rank files from one process
  (its TransferManager, 8 threads: what users script today).
- restore: a new cluster with empty data directories imports the durable copy (each node reads only the
  rank files of its own shards, with ranged GETs), against boto3 downloading the same objects (one
  process, 8 threads: the server's own throughput to a client), and against every node downloading the
  whole copy (three boto3 downloads at once, what a job without ptcfs does before it re-shards). Then
  the same copy imported at a new layout (`--to tp=1,pp=2,dp=3`): each node reads its shards of the
  copy's layout, then the nodes pull from each other the minimum the new layout lacks. Bytes
  are the daemons' own count of what they sent to and received from S3 (`ptcfs status`: s3).
- fetch back: one daemon writing through to the copy's prefix with a disk budget of 1 MiB restores the
  copy (already there: nothing is sent), evicts its blobs once it is idle, then four readers (one per
  rank file, as four ranks loading it) read every rank file through the mount, each read fetching its
  blob back from S3; against boto3 downloading the copy once.

    $PTCFS_PYTHON bench/bench_s3.py [--mb 2000] [--json FILE]
"""

import os
import shutil
import threading
import time

from bench_lib import gbps, ptcgen, row, standalone  # noqa: E402  (also puts tests/ on the path)
from cluster_util import Cluster  # noqa: E402
from ptcfs_harness import Daemon  # noqa: E402
from s3_util import S3Server, credentials_file  # noqa: E402

import boto3.s3.transfer  # noqa: E402

SECTION = "s3"
BUCKET = "bench"
THREADS = 8
NEW_LAYOUT = "tp=1,pp=2,dp=3"


def s3_bytes(c: Cluster, key: str) -> int:
    """What the cluster's daemons sent to (bytes_sent) or received from (bytes_received) S3 so far."""
    return sum(d.cli_json("status", "--json").get("s3", {}).get(key, 0) for d in c.nodes)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def boto_download(s3: S3Server, keys: list, out: str) -> None:
    c = s3.client()
    cfg = boto3.s3.transfer.TransferConfig(max_concurrency=THREADS, multipart_chunksize=16 << 20)
    os.makedirs(out, exist_ok=True)
    for k in keys:
        c.download_file(BUCKET, k, os.path.join(out, k.replace("/", "_")), Config=cfg)


def read_whole(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def fetch_back(raw: dict, root: str, flags: list, rank_files: list) -> None:
    d = Daemon(os.path.join(root, "e"),
               extra_flags=flags + ["--s3-durable", f"s3://{BUCKET}/tier", "--disk-budget-mib", "1"])
    d.start()
    try:
        d.cli("import", f"s3://{BUCKET}/tier/bench/1", "--job", "bench", "--step", "1")
        deadline = time.monotonic() + 300
        while d.cli_json("ls", "bench/1", "--json")["durable"].get("bytes_evicted", 0) < 0.99 * raw["bytes"]:
            assert time.monotonic() < deadline, d.log_tail()
            time.sleep(0.2)
        before = d.cli_json("status", "--json")["s3"]["bytes_received"]
        readers = [threading.Thread(target=read_whole, args=(os.path.join(d.step_dir("bench", "1"), n),))
                   for n in rank_files]
        t0 = time.perf_counter()
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        raw["fetch_back_s"] = time.perf_counter() - t0
        raw["fetch_back_received"] = d.cli_json("status", "--json")["s3"]["bytes_received"] - before
        assert d.log_tail(100000).count("fetched back evicted blob") == len(rank_files)
    finally:
        d.stop(cleanup_mount=True)


def run(mb: float, root: str) -> tuple:
    hidden = ptcgen.hidden_for_target("gpt", 2, 2, 1, 8, 32000, int(mb * 1e6))
    ptc = ptcgen.make_ptc("gpt", 2, 2, 1, 8, hidden, 32000)
    ck = os.path.join(root, "ck")
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    size = summary["bytes"]
    print(f"checkpoint: {size / 1e6:.0f} MB, hidden {hidden}, tp=2,pp=2", flush=True)
    s3 = S3Server(os.path.join(root, "s3"))
    s3.start()
    raw = {"bytes": size}
    try:
        s3.bucket(BUCKET)
        creds = credentials_file(os.path.join(root, "aws"))
        flags = ["--s3-endpoint", s3.endpoint, "--s3-credentials", creds]
        # The baseline upload: the same rank files, from one process.
        c = s3.client()
        cfg = boto3.s3.transfer.TransferConfig(max_concurrency=THREADS, multipart_chunksize=64 << 20)
        rank_files = sorted(n for n in os.listdir(ck) if n.endswith(".safetensors"))
        t0 = time.perf_counter()
        for n in rank_files:
            c.upload_file(os.path.join(ck, n), BUCKET, f"boto/{n}", Config=cfg)
        raw["boto_upload_s"] = time.perf_counter() - t0
        # Write-through on a cluster.
        with Cluster(os.path.join(root, "a"), 3, extra_flags=flags + ["--s3-durable", f"s3://{BUCKET}/tier"]) as a:
            a[0].cli("import", ck, "--job", "bench", "--step", "1")
            t0 = time.perf_counter()
            while not all(d.cli_json("ls", "bench/1", "--json")["durable"]["state"] == "durable" for d in a.nodes):
                time.sleep(0.05)
            raw["write_through_s"] = time.perf_counter() - t0
            raw["uploaded_by_node"] = [d.cli_json("ls", "bench/1", "--json")["durable"]["bytes_total"]
                                       for d in a.nodes]
            raw["write_through_sent"] = s3_bytes(a, "bytes_sent")
        keys = [f"tier/bench/1/{n}" for n in rank_files]
        copy_bytes = sum(c.head_object(Bucket=BUCKET, Key=k)["ContentLength"] for k in keys)
        raw["copy_bytes"] = copy_bytes
        # Restore into a new cluster.
        with Cluster(os.path.join(root, "b"), 3, extra_flags=flags) as b:
            raw["restore_s"] = timed(
                lambda: b[0].cli("import", f"s3://{BUCKET}/tier/bench/1", "--job", "bench", "--step", "1"))
            raw["restore_received"] = s3_bytes(b, "bytes_received")
            # At a new layout: each node reads its shards of the copy's layout, then the nodes pull the
            # minimum the new one lacks from each other.
            t0 = time.perf_counter()
            r = b[1].cli_json("import", f"s3://{BUCKET}/tier/bench/1", "--job", "bench", "--step", "2", "--to",
                              NEW_LAYOUT, "--json")
            raw["restore_to_s"] = time.perf_counter() - t0
            raw["restore_to_received"] = s3_bytes(b, "bytes_received") - raw["restore_received"]
            raw["restore_to_moved"] = r["repartition"]["bytes_moved"]
            raw["restore_to_min"] = r["repartition"]["bytes_min"]
        fetch_back(raw, root, flags, rank_files)
        raw["boto_download_s"] = timed(lambda: boto_download(s3, keys, os.path.join(root, "dl")))
        shutil.rmtree(os.path.join(root, "dl"), ignore_errors=True)

        def everyone():
            ts = [threading.Thread(target=boto_download, args=(s3, keys, os.path.join(root, f"dl{i}")))
                  for i in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        raw["every_node_s"] = timed(everyone)
    finally:
        s3.close()
    print(raw, flush=True)
    up, wt = raw["boto_upload_s"], raw["write_through_s"]
    rs, bd, ev = raw["restore_s"], raw["boto_download_s"], raw["every_node_s"]
    rows = [
        row(SECTION, "write-through of a committed step (3 nodes) vs boto3 uploading its files", gbps(copy_bytes, wt),
            gbps(copy_bytes, up), up / wt, ">= 0.5", up / wt >= 0.5),
        row(SECTION, "restore into a new 3-node cluster vs boto3 downloading the copy once", gbps(copy_bytes, rs),
            gbps(copy_bytes, bd), bd / rs, ">= 0.5", bd / rs >= 0.5),
        row(SECTION, "restore vs every node downloading the whole copy", f"{rs:.2f} s", f"{ev:.2f} s", ev / rs, "> 1",
            ev / rs > 1),
        row(SECTION, f"restore at a new layout ({NEW_LAYOUT}) vs boto3 downloading the copy once",
            gbps(copy_bytes, raw["restore_to_s"]), gbps(copy_bytes, bd), bd / raw["restore_to_s"], ">= 0.5",
            bd / raw["restore_to_s"] >= 0.5),
        row(SECTION, "restore at a new layout: bytes from S3 / the copy's rank files",
            f"{raw['restore_to_received'] / 1e6:.0f} MB", f"{copy_bytes / 1e6:.0f} MB",
            raw["restore_to_received"] / copy_bytes, "~1.00", raw["restore_to_received"] / copy_bytes < 1.01),
        row(SECTION, "restore at a new layout: bytes moved between nodes / the plan's minimum",
            f"{raw['restore_to_moved'] / 1e6:.0f} MB", f"{raw['restore_to_min'] / 1e6:.0f} MB",
            raw["restore_to_moved"] / max(raw["restore_to_min"], 1), "1.00",
            raw["restore_to_moved"] == raw["restore_to_min"]),
        row(SECTION, "fetch back of an evicted step (4 readers through the mount) vs boto3 downloading the copy once",
            gbps(copy_bytes, raw["fetch_back_s"]), gbps(copy_bytes, bd), bd / raw["fetch_back_s"], ">= 0.5",
            bd / raw["fetch_back_s"] >= 0.5),
        row(SECTION, "fetch back: bytes from S3 / the copy's rank files", f"{raw['fetch_back_received'] / 1e6:.0f} MB",
            f"{copy_bytes / 1e6:.0f} MB", raw["fetch_back_received"] / copy_bytes, "~1.00",
            raw["fetch_back_received"] / copy_bytes < 1.01),
        row(SECTION, "write-through: bytes sent to S3 / the copy's rank files", f"{raw['write_through_sent'] / 1e6:.0f} MB",
            f"{copy_bytes / 1e6:.0f} MB", raw["write_through_sent"] / copy_bytes, "~1.00",
            raw["write_through_sent"] / copy_bytes < 1.01),
        row(SECTION, "restore: bytes received from S3 / the copy's rank files", f"{raw['restore_received'] / 1e6:.0f} MB",
            f"{copy_bytes / 1e6:.0f} MB", raw["restore_received"] / copy_bytes, "~1.00",
            raw["restore_received"] / copy_bytes < 1.01),
    ]
    return rows, raw


def configure(ap):
    ap.add_argument("--mb", type=float, default=2000, help="checkpoint size in MB (default 2000)")


if __name__ == "__main__":
    raise SystemExit(standalone(__doc__, configure,
                                lambda a, root: run(a.mb, root)))
