"""The elastic loop end to end, with a real daemon and mount: a small GPT trained with tensor,
pipeline and data parallelism (examples/elastic_gpt) is stopped at one config and resumed at
others from ptcfs, and continues exactly the run that never stopped.

examples/elastic_gpt/scenario.py runs the issue's scenario, each phase saving into the mount:

    phase 1  tp=2,pp=2,dp=1 (4 processes) trains 0..3, saves step 4
    phase 2  tp=1,pp=2,dp=2 resumes step 4 (ensure_layout from its 4 ranks), trains 4..7, saves 8
    phase 3  tp=1,pp=1,dp=1 resumes step 8, trains 8..11, saves 12
    (phase 4 tp=4,pp=1,dp=1 resumes step 12, trains 12..15, saves 16: plain optimizer only)
    reference: phase 1's config, plain Adam, 0..N-1 without stopping, saving at the same steps

once with the plain optimizer and once with the ZeRO-style distributed one (each DP rank keeps
and saves its own range of Adam's state). The script prints its own comparison; this test
checks everything again from what the runs recorded and from the mount: losses step by step,
the samples of every global batch, the saved state, what each rank loaded and wrote.
"""

import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_REPO, "tests", "python"))  # ptcfs_daemon
sys.path.insert(0, os.path.join(_REPO, "tests", "tools"))  # ptcds: the dataset order, independently
sys.path.insert(0, os.path.join(_REPO, "python"))  # ptcfs

import ptcds  # noqa: E402
import ptcfs  # noqa: E402
from ptcfs_daemon import Daemon  # noqa: E402

PY = sys.executable  # the project's venv (docs/PYTHON.md)
SCENARIO = os.path.join(_REPO, "examples", "elastic_gpt", "scenario.py")
GLOBAL_BATCH = 8  # examples/elastic_gpt/config.py
SEED = 1  # the dataset's shuffle seed (scenario.py)
ITERS = 4  # per phase
LOSS_RTOL = 1e-5
STATE_RTOL = 1e-5
STEP = "optimizer.step"
MOMENTS = ("optimizer.exp_avg.", "optimizer.exp_avg_sq.")

pytest.importorskip("torch")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(str(tmp_path / "daemon"))
    try:
        yield d.start()
    finally:
        d.stop()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def losses(out, cfg, first, last, optimizer):
    """{iteration: loss} of one run, checking that it ran exactly iterations first..last at cfg."""
    rows = read_jsonl(os.path.join(out, "losses.jsonl"))
    assert [x["iter"] for x in rows] == list(range(first, last + 1)), out
    assert all((x["tp"], x["pp"], x["dp"], x["optimizer"]) == (*cfg, optimizer) for x in rows), out
    return {x["iter"]: x["loss"] for x in rows}


