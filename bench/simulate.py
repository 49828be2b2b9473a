#!/usr/bin/env python3
"""A trace-driven simulation of the allocation policies on a shared GPU cluster (issue 29 part 4),
with every decision made by `ptcfs allocate` and every throughput by `ptcfs plan`'s cost model.

Two experiments, as the seed papers make theirs:

- online (Saxena et al. 2020): jobs arrive over time (Poisson); each is a GPT of one of four
  sizes with a range of global batches it trains equally well with. Policies, re-run at every
  arrival and completion:
    batch-aware  `allocate --policy throughput` choosing GPUs and global batch per job (the paper's);
    gpus-only    the same dynamic program, each job at its smallest batch (the paper's baseline:
                 scales GPUs, not the batch);
    static       first come, first served, each job on a fixed count (one node, or its smallest
                 count that fits) at its smallest batch, never changed.
  Reported: jobs completed within the window (until the last arrival), average completion time
  (arrival to end), makespan, reconfigurations.
- batch (Saturn, Nagrecha and Kumar 2023): the same kind of jobs all queued at time 0. Policies:
    makespan     `allocate --policy makespan` (selection, allocation and schedule as one MILP);
    practice     each job on a fixed count as users pick it: an equal share of the cluster (the
                 largest power of two up to GPUs / jobs), first come, first served;
    batch-aware  the online policy above on the same queue.
  Reported: makespan.
- scale: `allocate` of 1,000 jobs on 10,000 GPUs (budget 1 s), and the makespan program for 100
  jobs within its time limit, with its gap to the bound.

Each change of a running job's GPUs or batch pauses it: a restart (--restart-s, an assumption:
processes, NCCL, compilation) plus its training state (16 bytes per parameter: FP16 weights, FP32
master weights and two Adam moments) moved at the cluster's inter-node rate times the share of
the link ptcfs reaches (--link-share: bench_reconfig measures it; the whole state is charged,
though a repartition moves only what each GPU lacks). Starting a job costs the restart alone.

    $PTCFS_PYTHON bench/simulate.py [--gpus 256] [--jobs 120] [--seed 1] [--hours 24] [--batch-jobs 12]
                                       [--restart-s 30] [--link-share 0.5] [--batches 16,32,64] [--plot PNG]
                                       [--json FILE]
"""

import json
import math
import os
import random
import subprocess
import sys
import time

from bench_lib import BUILD, row, standalone

SECTION = "simulate"
PTCFS = os.path.join(BUILD, "cli", "ptcfs")
GPU = {"memory_gb": 80, "tflops": 312, "per_node": 8, "intra_node_gbps": 2400, "inter_node_gbps": 200}
# GPT sizes of Brown et al. 2020 (Table 2.1): name -> (layers, hidden, heads); ffn 4h, vocabulary 51,200.
SIZES = {"gpt-350m": (24, 1024, 16), "gpt-1.3b": (24, 2048, 16), "gpt-2.7b": (32, 2560, 32),
         "gpt-6.7b": (32, 4096, 32)}
BATCHES = [16, 32, 64]  # a job's smallest global batch; it accepts B, 2B and 4B


def model(size: str, batch: int) -> dict:
    layers, hidden, heads = SIZES[size]
    return {"layers": layers, "hidden": hidden, "heads": heads, "ffn": 4 * hidden, "vocab": 51200, "seq": 2048,
            "global_batch": batch, "gpu": GPU}


def params(size: str) -> int:
    layers, hidden, _ = SIZES[size]
    return 12 * layers * hidden * hidden + 51200 * hidden


class Curves:
    """samples/s of each (size, GPU count, batch), from `ptcfs plan --top 1 --json` (0: no
    configuration fits or divides the batch), asked once each."""

    def __init__(self, tmp: str):
        self.tmp, self.cache, self.calls = tmp, {}, 0

    def rate(self, size: str, gpus: int, batch: int) -> float:
        key = (size, gpus, batch)
        if key not in self.cache:
            path = os.path.join(self.tmp, "model.json")
            with open(path, "w") as f:
                json.dump(model(size, batch), f)
            r = subprocess.run([PTCFS, "plan", "--model", path, "--gpus", str(gpus), "--top", "1", "--json"],
                               capture_output=True, text=True)
            self.calls += 1
            best = json.loads(r.stdout) if r.returncode == 0 else []
            self.cache[key] = batch / best[0]["step_seconds"] if best else 0.0
        return self.cache[key]


