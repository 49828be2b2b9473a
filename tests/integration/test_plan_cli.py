"""`ptcfs plan` and `ptcfs allocate`, the real CLI binary on MODEL.json and JOBS.json files: the
ranked candidates (checked against the published FLOP formula and a brute force over the
rules), the table, bad input, and --from against a real two-node cluster."""

import json
import os
import subprocess

import pytest

from cluster_util import Cluster
from ptcfs_harness import PTCFS, Checkpoint, assert_error, require_binaries

GIB = 1024 ** 3

# GPT-3 175B (96 layers) on DGX A100 nodes, with full recomputation so that Narayanan et al.
# 2021's eq. 3 gives the FLOPs.
GPT3 = {"layers": 96, "hidden": 12288, "heads": 96, "ffn": 49152, "vocab": 51200, "seq": 2048,
        "global_batch": 1536, "recompute": "full", "sequence_parallel": False,
        "gpu": {"memory_gb": 80, "tflops": 312, "per_node": 8, "intra_node_gbps": 2400, "inter_node_gbps": 200}}

CANDIDATE_KEYS = {"tp", "cp", "pp", "dp", "micro_batch", "virtual_stages", "memory_gb", "step_seconds", "tflops_per_gpu"}


def run(*args, check_rc=0):
    require_binaries()
    r = subprocess.run([PTCFS, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert r.returncode == check_rc, f"ptcfs {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def plan_json(model_path, gpus, *extra):
    return json.loads(run("plan", "--model", model_path, "--gpus", gpus, "--json", *extra).stdout)


def valid_configs(m, gpus, per_node):
    """The planner's rules, written out again: (tp, pp, dp, micro_batch, virtual_stages) in no order, with cp
    after them when "context_parallel" is true (cp > 1 where 2 cp divides seq).
    Interleaving (on unless "interleave" is false): v > 1 stages when pp > 1, pp x v divides the
    layers and pp divides the micro-batches global_batch / (dp x micro_batch). With "pipeline_split"
    "embedding_and_loss" the layers + 2 slots take the layers' place and pp must divide them."""
    out = set()
    with_cp = m.get("context_parallel", False)
    qg = m.get("query_groups", m["heads"])
    split = m.get("pipeline_split", "even") == "embedding_and_loss"
    slots = m["layers"] + (2 if split else 0)
    for tp in range(1, gpus + 1):
        for cp in range(1, gpus + 1) if with_cp else (1,):
            if cp > 1 and m["seq"] % (2 * cp):
                continue
            for pp in range(1, gpus + 1):
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if m["heads"] % tp or qg % tp or m["ffn"] % tp or tp > per_node or pp > m["layers"]:
                    continue
                if split and pp > 1 and slots % pp:
                    continue
                for b in range(1, m["global_batch"] + 1):
                    if m["global_batch"] % (dp * b):
                        continue
                    for v in range(1, slots + 1):
                        if v == 1 or (m.get("interleave", True) and pp > 1 and slots % (pp * v) == 0
                                      and (m["global_batch"] // (dp * b)) % pp == 0):
                            out.add((tp, pp, dp, b, v, cp) if with_cp else (tp, pp, dp, b, v))
    return out


def test_plan_ranks_fitting_configurations_by_step_time(tmp_path):
    model = write(tmp_path, "gpt3.json", GPT3)
    cands = plan_json(model, 1536)
    assert cands, "GPT-3 fits on 1536 A100s"
    for c in cands:
        assert set(c) == CANDIDATE_KEYS, c
        assert c["tp"] * c["pp"] * c["dp"] == 1536
        assert 0 < c["memory_gb"] <= 80
    times = [c["step_seconds"] for c in cands]
    assert times == sorted(times)
    assert {(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["virtual_stages"]) for c in cands} <= valid_configs(GPT3, 1536, 8)
    # The model's choice: tensor parallelism over half a node, 12 stages of 8 layers interleaved
    # as 8 chunks of one layer, micro-batches of 2 (docs/PLANNER.md, "Against published
    # configurations", explains why tp = 4 rather than Megatron's 8).
    best = cands[0]
    assert (best["tp"], best["pp"], best["dp"], best["micro_batch"], best["virtual_stages"]) == (4, 12, 32, 2, 8)
    # TFLOP/s per GPU: Narayanan et al. 2021 eq. 3 over the predicted step time.
    B, s, l, h = 1536, 2048, 96, 12288
    for c in cands:
        V = -(-51200 // (128 * c["tp"])) * 128 * c["tp"]  # the vocabulary padded as Megatron pads it
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        assert c["tflops_per_gpu"] == pytest.approx(flops / (1536 * c["step_seconds"]) / 1e12, rel=1e-12)
        assert c["tflops_per_gpu"] < 312


def test_plan_lists_every_valid_configuration_that_fits_when_memory_is_ample(tmp_path):
    m = {"layers": 6, "hidden": 96, "heads": 6, "ffn": 384, "vocab": 500, "seq": 64, "global_batch": 12,
         "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}}
    model = write(tmp_path, "m.json", m)
    for gpus in (1, 2, 3, 4, 6, 12):
        got = {(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["virtual_stages"]) for c in plan_json(model, gpus)}
        assert got == valid_configs(m, gpus, 4), gpus
    # --gpus-per-node bounds tp.
    got = {(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["virtual_stages"]) for c in plan_json(model, 12, "--gpus-per-node", "2")}
    assert got == valid_configs(m, 12, 2)
    assert max(t for t, _, _, _, _ in got) == 2
    # --top K keeps the K best.
    assert plan_json(model, 12, "--top", "3") == plan_json(model, 12)[:3]
    # The embedding-and-loss split: 8 slots, so pp 3 and 6 are gone, pp 4 takes 2 chunks (of one slot each).
    m["pipeline_split"] = "embedding_and_loss"
    model = write(tmp_path, "split.json", m)
    for gpus in (1, 2, 3, 4, 6, 12):
        got = {(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["virtual_stages"]) for c in plan_json(model, gpus)}
        assert got == valid_configs(m, gpus, 4), gpus
    got = {(c["pp"], c["virtual_stages"]) for c in plan_json(model, 12)}
    assert got == {(1, 1), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2)}
    # Context parallelism: cp with 2 cp dividing seq (64), every candidate's cp in its JSON.
    m["pipeline_split"] = "even"
    m["context_parallel"] = True
    model = write(tmp_path, "cp.json", m)
    for gpus in (1, 2, 4, 6, 12):
        cands = plan_json(model, gpus)
        got = {(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["virtual_stages"], c["cp"]) for c in cands}
        assert got == valid_configs(m, gpus, 4), gpus
    # On 12 GPUs cp divides 12 and 2 cp divides 64: 1, 2, 4 (not 3, 6, 12).
    assert {c["cp"] for c in plan_json(model, 12)} == {1, 2, 4}


def test_plan_prints_a_table(tmp_path):
    model = write(tmp_path, "gpt3.json", GPT3)
    out = run("plan", "--model", model, "--gpus", 1536).stdout
    lines = out.splitlines()
    assert lines[0].startswith(f"{model} on 1536 GPUs (8 per node, 80 GiB each): ")
    assert lines[0].endswith("the 10 best"), lines[0]
    assert lines[1].split()[:6] == ["rank", "tp", "pp", "v", "dp", "micro"]
    best = plan_json(model, 1536)[0]
    row = lines[2].split()
    assert row[:6] == ["1", str(best["tp"]), str(best["pp"]), str(best["virtual_stages"]), str(best["dp"]),
                       str(best["micro_batch"])]
    assert row[6:8] == [f"{best['memory_gb']:.2f}", "GiB"]
    assert len(lines) == 2 + 10 + 1
    # With context parallelism allowed, cp after tp and its exposed communication after tp's.
    model = write(tmp_path, "gpt3-cp.json", {**GPT3, "context_parallel": True})
    lines = run("plan", "--model", model, "--gpus", 1536, "--top", 1).stdout.splitlines()
    assert lines[1].split()[:7] == ["rank", "tp", "cp", "pp", "v", "dp", "micro"]
    assert " tp comm  cp comm  pp comm " in lines[1], lines[1]
    best = plan_json(model, 1536)[0]
    row = lines[2].split()
    assert row[:7] == ["1", str(best["tp"]), str(best["cp"]), str(best["pp"]), str(best["virtual_stages"]),
                       str(best["dp"]), str(best["micro_batch"])]


def test_plan_refuses_bad_input(tmp_path):
    model = write(tmp_path, "gpt3.json", GPT3)
    assert_error(run("plan", "--model", model, "--gpus", 0, check_rc=1), "gpus must be at least 1, got 0")
    # GPT-3 on one node: what needs the least memory, and by how much it misses.
    r = run("plan", "--model", model, "--gpus", 8, check_rc=1)
    assert_error(r, model, "fits on no configuration of 8 GPUs of 80.00 GiB",
                 "tp=8,pp=1,dp=1,micro_batch=1, needs 371.35 GiB per GPU of stage 0",
                 "(weights 40.71 GiB, gradients 81.42 GiB, optimizer 244.25 GiB, activations 4.97 GiB), 291.35 GiB more "
                 "than a GPU has")
    # 97 GPUs: tp = 1 (prime), pp = 97 is more than 96 layers, dp = 97 does not divide 1536.
    assert_error(run("plan", "--model", model, "--gpus", 97, check_rc=1), "no valid configuration of 97 GPUs")
    bad = dict(GPT3, layer=96)
    assert_error(run("plan", "--model", write(tmp_path, "bad.json", bad), "--gpus", 8, check_rc=1),
                 "bad.json: unknown key 'layer'")
    bad_gpu = dict(GPT3, gpu=dict(GPT3["gpu"], memory=80))
    assert_error(run("plan", "--model", write(tmp_path, "badgpu.json", bad_gpu), "--gpus", 8, check_rc=1),
                 "badgpu.json: gpu: unknown key 'memory'")
    missing = {k: v for k, v in GPT3.items() if k != "seq"}
    assert_error(run("plan", "--model", write(tmp_path, "missing.json", missing), "--gpus", 8, check_rc=1),
                 "missing.json lacks 'seq'")
    assert_error(run("plan", "--model", write(tmp_path, "syntax.json", "{"), "--gpus", 8, check_rc=1),
                 "syntax.json: not valid JSON")
    assert_error(run("plan", "--model", str(tmp_path / "absent.json"), "--gpus", 8, check_rc=1),
                 "absent.json: cannot open")
    assert_error(run("plan", "--model", str(tmp_path), "--gpus", 8, check_rc=1), "is a directory")
    assert_error(run("plan", "--model", model, "--gpus", 8, "--gpus-per-node", 0, check_rc=1),
                 "--gpus-per-node must be 1 to 1024 (got 0)")
    # MODEL.json caps per_node at 1024; the flag that overrides it too.
    assert_error(run("plan", "--model", model, "--gpus", 8, "--gpus-per-node", 4096, check_rc=1),
                 "--gpus-per-node must be 1 to 1024 (got 4096)")
    # A bad global batch is said plainly, not as a range up to DBL_MAX's 309 digits.
    for bad in ("0", "-3", "2x"):
        r = run("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=1", "--global-batch", bad,
                check_rc=2)
        want = "ptcfs: error: --global-batch: must be a whole number of at least 1 (got " + bad + ")"
        assert r.stderr.startswith(want), r.stderr
    r = run("plan", "--model", model, "--gpus", "eight", check_rc=None)
    assert r.returncode != 0 and "--gpus" in r.stderr


def test_plan_from_a_step_adds_the_bytes_each_repartition_would_move(tmp_path):
    """Two nodes of 2 GPUs hold a tp=2, pp=2 step; per candidate, bytes_moved is what a dry-run
    repartition into its tp, pp, dp reports: 0 for the current layout."""
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=4, hidden=256, vocab=1000)
    m = {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "seq": 128, "global_batch": 8,
         "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 2, "intra_node_gbps": 800, "inter_node_gbps": 100}}
    model = write(tmp_path, "m.json", m)
    with Cluster(os.path.join(root, "cluster"), 2, gpus=2) as c:
        c[0].cli_json("import", ck.path, "--job", "j", "--step", "1", "--json")
        r = c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j/1", "--json")
        cands = json.loads(r.stdout)
        assert len(cands) == len(valid_configs(m, 4, 2))
        moved = {}
        for cand in cands:
            assert set(cand) == CANDIDATE_KEYS | {"bytes_moved"}
            to = f"tp={cand['tp']},pp={cand['pp']},dp={cand['dp']}"
            if to not in moved:
                moved[to] = c[0].cli_json("repartition", "--job", "j", "--step", "1", "--to", to, "--dry-run",
                                          "--json")["bytes_moved"]
            assert cand["bytes_moved"] == moved[to], (to, cand)
        assert moved["tp=2,pp=2,dp=1"] == 0
        assert any(v > 0 for v in moved.values()), moved
        # The table gets a column of it.
        out = c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j/1", "--top", "2").stdout
        assert out.splitlines()[1].split()[-1] == "moves"
        # An unknown step is the daemon's error, with the configuration it was asked about.
        r = c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j/2", check=False)
        assert_error(r, "dry run of repartitioning j/2 to tp=")
        r = c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j", check=False)
        assert_error(r, "--from 'j' is not JOB/STEP")


def test_plan_with_a_horizon_ranks_by_step_time_plus_the_moves_time(tmp_path):
    """--horizon-steps H: score = step + bytes_moved x 8 / (inter_node_gbps x 1e9 x per_node) / H, best
    first; over a slow network and a short horizon, staying put (nothing to move) wins; over a long one
    the order is plan's own."""
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=4, hidden=256, vocab=1000)
    m = {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "seq": 128, "global_batch": 8,
         "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 2, "intra_node_gbps": 800, "inter_node_gbps": 0.001}}
    model = write(tmp_path, "m.json", m)
    with Cluster(os.path.join(root, "cluster"), 2, gpus=2) as c:
        c[0].cli_json("import", ck.path, "--job", "j", "--step", "1", "--json")
        ranked = json.loads(c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j/1", "--horizon-steps", 1,
                                     "--json").stdout)
        bw = 0.001 * 1e9 / 8 * 2
        for cand in ranked:
            assert cand["move_seconds"] == pytest.approx(cand["bytes_moved"] / bw, rel=1e-12)
            assert cand["score_seconds"] == pytest.approx(cand["step_seconds"] + cand["move_seconds"], rel=1e-12)
        scores = [x["score_seconds"] for x in ranked]
        assert scores == sorted(scores)
        assert (ranked[0]["tp"], ranked[0]["pp"], ranked[0]["dp"]) == (2, 2, 1) and ranked[0]["bytes_moved"] == 0
        plain = plan_json(model, 4)
        assert {(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["virtual_stages"]) for x in ranked} == \
            {(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["virtual_stages"]) for x in plain}
        far = json.loads(c[0].cli("plan", "--model", model, "--gpus", 4, "--from", "j/1", "--horizon-steps",
                                  10 ** 15, "--json").stdout)
        assert [(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["virtual_stages"]) for x in far] == \
            [(x["tp"], x["pp"], x["dp"], x["micro_batch"], x["virtual_stages"]) for x in plain]
        r = c[0].cli("plan", "--model", model, "--gpus", 4, "--horizon-steps", 5, check=False)
        assert_error(r, "--horizon-steps needs --from JOB/STEP")


def test_repartition_takes_the_planners_best_configuration(daemon, tmp_path):
    """`repartition --gpus N --model MODEL.json` applies the first candidate of `plan` without interleaved
    stages and with the even split (a step's stages hold contiguous layers, as even as possible); a dry run
    shows it without changing the step, and --to with --gpus is refused."""
    ck = Checkpoint(str(tmp_path / "ck"), tp=2, pp=2, layers=4, hidden=256, vocab=1000)
    m = {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "seq": 128, "global_batch": 8,
         "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}}
    model = write(tmp_path, "m.json", m)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    best = next(c for c in plan_json(model, 8) if c["virtual_stages"] == 1)
    want = {"tp": best["tp"], "pp": best["pp"], "dp": best["dp"]}
    dry = daemon.cli_json("repartition", "--job", "j", "--step", "1", "--gpus", 8, "--model", model, "--dry-run",
                          "--json")
    assert dry["to"] == want and dry["dry_run"] and dry["planned"] == best, dry
    assert daemon.cli_json("ls", "j/1", "--json")["version"] == 1
    out = daemon.cli("repartition", "--job", "j", "--step", "1", "--gpus", 8, "--model", model).stdout
    to = f"tp={best['tp']},pp={best['pp']},dp={best['dp']}"
    assert out.splitlines()[0].startswith(f"the planner's best for 8 GPUs: {to} (micro-batch {best['micro_batch']}"), out
    info = daemon.cli_json("ls", "j/1", "--json")
    assert info["version"] == 2 and info["parallelism"] == want, info
    # A MODEL.json with the embedding-and-loss split plans as the even split. On 6 GPUs of 0.02 GiB both put
    # 3 stages first, but the split (6 slots: 1, 2, 1 layers) would take micro-batch 3 where the even split
    # (2, 1, 1) takes 1.
    tight = {**m, "global_batch": 12, "gpu": {**m["gpu"], "memory_gb": 0.02}}
    even = next(c for c in plan_json(write(tmp_path, "even.json", tight), 6) if c["virtual_stages"] == 1)
    split_path = write(tmp_path, "split.json", {**tight, "pipeline_split": "embedding_and_loss"})
    split = next(c for c in plan_json(split_path, 6) if c["virtual_stages"] == 1)
    assert (even["tp"], even["pp"], even["micro_batch"]) == (2, 3, 1), even
    assert (split["tp"], split["pp"], split["micro_batch"]) == (2, 3, 3), split
    again = daemon.cli_json("repartition", "--job", "j", "--step", "1", "--gpus", 6, "--model", split_path,
                            "--dry-run", "--json")
    assert again["planned"] == even, again
    r = daemon.cli("repartition", "--job", "j", "--step", "1", "--gpus", 8, "--model", model, "--to", to, check=False)
    assert_error(r, "not both")
    r = daemon.cli("repartition", "--job", "j", "--step", "1", "--gpus", 8, check=False)
    assert_error(r, "--gpus N and --model MODEL.json go together")
    r = daemon.cli("repartition", "--job", "j", "--step", "1", check=False)
    assert_error(r, "--to tp=T,pp=P,dp=D, --chunks FILE, or --gpus N --model MODEL.json")


# ---------------------------------------------------------------------------------------
# ptcfs allocate

SMALL_GPT = {"layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 51200, "seq": 2048,
             "global_batch": 512,
             "gpu": {"memory_gb": 80, "tflops": 312, "per_node": 8, "intra_node_gbps": 2400, "inter_node_gbps": 200}}


def allocate_json(jobs_path, gpus, *extra):
    return json.loads(run("allocate", "--jobs", jobs_path, "--gpus", gpus, *extra, "--json").stdout)


def test_allocate_maximises_total_throughput_as_brute_force_does(tmp_path):
    import itertools
    import random
    rng = random.Random(2020)
    for round_ in range(20):
        gpus = rng.randint(1, 12)
        jobs = []
        for i in range(rng.randint(1, 4)):
            counts = sorted(rng.sample(range(1, 13), rng.randint(1, 5)))
            lo = counts[0]
            jobs.append({"name": f"j{i}", "min_gpus": lo, "max_gpus": 12,
                         "throughput": {str(c): rng.randint(0, 1000) for c in counts}})
        if any(j["min_gpus"] > gpus for j in jobs):
            continue
        path = write(tmp_path, f"jobs{round_}.json", {"jobs": jobs})
        # First come, first served, then every choice of the admitted jobs' points.
        admitted, need = [], 0
        for j in jobs:
            if need + j["min_gpus"] > gpus:
                break
            admitted.append(j)
            need += j["min_gpus"]
        best = max(sum(j["throughput"][str(c)] for j, c in zip(admitted, choice))
                   for choice in itertools.product(*[[int(c) for c in j["throughput"] if int(c) <= gpus]
                                                     for j in admitted])
                   if sum(choice) <= gpus)
        out = allocate_json(path, gpus)
        assert out["samples_per_s"] == best, (jobs, gpus, out)
        assert out["gpus_used"] == sum(j["gpus"] for j in out["jobs"]) <= gpus
        assert [j["name"] for j in out["jobs"] if j["queued"]] == [j["name"] for j in jobs[len(admitted):]]
        for j, spec in zip(out["jobs"], jobs):
            if not j["queued"]:
                assert spec["throughput"][str(j["gpus"])] == j["samples_per_s"]


def test_allocate_a_modelled_job_at_the_planners_best(tmp_path):
    jobs = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "throughput": {"1": 10, "2": 19, "4": 30, "8": 40}},
                     {"name": "gpt", "min_gpus": 8, "max_gpus": 16, "model": SMALL_GPT}]}
    path = write(tmp_path, "jobs.json", jobs)
    out = allocate_json(path, 12)
    a, gpt = out["jobs"]
    assert a["gpus"] + gpt["gpus"] == out["gpus_used"] <= 12
    model = write(tmp_path, "gpt.json", SMALL_GPT)
    best = plan_json(model, gpt["gpus"])[0]
    assert gpt["config"] == {k: best[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "virtual_stages")}
    assert gpt["samples_per_s"] == pytest.approx(512 / best["step_seconds"], rel=1e-12)
    # Every count of 8..12 against a's points: the allocation is the best of them.
    totals = {}
    for g in range(8, 13):
        rate = 512 / plan_json(model, g)[0]["step_seconds"]
        for c, v in jobs["jobs"][0]["throughput"].items():
            if int(c) + g <= 12:
                totals[(int(c), g)] = v + rate
    assert out["samples_per_s"] == pytest.approx(max(totals.values()), rel=1e-12)
    assert totals[(a["gpus"], gpt["gpus"])] == pytest.approx(out["samples_per_s"], rel=1e-12)

    text = run("allocate", "--jobs", path, "--gpus", 12).stdout.splitlines()
    assert text[0].startswith(f"{path} on 12 GPUs (throughput): {out['gpus_used']} used")
    assert text[1].split() == ["job", "gpus", "samples/s", "global_batch", "configuration"]
    assert text[2].split()[3] == "-"  # a measured job without a batch range
    assert text[3].split()[:2] == ["gpt", str(gpt["gpus"])]
    assert text[3].split()[3:] == ["512", "tp={tp},pp={pp},dp={dp},micro_batch={micro_batch}".format(**gpt["config"])]
    assert a["global_batch"] is None and gpt["global_batch"] == 512


def test_allocate_chooses_gpus_and_global_batch_as_brute_force_does(tmp_path):
    import itertools
    import random
    rng = random.Random(2029)
    checked = 0
    for round_ in range(20):
        gpus = rng.randint(2, 10)
        jobs = []
        for i in range(rng.randint(1, 3)):
            batches = sorted(rng.sample([32, 64, 128, 256, 512], rng.randint(1, 4)))
            accept = ({"min": batches[0], "max": batches[-1]} if rng.random() < 0.5 else
                      rng.sample(batches, rng.randint(1, len(batches))))
            counts = sorted(rng.sample(range(1, 9), rng.randint(1, 4)))
            jobs.append({"name": f"j{i}", "min_gpus": counts[0], "max_gpus": 8, "batch": accept,
                         "throughput": {str(c): {str(b): rng.randint(0, 1000) for b in batches} for c in counts}})

        def accepted(j, b):
            a = j["batch"]
            return a["min"] <= b <= a["max"] if isinstance(a, dict) else b in a

        def options(j):
            return [(int(c), int(b), r) for c, per in j["throughput"].items() for b, r in per.items()
                    if int(c) <= gpus and accepted(j, int(b))]

        if any(j["min_gpus"] > gpus or not options(j) for j in jobs):
            continue
        admitted, need = [], 0
        for j in jobs:
            smallest = min(c for c, _, _ in options(j))
            if need + smallest > gpus:
                break
            admitted.append(j)
            need += smallest
        best = max(sum(o[2] for o in choice) for choice in itertools.product(*[options(j) for j in admitted])
                   if sum(o[0] for o in choice) <= gpus)
        out = allocate_json(write(tmp_path, f"jobs{round_}.json", {"jobs": jobs}), gpus)
        assert out["samples_per_s"] == best, (jobs, gpus, out)
        assert out["gpus_used"] == sum(j["gpus"] for j in out["jobs"]) <= gpus
        for j, spec in zip(out["jobs"], jobs):
            if j["queued"]:
                assert j["global_batch"] is None
                continue
            assert accepted(spec, j["global_batch"])
            assert spec["throughput"][str(j["gpus"])][str(j["global_batch"])] == j["samples_per_s"]
        checked += 1
    assert checked >= 10


def test_allocate_a_modelled_job_over_a_batch_list_at_the_planners_best(tmp_path):
    jobs = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "batch": [64, 128],
                      "throughput": {"2": {"64": 30, "128": 33}, "4": {"64": 50, "128": 61}}},
                     {"name": "gpt", "min_gpus": 8, "max_gpus": 16, "batch": [256, 1024], "model": SMALL_GPT}]}
    out = allocate_json(write(tmp_path, "jobs.json", jobs), 12)
    a, gpt = out["jobs"]
    # Every (count, batch) of gpt against a's points: the allocation is the best of them.
    totals = {}
    for b in (256, 1024):
        model = write(tmp_path, f"gpt{b}.json", dict(SMALL_GPT, global_batch=b))
        for g in range(8, 13):
            rate = b / plan_json(model, g)[0]["step_seconds"]
            for c, per in jobs["jobs"][0]["throughput"].items():
                for ab, v in per.items():
                    if int(c) + g <= 12:
                        totals[(int(c), int(ab), g, b)] = v + rate
    assert out["samples_per_s"] == pytest.approx(max(totals.values()), rel=1e-12)
    assert totals[(a["gpus"], a["global_batch"], gpt["gpus"], gpt["global_batch"])] == pytest.approx(
        out["samples_per_s"], rel=1e-12)
    best = plan_json(write(tmp_path, "chosen.json", dict(SMALL_GPT, global_batch=gpt["global_batch"])),
                     gpt["gpus"])[0]
    assert gpt["config"] == {k: best[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "virtual_stages")}
    # The chosen batch is the fastest on the chosen count; where batches tie there (8 GPUs: dp 8,
    # no pipeline, the same time per sample), the one listed first.
    rates = {b: b / plan_json(write(tmp_path, f"at{b}.json", dict(SMALL_GPT, global_batch=b)), gpt["gpus"])[0][
        "step_seconds"] for b in (256, 1024)}
    fastest = max(rates.values())
    assert gpt["global_batch"] == min(b for b in rates if rates[b] == pytest.approx(fastest, rel=1e-12))
    r = run("allocate", "--jobs", write(tmp_path, "bad.json", {"jobs": [dict(jobs["jobs"][0], batch={"min": 9})]}),
            "--gpus", 8, check_rc=1)
    assert_error(r, "bad.json: jobs[0] ('a'): batch lacks 'max'")