def global_batches(out, cfg, first, last):
    """{iteration: sample ids of the global batch}: DP rank 0's chunk, then rank 1's, ...
    Every rank of the run recorded what it read, and the ranks of one DP rank (its TP ranks
    and pipeline stages, which all need the tokens) must have read the same."""
    tp, pp, dp = cfg
    per_d = {}
    for rank in range(tp * pp * dp):
        rows = read_jsonl(os.path.join(out, f"samples-r{rank}.jsonl"))
        assert [x["iter"] for x in rows] == list(range(first, last + 1)), (out, rank)
        d = (rank // tp) % dp  # Megatron's order: rank = t + tp * (d + dp * p)
        for x in rows:
            assert x["d"] == d and len(x["ids"]) == GLOBAL_BATCH // dp, (out, rank, x)
            assert per_d.setdefault((x["iter"], d), x["ids"]) == x["ids"], (out, rank, x["iter"])
    return {it: [i for d in range(dp) for i in per_d[(it, d)]] for it in range(first, last + 1)}


def full_state(mnt, job, step):
    sd = os.path.join(mnt, job, str(step))
    return {n: np.array(ptcfs.load_full(sd, n)) for n in ptcfs.load_ptc(sd)["tensors"]}


def dp_ranges(numel, dp):
    """The contiguous ranges the DP ranks of a distributed optimizer must own, in rank order."""
    return [(numel * d // dp, numel * (d + 1) // dp) for d in range(dp)]


def check_loaded(out, cfg, ptc, full, zero):
    """Every rank of a resumed run loaded exactly its slice of the saved tensors; with the
    distributed optimizer, of the moments only its DP rank's range."""
    tp, pp, dp = cfg
    for rank in range(tp * pp * dp):
        rec = read_json(os.path.join(out, f"loaded-r{rank}.json"))
        held = ptcfs.shard_tensors(ptc, rec["t"], rec["p"])
        assert sorted(rec["sha256"]) == sorted(held), (out, rank)
        for name, digest in rec["sha256"].items():
            want = ptcfs.split(full[name], ptc["tensors"][name], tp, rec["t"])
            if zero and name.startswith(MOMENTS):
                lo, hi = dp_ranges(want.size, dp)[rec["d"]]
                assert rec["ranges"][name] == [lo, hi], (out, rank, name)
                want = want.reshape(-1)[lo:hi]
            assert hashlib.sha256(want.tobytes()).hexdigest() == digest, (out, rank, name)
        if not zero or dp == 1:
            assert all(r == [0, int(np.prod(held[n][1]))] for n, r in rec["ranges"].items()), (out, rank)
        else:
            assert sorted(rec["ranges"]) == sorted(n for n in held if n.startswith(MOMENTS)), (out, rank)


def check_written(out, cfg, ptc, step, zero):
    """Who wrote what of step `step`. Plain: DP rank 0 of each (t, p) its whole shard, the
    others nothing. Distributed: each DP rank its own range of every moment, DP rank 0 the
    parameters and the step count; the ranges of each tensor cover its slice exactly."""
    tp, pp, dp = cfg
    cover = {}
    for rank in range(tp * pp * dp):
        rec = read_json(os.path.join(out, f"saved-r{rank}-{step}.json"))
        held = ptcfs.shard_tensors(ptc, rec["t"], rec["p"])
        for name, (lo, hi) in rec["written"].items():
            assert name in held, (out, rank, name)
            cover.setdefault((rec["t"], rec["p"], name), []).append((rec["d"], lo, hi))
        if not zero:
            assert bool(rec["written"]) == (rec["d"] == 0), (out, rank)
    for t, p in ptcfs.ptc.shards(ptc):
        for name, (_, shape) in ptcfs.shard_tensors(ptc, t, p).items():
            numel = int(np.prod(shape))
            got = sorted(cover.get((t, p, name), []))
            if zero and name.startswith(MOMENTS):
                want = [(d, lo, hi) for d, (lo, hi) in enumerate(dp_ranges(numel, dp)) if hi > lo]
            else:
                want = [(0, 0, numel)]
            assert got == want, (out, step, t, p, name)


def run_scenario(daemon, work, configs, zero):
    cmd = [PY, SCENARIO, "--job", "gpt", "--daemon", daemon.addr, "--mount", daemon.mnt, "--workdir", work,
           "--iters", str(ITERS), "--configs", *(",".join(map(str, c)) for c in configs)]
    if zero:
        cmd.append("--distributed-optimizer")
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}\n{daemon.log_tail()}"
    assert r.stdout.rstrip().endswith("scenario: OK")
    return time.monotonic() - t0


def check_scenario(daemon, work, configs, zero):
    """Everything the scenario claims, checked again from its records and the mount."""
    n = ITERS * len(configs)
    bounds = [ITERS * (i + 1) for i in range(len(configs))]
    optimizer = "distributed" if zero else "adam"
    mnt = daemon.mnt
    ref_out = os.path.join(work, "ref")
    ref = losses(ref_out, configs[0], 0, n - 1, "adam")
    ref_batches = global_batches(ref_out, configs[0], 0, n - 1)
    # The reference read the global batches of ptcfs's dataset order (tests/tools/ptcds.py).
    with daemon.client() as c:
        ds = {x["job"]: x for x in c.dataset_ls()["datasets"]}
    order = ptcds.epoch_order(SEED, 0, ds["gpt-ref"]["num_samples"])
    assert ref_batches == {it: order[it * GLOBAL_BATCH:(it + 1) * GLOBAL_BATCH] for it in range(n)}
    # It learns (a loss that stood still would match trivially): the mean loss of the last
    # phase's iterations is clearly below the first's (single batches vary by about 0.03).
    first_mean = np.mean([ref[i] for i in range(ITERS)])
    last_mean = np.mean([ref[i] for i in range(n - ITERS, n)])
    assert last_mean < first_mean - 0.05, (first_mean, last_mean)

    resumed, state_diffs = {}, {}
    for i, cfg in enumerate(configs):
        out = os.path.join(work, f"phase{i + 1}")
        first, k = bounds[i] - ITERS, bounds[i]
        got = losses(out, cfg, first, k - 1, optimizer)
        if i == 0:
            assert got == {it: ref[it] for it in got}  # same config, same samples: bit for bit
        else:
            with daemon.client() as c:
                info = c.ls(f"gpt/{first}")
            # Every rank called ensure_layout: exactly one repartition, to this phase's config.
            assert info["version"] == 2 and info["parallelism"] == dict(zip(("tp", "pp", "dp"), cfg)), info
            sd = os.path.join(mnt, "gpt", str(first))
            check_loaded(out, cfg, ptcfs.load_ptc(sd), full_state(mnt, "gpt", first), zero)
        resumed.update(got)
        # The global sample order is unchanged, whatever dp reads it.
        assert global_batches(out, cfg, first, k - 1) == {it: ref_batches[it] for it in range(first, k)}
        check_written(out, cfg, ptcfs.ptc.with_parallelism(ptcfs.load_ptc(os.path.join(mnt, "gpt-ref", str(k))),
                                                           *cfg), k, zero)
        # The saved state against the reference's at the same step, from the full/ views.
        mine, theirs = full_state(mnt, "gpt", k), full_state(mnt, "gpt-ref", k)
        assert sorted(mine) == sorted(theirs)
        assert mine[STEP].tolist() == theirs[STEP].tolist() == [k]
        for name, x in mine.items():
            r = theirs[name]
            assert x.dtype == r.dtype and x.shape == r.shape, name
            if i == 0:  # same config: the same bytes, however the optimizer wrote them
                assert np.array_equal(x, r), name
            rel = float(np.max(np.abs(x.astype(np.float64) - r))) / (float(np.max(np.abs(r))) or 1.0)
            state_diffs[(k, name)] = rel
    # Each save recorded the dataset position; each change of dp re-split the dataset.
    assert (ds["gpt"]["dp"], ds["gpt"]["consumed"]) == (configs[-1][2], n * GLOBAL_BATCH)
    assert (ds["gpt-ref"]["dp"], ds["gpt-ref"]["consumed"]) == (configs[0][2], n * GLOBAL_BATCH)
    return ref, resumed, state_diffs


def report_and_assert(ref, resumed, state_diffs, took):
    diffs = {i: abs(resumed[i] - ref[i]) / abs(ref[i]) for i in resumed}
    worst = max(state_diffs, key=state_diffs.get)
    print(f"max relative loss difference {max(diffs.values()):.2e}; max relative state difference "
          f"{state_diffs[worst]:.2e} ({worst[1]} at step {worst[0]}); scenario {took:.1f} s")
    assert max(diffs.values()) <= LOSS_RTOL, diffs
    assert state_diffs[worst] <= STATE_RTOL, worst


def scenario_test(daemon, tmp_path, configs, zero):
    work = str(tmp_path / "work")
    took = run_scenario(daemon, work, configs, zero)
    ref, resumed, state_diffs = check_scenario(daemon, work, configs, zero)
    report_and_assert(ref, resumed, state_diffs, took)


def test_plain_optimizer_stop_and_resume_at_other_configs(daemon, tmp_path):
    # The scenario, then tp=4 (tp, pp and dp all change at once).
    scenario_test(daemon, tmp_path, [(2, 2, 1), (1, 2, 2), (1, 1, 1), (4, 1, 1)], zero=False)


def test_distributed_optimizer_stop_and_resume_at_other_configs(daemon, tmp_path):
    # dp 1 -> 2 -> 1: one range per moment saved, loaded as two; two saved, loaded as one.
    # The reference keeps the plain optimizer: the two optimizers must agree too.
    scenario_test(daemon, tmp_path, [(2, 2, 1), (1, 2, 2), (1, 1, 1)], zero=True)