class Job:
    def __init__(self, name: str, arrival: float, size: str, batch0: int, counts: list, samples: float):
        self.name, self.arrival, self.size, self.batch0 = name, arrival, size, batch0
        self.batches = [batch0, 2 * batch0, 4 * batch0]
        self.counts, self.samples = counts, samples  # usable GPU counts (powers of two), work in samples
        self.min_gpus, self.max_gpus = counts[0], counts[-1]


def make_jobs(curves: Curves, n: int, gpus: int, seed: int, mean_gap_s: float, at_zero: bool) -> list:
    """n jobs: size and smallest batch uniform, work lognormal around 2 hours on one node at the
    smallest batch (0.25-16 h), arrivals Poisson (or all at 0)."""
    rng = random.Random(seed)
    counts_all = [1 << k for k in range(int(math.log2(gpus)) + 1)]
    jobs, t = [], 0.0
    for i in range(n):
        size, batch0 = rng.choice(sorted(SIZES)), rng.choice(BATCHES)
        counts = [g for g in counts_all if curves.rate(size, g, batch0) > 0]
        if not counts:
            continue
        node = max(g for g in counts if g <= max(8, counts[0]))
        hours = min(16.0, max(0.25, math.exp(rng.gauss(math.log(2.0), 1.0))))
        samples = curves.rate(size, node, batch0) * hours * 3600
        if not at_zero:
            t += rng.expovariate(1.0 / mean_gap_s)
        jobs.append(Job(f"j{i:03d}-{size}", 0.0 if at_zero else t, size, batch0, counts, samples))
    return jobs


