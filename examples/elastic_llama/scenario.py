#!/usr/bin/env python3
"""The elastic llama scenario against a running daemon, compared with a run that never changed
its mesh:

    run A (4 processes)  dp2xtp2, live to dp3 (shrink), live to dp1xtp2 (shrink), live to dp3
                         (grow), live to dp2xtp2 (grow); saves a DCP checkpoint into the mount
    run B (2 processes)  restarts at dp2 from it (shrink through DCP), trains, saves
    run C (1 process)    restarts at dp1 (shrink), trains, saves
    run D (3 processes)  restarts at dp3 (grow), trains, saves
    run E (4 processes)  restarts at dp2xtp2 (grow), trains
    reference            one process at dp1 trains every iteration without a change, from its own
                         copy of the dataset (the same seed, so the same order)

Every change keeps the global batch (12), so every iteration of the elastic job takes the same
samples as the reference's and its loss must equal the reference's within 1e-5 (relative: the
only difference is the order of floating-point reductions). Prints per iteration both losses,
whether the global batch held the same sample ids in the same order, and per live change the
bytes each rank received against what it lacked. Exit status 0 when all agree.

    $PTCFS_PYTHON examples/elastic_llama/scenario.py --daemon HOST:PORT --mount MNT --workdir DIR [--iters N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import ptcfs  # noqa: E402

PY = sys.executable
TRAIN = os.path.join(_HERE, "train.py")
GLOBAL_BATCH = 12
SEED = 5
LOSS_RTOL = 1e-5
VOCAB, SEQ = 96, 16  # model.Config (not imported here: that pulls in torch)


def make_samples(path: str, n: int) -> None:
    """n token sequences, each following a rule the model can learn: t[i+1] = (a * t[i] + b) mod V."""
    with open(path, "w") as f:
        for i in range(n):
            a, b, t = 1 + i % 5, (7 * i) % VOCAB, (13 * i) % VOCAB
            toks = []
            for _ in range(SEQ + 1):
                toks.append(t)
                t = (a * t + b) % VOCAB
            f.write(json.dumps({"id": i, "tokens": toks}) + "\n")


def train(a, job: str, world: int, segments, start: int, out: str, load=None, save=None) -> dict:
    cmd = [PY, TRAIN, "--world", str(world), "--segments", ",".join(f"{m}:{n}" for m, n in segments),
           "--start", str(start), "--job", job, "--daemon", a.daemon, "--mount", a.mount, "--out", out]
    if load:
        cmd += ["--load", load]
    if save:
        cmd += ["--save", save]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}")
    with open(out) as f:
        rec = json.load(f)
    rec["seconds"] = time.monotonic() - t0
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--daemon", default=os.environ.get("PTCFS_DAEMON"), required=not os.environ.get("PTCFS_DAEMON"))
    p.add_argument("--mount", default=os.environ.get("PTCFS_MOUNT"), required=not os.environ.get("PTCFS_MOUNT"))
    p.add_argument("--workdir", required=True)
    p.add_argument("--job", default="llama")
    p.add_argument("--iters", type=int, default=3, help="iterations per segment")
    a = p.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    n = a.iters
    samples = os.path.join(a.workdir, "samples.jsonl")
    make_samples(samples, GLOBAL_BATCH * 9 * n + 5)
    with ptcfs.connect(a.daemon) as c:
        for job in (a.job, a.job + "-ref"):
            c.dataset_add(job, "train", "jsonl", seed=SEED, global_batch=GLOBAL_BATCH, files=[samples], dp=1)

    runs = [
        ("A", 4, [("dp2xtp2", n), ("dp3", n), ("dp1xtp2", n), ("dp3", n), ("dp2xtp2", n)]),
        ("B", 2, [("dp2", n)]),
        ("C", 1, [("dp1", n)]),
        ("D", 3, [("dp3", n)]),
        ("E", 4, [("dp2xtp2", n)]),
    ]
    total = sum(k for _, _, segs in runs for _, k in segs)
    ref = train(a, a.job + "-ref", 1, [("dp1", total)], 0, os.path.join(a.workdir, "ref.json"))
    print(f"reference: {total} iterations at dp1 in {ref['seconds']:.1f} s")
    got, moves, start, prev = [], [], 0, None
    for name, world, segs in runs:
        iters = sum(k for _, k in segs)
        save = os.path.join(a.mount, a.job, str(start + iters)) if name != runs[-1][0] else None
        rec = train(a, a.job, world, segs, start, os.path.join(a.workdir, f"run{name}.json"), load=prev, save=save)
        print(f"run {name}: {world} processes, {' -> '.join(m for m, _ in segs)}, iterations {start}..{start + iters - 1}"
              f"{', from ' + prev if prev else ''}{', saved ' + save if save else ''} ({rec['seconds']:.1f} s)")
        got += rec["iterations"]
        moves += rec["moves"]
        start, prev = start + iters, save

    ok = True
    print(f"{'iter':>4}  {'mesh':<8} {'loss':>12} {'reference':>12} {'rel diff':>9}  batch")
    worst = 0.0
    for g, r in zip(got, ref["iterations"]):
        rel = abs(g["loss"] - r["loss"]) / max(abs(r["loss"]), 1e-12)
        worst = max(worst, rel)
        same = g["ids"] == r["ids"]
        ok = ok and same and rel <= LOSS_RTOL and g["iteration"] == r["iteration"]
        print(f"{g['iteration']:>4}  {g['mesh']:<8} {g['loss']:>12.8f} {r['loss']:>12.8f} {rel:>9.1e}  "
              f"{'same samples' if same else 'DIFFERENT samples'}")
    ok = ok and len(got) == len(ref["iterations"]) == total
    for m in moves:
        recv = sum(x["received"] for x in m["ranks"])
        lack = sum(x["min"] for x in m["ranks"])
        ok = ok and all(x["received"] == x["min"] for x in m["ranks"])
        secs = max(x["seconds"] for x in m["ranks"])
        print(f"live {m['from']} -> {m['to']} at iteration {m['at']}: {recv} bytes received, {lack} lacked "
              f"(per rank {[x['received'] for x in m['ranks']]}), {secs * 1000:.0f} ms")
    print(f"max relative loss difference {worst:.2e} (tolerance {LOSS_RTOL:g})")
    print("scenario: OK" if ok else "scenario: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