def test_allocate_queues_jobs_whose_minimum_does_not_fit(tmp_path):
    jobs = {"jobs": [{"name": "big", "min_gpus": 6, "max_gpus": 8, "throughput": {"6": 60, "8": 70}},
                     {"name": "mid", "min_gpus": 4, "max_gpus": 4, "throughput": {"4": 100}},
                     {"name": "small", "min_gpus": 1, "max_gpus": 1, "throughput": {"1": 5}}]}
    out = allocate_json(write(tmp_path, "jobs.json", jobs), 8)
    assert [(j["name"], j["gpus"], j["queued"]) for j in out["jobs"]] == [("big", 8, False), ("mid", 0, True),
                                                                        ("small", 0, True)]
    assert out["samples_per_s"] == 70


def test_allocate_weighs_a_running_jobs_move_over_the_horizon(tmp_path):
    # a ran alone on 4 GPUs; b arrives; 5 GPUs. Unweighed: a1 + b4 (100 + 260) beats a4 + b1
    # (300 + 50). a's change costs 300 s: over --horizon 600 its other options count half
    # (a1 50 + b4 260 = 310 < 350), so it keeps its 4; the JSON gives the options' own rates.
    jobs = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300},
                      "current": {"gpus": 4}, "move_seconds": 300},
                     {"name": "b", "min_gpus": 1, "max_gpus": 4, "throughput": {"1": 50, "2": 90, "4": 260}}]}
    path = write(tmp_path, "jobs.json", jobs)
    out = allocate_json(path, 5, "--horizon", 600)
    assert [(j["name"], j["gpus"], j["samples_per_s"]) for j in out["jobs"]] == [("a", 4, 300), ("b", 1, 50)]
    assert out["samples_per_s"] == 350
    assert [(j["name"], j["gpus"]) for j in allocate_json(path, 5)["jobs"]] == [("a", 1), ("b", 4)]
    assert_error(run("allocate", "--jobs", path, "--gpus", 5, "--policy", "makespan", "--horizon", 600, check_rc=1),
                 "--horizon weighs moves for --policy throughput")