def allocate(jobs: list, curves: Curves, gpus: int, tmp: str, with_batch: bool, policy: str = "throughput",
             time_limit: float = 10, horizon_s: float = 0, pause=None, penalty: float = 0) -> dict:
    """`ptcfs allocate` of `jobs` (in arrival order): the JSON of its answer. Each job's curve is
    in units of its own speed on its smallest count at its smallest batch (samples/s of different
    models do not add up: a small model's would outweigh every large one's), so the dynamic
    program maximises the jobs' summed speed-up; the makespan program gets samples/s, with
    which its run times are samples / rate. Moves weighed: with horizon_s, a running job's entry
    gives `current` and `move_seconds` (pause(job)) and allocate gets --horizon; with `penalty`
    (Pollux's, emulated here), a running job's other options are scaled by 1 - penalty."""
    spec = []
    for j in jobs:
        unit = 1.0 if policy == "makespan" else curves.rate(j.size, j.min_gpus, j.batch0)
        now = getattr(j, "alloc", (0, 0))
        f = 1.0 - penalty if now[0] else 1.0

        def value(g, b):
            return curves.rate(j.size, g, b) / unit * (1.0 if (g, b) == now else f)
        if with_batch:
            tput = {str(g): {str(b): value(g, b) for b in j.batches if curves.rate(j.size, g, b) > 0}
                    for g in j.counts}
            spec.append({"name": j.name, "min_gpus": j.min_gpus, "max_gpus": j.max_gpus, "batch": j.batches,
                         "throughput": {g: t for g, t in tput.items() if t}})
        else:
            spec.append({"name": j.name, "min_gpus": j.min_gpus, "max_gpus": j.max_gpus,
                         "throughput": {str(g): value(g, j.batch0) for g in j.counts}})
        if policy == "makespan":
            spec[-1]["samples"] = getattr(j, "remaining", j.samples)  # what is left of a running job
        if horizon_s and now[0]:
            spec[-1]["current"] = {"gpus": now[0], **({"global_batch": now[1]} if with_batch else {})}
            spec[-1]["move_seconds"] = pause(j)
    path = os.path.join(tmp, "jobs.json")
    with open(path, "w") as f:
        json.dump({"jobs": spec}, f)
    cmd = [PTCFS, "allocate", "--jobs", path, "--gpus", str(gpus), "--policy", policy, "--json"]
    if policy == "makespan":
        cmd += ["--time-limit", str(time_limit)]
    if horizon_s:
        cmd += ["--horizon", str(horizon_s)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"simulate: {' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


class Run:
    """One policy over one list of jobs, event by event."""

    def __init__(self, jobs: list, curves: Curves, gpus: int, tmp: str, policy: str, restart_s: float,
                 link_share: float, static_gpus: int = 8, horizon_s: float = 0, restart_penalty: float = 0):
        self.jobs = [Job(j.name, j.arrival, j.size, j.batch0, j.counts, j.samples) for j in jobs]
        self.curves, self.gpus, self.tmp, self.policy = curves, gpus, tmp, policy
        # Moves weighed (0: not): `allocate --horizon` (a running job's other options count at
        # 1 - pause / horizon_s of their rate: the samples its pause costs over that horizon), or
        # Pollux's flat penalty on a job whose allocation changes (1 - restart_penalty).
        self.horizon_s, self.restart_penalty = horizon_s, restart_penalty
        self.restart_s, self.link_bps = restart_s, GPU["inter_node_gbps"] / 8 * 1e9 * link_share
        self.static_gpus = static_gpus  # what the static policy gives a job (at least its smallest count)
        self.reconfigs, self.pause_s, self.decisions = 0, 0.0, 0
        for j in self.jobs:
            j.remaining, j.alloc, j.resume, j.end = j.samples, (0, 0), 0.0, None

    def decide(self, active: list) -> dict:
        """name -> (gpus, batch) for the active jobs."""
        if self.policy == "static":
            out, free = {}, self.gpus - sum(j.alloc[0] for j in active)
            for j in active:
                if j.alloc[0]:
                    out[j.name] = j.alloc
                    continue
                want = max(g for g in j.counts if g <= max(self.static_gpus, j.min_gpus))
                if want > free:  # first come, first served: the jobs after it wait too
                    break
                out[j.name], free = (want, j.batch0), free - want
            return out
        self.decisions += 1
        a = allocate(active, self.curves, self.gpus, self.tmp, self.policy == "batch-aware",
                     horizon_s=self.horizon_s, pause=self.pause, penalty=self.restart_penalty)
        by = {x["name"]: x for x in a["jobs"]}
        return {j.name: (by[j.name]["gpus"], by[j.name].get("global_batch") or j.batch0) for j in active
                if by[j.name]["gpus"]}

    def pause(self, j: Job) -> float:
        """What a change of a running job's GPUs or batch costs it: a restart and its state moved."""
        return self.restart_s + 16 * params(j.size) / self.link_bps

    def rate(self, j: Job) -> float:
        return self.curves.rate(j.size, *j.alloc) if j.alloc[0] else 0.0

    def go(self) -> dict:
        pending = sorted(self.jobs, key=lambda j: j.arrival)
        active, t, nxt = [], 0.0, 0
        while nxt < len(pending) or active:
            finish = min((max(t, j.resume) + j.remaining / self.rate(j) for j in active if j.alloc[0]),
                         default=math.inf)
            arrive = pending[nxt].arrival if nxt < len(pending) else math.inf
            t_next = min(finish, arrive)
            if t_next == math.inf:
                raise SystemExit(f"simulate: {self.policy}: jobs wait forever: {[j.name for j in active]}")
            for j in active:
                if j.alloc[0]:
                    j.remaining -= self.rate(j) * max(0.0, t_next - max(t, j.resume))
            t = t_next
            for j in active:
                if j.remaining <= j.samples * 1e-9:
                    j.end = t
            active = [j for j in active if j.end is None]
            while nxt < len(pending) and pending[nxt].arrival <= t:
                active.append(pending[nxt])
                nxt += 1
            if not active:
                continue
            new = self.decide(active)
            for j in active:
                a = new.get(j.name, (0, 0))
                if a == j.alloc:
                    continue
                if a[0] and j.alloc[0]:  # a running job changes: restart and move its state
                    pause = self.pause(j)
                    self.reconfigs += 1
                    self.pause_s += pause
                    j.resume = t + pause
                elif a[0]:  # starts (or comes back from the queue)
                    j.resume = t + self.restart_s
                j.alloc = a
        return {"policy": self.policy, "jobs": len(self.jobs), "makespan_s": max(j.end for j in self.jobs),
                "jct_s": [j.end - j.arrival for j in self.jobs], "ends_s": [j.end for j in self.jobs],
                "reconfigs": self.reconfigs, "pause_s": self.pause_s, "decisions": self.decisions}


def summary(res: dict, window_s: float) -> dict:
    res["avg_jct_s"] = sum(res["jct_s"]) / len(res["jct_s"])
    res["completed_in_window"] = sum(1 for e in res["ends_s"] if e <= window_s)
    return res


def scale(tmp: str, time_limit: float) -> tuple:
    """The allocator at the issue's sizes, on synthetic curves (rate = base x gpus^0.9, a tenth more
    per doubling of the batch): `allocate` of 1,000 jobs (11 counts x 3 batches each) on 10,000
    GPUs, and the makespan program for 100 jobs (7 counts each) on 256 GPUs, wall time of the CLI
    (reading, solving, printing) and the program's gap to its bound."""
    rng = random.Random(7)
    jobs = []
    for i in range(1000):
        b0 = rng.choice(BATCHES)
        base = rng.uniform(10, 1000)
        jobs.append({"name": f"j{i}", "min_gpus": 1, "max_gpus": 1024, "batch": [b0, 2 * b0, 4 * b0],
                     "throughput": {str(1 << k): {str(b0 << m): base * (1 << k) ** 0.9 * (1 + 0.1 * m)
                                                  for m in range(3)} for k in range(11)}})
    big = os.path.join(tmp, "jobs1000.json")
    with open(big, "w") as f:
        json.dump({"jobs": jobs}, f)
    t0 = time.perf_counter()
    subprocess.run([PTCFS, "allocate", "--jobs", big, "--gpus", "10000", "--json"], check=True, capture_output=True)
    alloc_s = time.perf_counter() - t0
    jobs = []
    for i in range(100):
        base = rng.uniform(10, 1000)
        jobs.append({"name": f"j{i}", "min_gpus": 1, "max_gpus": 64,
                     "throughput": {str(1 << k): base * (1 << k) ** 0.85 for k in range(7)},
                     "samples": base * 8 * rng.uniform(0.5, 8) * 3600})
    mk = os.path.join(tmp, "jobs100.json")
    with open(mk, "w") as f:
        json.dump({"jobs": jobs}, f)
    t0 = time.perf_counter()
    r = subprocess.run([PTCFS, "allocate", "--jobs", mk, "--gpus", "256", "--policy", "makespan", "--time-limit",
                        str(time_limit), "--json"], check=True, capture_output=True, text=True)
    ms_s = time.perf_counter() - t0
    sol = json.loads(r.stdout)
    print(f"  allocate, 1,000 jobs on 10,000 GPUs: {alloc_s:.2f} s; makespan program, 100 jobs on 256 GPUs: "
          f"{ms_s:.1f} s (limit {time_limit:g} s), gap {sol['solver']['gap']}", flush=True)
    gap = sol["solver"]["gap"]
    rows = [row(SECTION, "allocate (throughput), 1,000 jobs x 33 options on 10,000 GPUs, CLI wall time",
                f"{alloc_s:.2f} s", "1 s budget", 1.0 / alloc_s, "< 1 s", alloc_s < 1.0),
            row(SECTION, f"allocate --policy makespan, 100 jobs on 256 GPUs: wall time vs its limit (gap to bound "
                         f"{'none proven' if gap is None else f'{gap:.0%}'})",
                f"{ms_s:.1f} s", f"{time_limit:g} s", time_limit / ms_s, "", None)]
    return rows, {"allocate_1000_s": alloc_s, "makespan_100_s": ms_s, "makespan_100_solver": sol["solver"],
                  "makespan_100_s_of_schedule": sol["makespan_s"], "makespan_100_greedy_s": sol["greedy_makespan_s"]}


def plot(online: list, batch: list, path: str, title: str) -> None:
    data = "".join(f'"{r["policy"]}" {r["avg_jct_s"] / 3600:.3f} {r["completed_in_window"]}\n' for r in online)
    bdata = "".join(f'"{r["policy"]}" {r["makespan_s"] / 3600:.3f}\n' for r in batch)
    script = f"""set terminal pngcairo size 1200,420 font ",10"
set output "{path}"
set multiplot layout 1,3 title "{title}"
set style fill solid 0.8 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set title "online: average completion time (h)"
plot '-' using 0:2:xtic(1) with boxes notitle lc rgb "#4477aa"
{data}e
set title "online: jobs completed within the window"
plot '-' using 0:3:xtic(1) with boxes notitle lc rgb "#228833"
{data}e
set title "batch queue: makespan (h)"
plot '-' using 0:2:xtic(1) with boxes notitle lc rgb "#cc6677"
{bdata}e
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def run(gpus: int, njobs: int, seed: int, hours: float, batch_jobs: int, restart_s: float, link_share: float,
        time_limit: float, root: str, plot_path: str = "") -> tuple:
    tmp = root
    curves = Curves(tmp)
    t0 = time.perf_counter()
    # Arrivals spread over `hours`: the window is until the last arrival.
    jobs = make_jobs(curves, njobs, gpus, seed, hours * 3600 / njobs, at_zero=False)
    window = max(j.arrival for j in jobs)
    online = []
    for policy in ("batch-aware", "gpus-only", "static"):
        r = summary(Run(jobs, curves, gpus, tmp, policy, restart_s, link_share).go(), window)
        online.append(r)
        print(f"  online, {policy}: {r['completed_in_window']} of {len(jobs)} jobs done within {window / 3600:.1f} h,"
              f" average completion {r['avg_jct_s'] / 3600:.2f} h, makespan {r['makespan_s'] / 3600:.1f} h,"
              f" {r['reconfigs']} reconfigurations ({r['pause_s'] / 3600:.2f} GPU-job hours paused)", flush=True)
    # batch-aware with its moves weighed (allocate --horizon: the trace's mean time between
    # arrivals, what an operator knows of the queue), and with Pollux's flat penalty, at the moves'
    # costs above and at costly ones (a restart of 5 minutes, the state at a tenth of the link).
    gap = hours * 3600 / njobs
    weighed = []
    for rs, ls in ((restart_s, link_share), (300.0, 0.1)):
        costs = f"restarts of {rs:g} s, state at {ls:g} of the link"
        base = online[0] if rs == restart_s and ls == link_share else None
        for name, h, pen in (("batch-aware", 0.0, 0.0), (f"batch-aware, moves weighed over {gap:.0f} s", gap, 0.0),
                             ("batch-aware, Pollux's restart penalty 0.1", 0.0, 0.1)):
            if base and not h and not pen:
                r = base
            else:
                r = summary(Run(jobs, curves, gpus, tmp, "batch-aware", rs, ls, horizon_s=h, restart_penalty=pen).go(),
                            window)
            r = {**r, "policy": name, "costs": costs, "restart_s": rs, "link_share": ls}
            weighed.append(r)
            print(f"  online, {costs}, {name}: {r['completed_in_window']} done, average completion "
                  f"{r['avg_jct_s'] / 3600:.3f} h, {r['reconfigs']} reconfigurations "
                  f"({r['pause_s'] / 3600:.1f} h paused)", flush=True)

    queue = make_jobs(curves, batch_jobs, gpus, seed + 1, 0, at_zero=True)
    batch = []
    ms = allocate(queue, curves, gpus, tmp, False, "makespan", time_limit)
    batch.append({"policy": "makespan", "makespan_s": ms["makespan_s"], "greedy_makespan_s": ms["greedy_makespan_s"],
                  "solver": ms["solver"]})
    # Practice: an equal share of the cluster each (a power of two), first come, first served.
    share = 1 << int(math.log2(max(1, gpus // len(queue))))
    for policy, name in (("static", "practice"), ("batch-aware", "batch-aware")):
        r = Run(queue, curves, gpus, tmp, policy, 0.0, link_share, share).go()
        r["policy"] = name
        batch.append(r)
    for r in batch:
        print(f"  batch of {len(queue)}, {r['policy']}: makespan {r['makespan_s'] / 3600:.2f} h", flush=True)
    took = time.perf_counter() - t0
    print(f"  ({curves.calls} plan calls, {sum(r.get('decisions', 0) for r in online)} allocate calls, {took:.1f} s)",
          flush=True)

    by = {r["policy"]: r for r in online}
    bb = {r["policy"]: r for r in batch}
    rows = []
    for base in ("gpus-only", "static"):
        a, b = by["batch-aware"], by[base]
        rows.append(row(SECTION, f"online {len(jobs)} jobs on {gpus} GPUs: jobs done within the window, batch-aware vs {base}",
                        str(a["completed_in_window"]), str(b["completed_in_window"]),
                        a["completed_in_window"] / max(1, b["completed_in_window"]), "", None))
        rows.append(row(SECTION, f"online: average completion time, batch-aware vs {base}",
                        f"{a['avg_jct_s'] / 3600:.2f} h", f"{b['avg_jct_s'] / 3600:.2f} h",
                        b["avg_jct_s"] / a["avg_jct_s"], "", None))
    unweighed = {r["costs"]: r for r in weighed if r["policy"] == "batch-aware"}
    for r in weighed:
        if r["policy"] == "batch-aware":
            continue
        b = unweighed[r["costs"]]
        rows.append(row(SECTION, f"online ({r['costs']}): average completion time, {r['policy']} vs unweighed",
                        f"{r['avg_jct_s'] / 3600:.3f} h", f"{b['avg_jct_s'] / 3600:.3f} h",
                        b["avg_jct_s"] / r["avg_jct_s"], "", None))
    rows.append(row(SECTION, f"batch of {len(queue)} jobs at time 0: makespan, Saturn's MILP vs practice ({share} GPUs each)",
                    f"{bb['makespan']['makespan_s'] / 3600:.2f} h", f"{bb['practice']['makespan_s'] / 3600:.2f} h",
                    bb["practice"]["makespan_s"] / bb["makespan"]["makespan_s"], "", None))
    rows.append(row(SECTION, "batch: makespan, batch-aware elastic vs practice",
                    f"{bb['batch-aware']['makespan_s'] / 3600:.2f} h", f"{bb['practice']['makespan_s'] / 3600:.2f} h",
                    bb["practice"]["makespan_s"] / bb["batch-aware"]["makespan_s"], "", None))
    r2, raw_scale = scale(tmp, time_limit)
    rows += r2
    raw = {"scale": raw_scale, "gpus": gpus, "seed": seed, "window_s": window, "restart_s": restart_s, "link_share": link_share,
           "jobs": [{"name": j.name, "arrival_s": j.arrival, "size": j.size, "batches": j.batches,
                     "counts": j.counts, "samples": j.samples} for j in jobs],
           "online": online, "moves_weighed": weighed, "batch": batch, "plan_calls": curves.calls}
    if plot_path:
        plot(online, batch, plot_path, f"{len(jobs)} jobs over {hours:g} h on {gpus} GPUs (seed {seed}); "
                                       f"batch queue of {len(queue)}")
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--gpus", type=int, default=256, help="GPUs in the cluster (8 a node)")
        ap.add_argument("--jobs", type=int, default=120, help="jobs in the online trace")
        ap.add_argument("--seed", type=int, default=1, help="the trace's random seed")
        ap.add_argument("--hours", type=float, default=24, help="the online trace's arrivals spread over this")
        ap.add_argument("--batch-jobs", type=int, default=12, help="jobs in the batch queue (Saturn's experiment)")
        ap.add_argument("--restart-s", type=float, default=30, help="seconds a job's restart costs (an assumption)")
        ap.add_argument("--link-share", type=float, default=0.5,
                        help="share of the inter-node link a state move reaches (bench_reconfig measures it)")
        ap.add_argument("--time-limit", type=float, default=10, help="the makespan MILP's time limit")
        ap.add_argument("--batches", default=",".join(map(str, BATCHES)),
                        help="the smallest global batches jobs draw from (each accepts B, 2B, 4B)")
        ap.add_argument("--plot", metavar="PNG", help="write the plot here")

    def go(a, root):
        BATCHES[:] = [int(b) for b in a.batches.split(",")]
        return run(a.gpus, a.jobs, a.seed, a.hours, a.batch_jobs, a.restart_s, a.link_share, a.time_limit, root,
                   a.plot)

    return standalone(__doc__, configure, go)


if __name__ == "__main__":
    sys.exit(main())
