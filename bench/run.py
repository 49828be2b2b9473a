#!/usr/bin/env python3
"""`make bench`: every benchmark of ptcfs against a baseline measured in the same run, as one
table (docs/BENCHMARKS.md "Budgets"), also written as JSON, plus a plot of re-sharding time against
model size. About 35 minutes on a 2-core machine (the soak and the chaos soak are 10 each); needs root (FUSE) and
the build.

    $PTCFS_PYTHON bench/run.py [--json bench/results.json] [--plot docs/repartition-vs-size.png]
                                  [--quick] [--only SECTION,...]

Sections: mount (reads, import, saves, 10,000 tensors, per-tensor saves of up to 100,000 files), repartition (single node, in process),
plan (1,024 GPUs, 100,000 tensors), planner, simulate (the allocation policies on a job trace, plot
docs/scheduling.png), formats (Hugging Face import and export), hf (from_pretrained from the mount, save_pretrained into it), torch (the re-sharding script users run today),
live (live reshard of a PTC layout), live_dtensor (a live DTensor mesh change vs DCP round trips through the mount and
on the local disk), elastic_llama (the torch 2.x example at length), many_tensors (a 100,000-tensor step repartitioned
20 times: memory and time per tensor), strided (cold reads of a shard
strided over its blob: time and bytes read from the disk),
cluster (three daemons), reconfig (end to end on 3 namespaced nodes with 2 Gbit/s links: ptcfs vs central torch vs
the limit, plot docs/reconfiguration.png), dcp_cluster (a 2 GB DCP checkpoint loaded at a new mesh on the same 3
nodes: ptcfs.dcp.prepare + stock dcp.load vs the folder copied to every node vs the limit), s3 (a 2 GB step written
through to a SeaweedFS S3 server by 3 daemons and restored into a new 3-node cluster, vs boto3), etcd, soak (32 readers for 10 minutes under changes), chaos (the seeded chaos soak of
tests/integration/chaos_util.py for 10 minutes: promises broken under faults). Ratios are baseline time / ptcfs time (above 1: ptcfs is faster),
except bytes_moved / bytes_min.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

from bench_lib import BUILD, REPO, print_rows, row, secs

SECTIONS = ["mount", "repartition", "plan", "planner", "simulate", "formats", "hf", "torch", "live", "live_dtensor",
            "elastic_llama", "many_tensors", "strided", "cluster", "reconfig", "dcp_cluster", "s3", "etcd", "soak", "chaos"]


def cpp_repartition(gib: float, root: str) -> tuple:
    out = os.path.join(root, "results.json")
    subprocess.run([os.path.join(BUILD, "bench", "ptcfs_bench_repartition"), "--gib", str(gib), "--dir", root,
                    "--json", out], check=True)
    with open(out) as f:
        raw = json.load(f)
    rows = []
    for sc in raw:
        name, r = sc["scenario"], sc["result"]
        par = lambda p: f"tp={p['tp']},pp={p['pp']}"  # noqa: E731
        what = f"{name} {par(r['from'])} -> {par(r['to'])}"
        ratio = sc["memcpy_s"] / sc["repartition_s"]
        rows.append(row("repartition", f"{what}: {sc['bytes'] / 2**30:.2f} GiB vs memcpy ({sc['threads']} threads)",
                        secs(sc["repartition_s"]), secs(sc["memcpy_s"]), ratio, "> 1", ratio > 1))
        for k, label, target in (("read_first_gib_s", "first read", 0.6), ("read_again_gib_s", "re-read", 0.9)):
            ratio = sc[k] / sc["tmpfs_gib_s"]
            rows.append(row("repartition", f"{name}: new views, {label} (1 MiB) vs tmpfs", f"{sc[k]:.2f} GiB/s",
                            f"{sc['tmpfs_gib_s']:.2f} GiB/s", ratio, f">= {target}", ratio >= target))
    return rows, raw


def cpp_plan(root: str) -> tuple:
    out = os.path.join(root, "results.json")
    subprocess.run([os.path.join(BUILD, "bench", "ptcfs_bench_plan"), "--json", out], check=True)
    with open(out) as f:
        raw = json.load(f)
    n = f"{raw['tensors']:,} tensors, {raw['gpus']:,} GPUs"
    rows = [row("plan", f"layouts of both configs, {n} (not in the plan times)", secs(raw["layouts_s"]), "", None,
                "", None)]
    for key, label, plan_bytes, rss in (("single_plan_s", "plan", "single_plan_bytes", "single_peak_heap_bytes"),
                                        ("cluster_plan_s", "cluster plan (128 nodes)", "cluster_plan_bytes",
                                         "cluster_peak_heap_bytes")):
        rows.append(row("plan", f"{label}, {n} vs the 1 s budget", secs(raw[key]), "1.000 s", 1.0 / raw[key], "> 1",
                        raw[key] < 1.0))
        rows.append(row("plan", f"{label}: peak heap while planning / plan size", f"{raw[rss] / 2**20:.0f} MiB",
                        f"{raw[plan_bytes] / 2**20:.0f} MiB", raw[rss] / raw[plan_bytes], "", None))
    return rows, raw


def cpp_planner(root: str) -> tuple:
    out = os.path.join(root, "results.json")
    subprocess.run([os.path.join(BUILD, "bench", "ptcfs_bench_planner"), "--json", out], check=True)
    with open(out) as f:
        raw = json.load(f)
    rows = [row("planner", f"plan, 1T GPT on {raw['plan_gpus']:,} GPUs ({raw['plan_valid']} configurations) vs the "
                "1 s budget", f"{raw['plan_s'] * 1e3:.3f} ms", "1.000 s", 1.0 / raw["plan_s"], "> 1",
                raw["plan_s"] < 1.0),
            row("planner", f"allocate, {raw['allocate_jobs']} jobs on {raw['allocate_gpus']:,} GPUs vs the 1 s budget",
                f"{raw['allocate_s'] * 1e3:.3f} ms", "1.000 s", 1.0 / raw["allocate_s"], "> 1",
                raw["allocate_s"] < 1.0)]
    return rows, raw


def makespan(root: str, limit_s: float) -> tuple:
    """allocate --policy makespan for 10 jobs on 32 GPUs (throughput curves of the shape
    50 g^0.8 samples/s, 1-9 x 10^5 samples each, fixed seed): GLPK's time and gap, and the
    schedule's makespan against the greedy list schedule it starts from."""
    import random
    rng = random.Random(7)
    jobs = [{"name": f"j{i}", "min_gpus": 1, "max_gpus": 32, "samples": rng.randint(1, 9) * 1e5,
             "throughput": {str(g): 50 * g ** 0.8 for g in (1, 2, 4, 8, 16, 32)}} for i in range(10)]
    path = os.path.join(root, "jobs.json")
    with open(path, "w") as f:
        json.dump({"jobs": jobs}, f)
    out = json.loads(subprocess.run([os.path.join(BUILD, "cli", "ptcfs"), "allocate", "--jobs", path, "--gpus", "32",
                                     "--policy", "makespan", "--time-limit", str(limit_s), "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    s = out["solver"]
    gap = "optimal" if s["optimal"] else ("gap unknown" if s["gap"] is None else f"gap {100 * s['gap']:.1f}%")
    rows = [row("planner", f"allocate --policy makespan, 10 jobs on 32 GPUs: {s['name']} time ({gap}, "
                f"{s['slots']} slots, {s['variables']:,} variables)", secs(s["seconds"]), f"{limit_s:.0f} s limit",
                None, "", None),
            row("planner", "makespan of its schedule vs the greedy list schedule", f"{out['makespan_s']:.0f} s",
                f"{out['greedy_makespan_s']:.0f} s", out["greedy_makespan_s"] / out["makespan_s"], ">= 1",
                out["makespan_s"] <= out["greedy_makespan_s"])]
    return rows, out


def machine() -> dict:
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "results.json"), metavar="FILE")
    ap.add_argument("--plot", default=os.path.join(REPO, "docs", "repartition-vs-size.png"), metavar="PNG")
    ap.add_argument("--reconfig-plot", default=os.path.join(REPO, "docs", "reconfiguration.png"), metavar="PNG")
    ap.add_argument("--simulate-plot", default=os.path.join(REPO, "docs", "scheduling.png"), metavar="PNG")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run, comma-separated")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run, not for quoting)")
    a = ap.parse_args()
    if a.quick:  # a smoke run leaves the quoted results alone
        a.json = a.json.replace("results.json", "results-quick.json")
        a.plot = os.path.join(REPO, "bench", "repartition-vs-size-quick.png")
        a.reconfig_plot = os.path.join(REPO, "bench", "reconfiguration-quick.png")
        a.simulate_plot = os.path.join(REPO, "bench", "scheduling-quick.png")
    only = a.only.split(",")
    for s in only:
        if s not in SECTIONS:
            ap.error(f"unknown section '{s}' (one of {', '.join(SECTIONS)})")
    if os.geteuid() != 0:
        ap.error("needs root (the benchmarks mount FUSE)")

    import bench_cluster
    import bench_chaos
    import bench_dcp_cluster
    import bench_s3
    import bench_etcd
    import bench_formats
    import bench_hf
    import bench_live
    import bench_live_dtensor
    import bench_elastic_llama
    import bench_many_tensors
    import bench_strided
    import bench_reconfig
    import bench_soak
    import bench_mount
    import bench_torch
    import simulate

    rows, raw = [], {"machine": machine()}
    root = tempfile.mkdtemp(prefix="ptcfs-bench-", dir="/var/tmp")
    for s in only:
        os.makedirs(os.path.join(root, s))
    try:
        if "mount" in only:
            print("== mount: reads, import, 10,000 tensors", flush=True)
            r, raw["mount"] = bench_mount.run(300 if a.quick else 1200, os.path.join(root, "mount"), False,
                                              (5000, 20000) if a.quick else (5000, 20000, 100000))
            rows += r
        if "repartition" in only:
            print("== repartition: single node, in process", flush=True)
            r, raw["repartition"] = cpp_repartition(0.25 if a.quick else 1.0, os.path.join(root, "repartition"))
            rows += r
        if "plan" in only:
            print("== plan: 1,024 GPUs, 100,000 tensors", flush=True)
            r, raw["plan"] = cpp_plan(os.path.join(root, "plan"))
            rows += r
        if "planner" in only:
            print("== planner: plan on 4,096 GPUs, allocate 100 jobs on 1,024", flush=True)
            r, raw["planner"] = cpp_planner(os.path.join(root, "planner"))
            rows += r
            print("== planner: allocate --policy makespan, 10 jobs on 32 GPUs", flush=True)
            r, raw["makespan"] = makespan(os.path.join(root, "planner"), 2 if a.quick else 10)
            rows += r
        if "formats" in only:
            print("== formats: import --format hf and export --format hf", flush=True)
            r, raw["formats"] = bench_formats.run(300 if a.quick else 2000, os.path.join(root, "formats"))
            rows += r
        if "hf" in only:
            print("== hf: from_pretrained from the mount and save_pretrained into it", flush=True)
            r, raw["hf"] = bench_hf.run(200 if a.quick else 600, os.path.join(root, "hf"))
            rows += r
        if "torch" in only:
            print("== torch: the re-sharding script users run today", flush=True)
            sizes = [0.1, 0.2] if a.quick else [0.25, 0.5, 1.0, 2.0]
            r, raw["torch"] = bench_torch.run(sizes, os.path.join(root, "torch"), a.plot)
            rows += r
        if "live" in only:
            print("== live: live reshard between CPU processes vs save + repartition + load", flush=True)
            r, raw["live"] = bench_live.run(0.2 if a.quick else 2.0, os.path.join(root, "live"))
            rows += r
        if "live_dtensor" in only:
            print("== live_dtensor: a live DTensor mesh change vs DCP round trips (mount, local disk)", flush=True)
            r, raw["live_dtensor"] = bench_live_dtensor.run(0.2 if a.quick else 2.0, os.path.join(root, "live_dtensor"))
            rows += r
        if "elastic_llama" in only:
            print("== elastic_llama: the torch 2.x example through 8 mesh changes against a run without", flush=True)
            r, raw["elastic_llama"] = bench_elastic_llama.run(2 if a.quick else 6, os.path.join(root, "elastic_llama"))
            rows += r
        if "many_tensors" in only:
            print("== many_tensors: a 100,000-tensor step repartitioned back and forth", flush=True)
            r, raw["many_tensors"] = bench_many_tensors.run(20000 if a.quick else 100000, 4 if a.quick else 20,
                                                            os.path.join(root, "many_tensors"))
            rows += r
        if "strided" in only:
            print("== strided: cold reads of a shard strided over its blob, vs a plain file", flush=True)
            r, raw["strided"] = bench_strided.run(8192 if a.quick else 16384, 3, os.path.join(root, "strided"))
            rows += r
        if "cluster" in only:
            print("== cluster: three daemons on loopback", flush=True)
            r, raw["cluster"] = bench_cluster.run(200 if a.quick else 1100, 1 if a.quick else 2,
                                                  os.path.join(root, "cluster"))
            rows += r
        if "reconfig" in only:
            print("== reconfig: end to end on 3 namespaced nodes (2 Gbit/s links): ptcfs vs central torch vs the limit",
                  flush=True)
            r, raw["reconfig"] = bench_reconfig.run(0.2 if a.quick else 2.0, "2gbit", 1, os.path.join(root, "reconfig"),
                                                    plot_path=a.reconfig_plot)
            rows += r
        if "dcp_cluster" in only:
            print("== dcp_cluster: a DCP checkpoint loaded at a new mesh on 3 namespaced nodes (2 Gbit/s links): "
                  "ptcfs.dcp.prepare + stock dcp.load vs the folder copied to every node vs the limit", flush=True)
            r, raw["dcp_cluster"] = bench_dcp_cluster.run(0.2 if a.quick else 2.0, "2gbit",
                                                          os.path.join(root, "dcp_cluster"),
                                                          "" if a.quick else os.path.join(REPO, "docs", "dcp-cluster.png"))
            rows += r
        if "s3" in only:
            print("== s3: the write-through tier and a restore into a new 3-node cluster vs boto3 on the same S3 server",
                  flush=True)
            r, raw["s3"] = bench_s3.run(300 if a.quick else 2000, os.path.join(root, "s3"))
            rows += r
        if "simulate" in only:
            print("== simulate: the allocation policies on a job trace (ptcfs allocate, ptcfs plan's cost model)",
                  flush=True)
            r, raw["simulate"] = simulate.run(256, 20 if a.quick else 120, 1, 24, 4 if a.quick else 12, 30, 0.5,
                                              3 if a.quick else 10, os.path.join(root, "simulate"), a.simulate_plot)
            rows += r
        if "etcd" in only:
            print("== etcd: commit latency against static mode, time to join", flush=True)
            r, raw["etcd"] = bench_etcd.run(10 if a.quick else 20, 3 if a.quick else 5, os.path.join(root, "etcd"))
            rows += r
        if "soak" in only:
            print("== soak: 32 readers checking every byte under repartitions, saves, progress", flush=True)
            r, raw["soak"] = bench_soak.run(30 if a.quick else 600, os.path.join(root, "soak"))
            rows += r
        if "chaos" in only:
            print("== chaos: random changes on 3 daemons and 3 etcd members under SIGKILL, SIGSTOP, etcd kills",
                  flush=True)
            r, raw["chaos"] = bench_chaos.run(60 if a.quick else 600, 1, os.path.join(root, "chaos"))
            rows += r
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_rows(rows)
    raw["rows"] = rows
    with open(a.json, "w") as f:
        json.dump(raw, f, indent=2)
    print(f"\nwritten: {a.json}" + (f", {a.plot}" if "torch" in only else "") +
          (f", {a.reconfig_plot}" if "reconfig" in only else "") +
          (f", {a.simulate_plot}" if "simulate" in only else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