def test_allocate_refuses_bad_input(tmp_path):
    ok = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "throughput": {"1": 10}},
                   {"name": "wide", "min_gpus": 16, "max_gpus": 32, "throughput": {"16": 10}}]}
    path = write(tmp_path, "jobs.json", ok)
    assert_error(run("allocate", "--jobs", path, "--gpus", 8, check_rc=1),
                 "job 'wide' asks for at least 16 GPUs, more than the 8 there are")
    assert_error(run("allocate", "--jobs", path, "--gpus", 0, check_rc=1), "gpus must be at least 1, got 0")
    bad = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "throughput": {"1": 10}, "priority": 1}]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "bad.json", bad), "--gpus", 8, check_rc=1),
                 "bad.json: jobs[0]: unknown key 'priority'")
    bad_model = {"jobs": [{"name": "m", "min_gpus": 1, "max_gpus": 8, "model": dict(SMALL_GPT, layer=3)}]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "badm.json", bad_model), "--gpus", 8, check_rc=1),
                 "badm.json: jobs[0] ('m'): model: unknown key 'layer'")
    huge = {"jobs": [{"name": "huge", "min_gpus": 1, "max_gpus": 2,
                      "model": dict(SMALL_GPT, layers=96, hidden=12288, heads=96, ffn=49152)}]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "huge.json", huge), "--gpus", 8, check_rc=1),
                 "job 'huge': its model runs on no GPU count between 1 and 2", "fits on no configuration of 2 GPUs")
    r = run("allocate", "--jobs", path, "--gpus", 8, "--policy", "fairness", check_rc=None)
    assert r.returncode != 0 and "fairness" in r.stderr
