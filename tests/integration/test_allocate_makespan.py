"""`ptcfs allocate --policy makespan`, the real CLI binary: Saturn's joint choice of GPU counts,
GPUs and start times as a MILP solved by GLPK. Checked against a brute force over every choice
of options and every order of the serial schedule (which contains an optimal schedule), for
a schedule that never puts two jobs on one GPU, and for bad input."""

import itertools
import json
import random

import pytest

from test_plan_cli import SMALL_GPT, plan_json, run, write
from ptcfs_harness import assert_error


def makespan_json(path, gpus, *extra):
    return json.loads(run("allocate", "--jobs", path, "--gpus", gpus, "--policy", "makespan", "--json",
                          *extra).stdout)


def serial_schedule(jobs, gpus):
    """jobs: [(gpus, seconds)] in list order; each at the earliest time its GPUs are free."""
    placed = []  # (start, end, gpus)

    def used(t):
        return sum(g for s, e, g in placed if s <= t < e)

    for g, sec in jobs:
        for t in sorted({0.0} | {e for _, e, _ in placed}):
            if used(t) + g <= gpus and all(used(s) + g <= gpus for s, _, _ in placed if t < s < t + sec):
                placed.append((t, t + sec, g))
                break
    return max(e for _, e, _ in placed)


def brute_force(options, gpus):
    best = float("inf")
    for choice in itertools.product(*options):
        for order in itertools.permutations(range(len(choice))):
            best = min(best, serial_schedule([choice[i] for i in order], gpus))
    return best


def check_schedule(out, jobs, gpus):
    """Each job runs samples / rate on exactly its GPU count of distinct ids, no GPU twice at once."""
    by_name = {j["name"]: j for j in jobs}
    assert [j["name"] for j in out["jobs"]] == [j["name"] for j in jobs]
    for j in out["jobs"]:
        spec = by_name[j["name"]]
        assert spec["min_gpus"] <= j["gpus"] <= spec["max_gpus"]
        if "throughput" in spec:
            assert spec["throughput"][str(j["gpus"])] == j["samples_per_s"]
        assert j["seconds"] == pytest.approx(spec["samples"] / j["samples_per_s"], rel=1e-12)
        assert j["end_s"] == pytest.approx(j["start_s"] + j["seconds"], rel=1e-12)
        assert len(j["gpu_ids"]) == len(set(j["gpu_ids"])) == j["gpus"]
        assert all(0 <= i < gpus for i in j["gpu_ids"])
    for a, b in itertools.combinations(out["jobs"], 2):
        if a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"]:
            assert not set(a["gpu_ids"]) & set(b["gpu_ids"]), (a, b)
    assert out["makespan_s"] == max(j["end_s"] for j in out["jobs"])


def test_makespan_equals_brute_force_on_tiny_queues(tmp_path):
    rng = random.Random(1969)
    beat_greedy = 0
    for round_ in range(12):
        gpus = rng.randint(2, 6)
        jobs, options = [], []
        for i in range(rng.randint(2, 4)):
            # Whole-second run times at every count (samples = rate x seconds), faster when wider.
            counts = sorted(rng.sample(range(1, gpus + 1), rng.randint(1, min(3, gpus))))
            secs = sorted(rng.sample(range(1, 10), len(counts)), reverse=True)
            samples = 720
            jobs.append({"name": f"j{i}", "min_gpus": counts[0], "max_gpus": counts[-1], "samples": samples,
                         "throughput": {str(c): samples / s for c, s in zip(counts, secs)}})
            options.append(list(zip(counts, secs)))
        path = write(tmp_path, f"jobs{round_}.json", {"jobs": jobs})
        greedy = makespan_json(path, gpus, "--slots", 2)["greedy_makespan_s"]
        # Slots of exactly 1 s make the program exact for whole-second run times.
        out = makespan_json(path, gpus, "--slots", int(round(greedy)))
        assert out["solver"]["slot_seconds"] == pytest.approx(1.0)
        assert out["solver"]["optimal"] and out["solver"]["gap"] == 0
        assert out["solver"]["name"].startswith("GLPK ")
        check_schedule(out, jobs, gpus)
        best = brute_force(options, gpus)
        assert out["makespan_s"] == pytest.approx(best, rel=1e-12), (jobs, gpus, out)
        beat_greedy += best < out["greedy_makespan_s"] - 1e-9
    assert beat_greedy >= 2


def test_makespan_with_a_modelled_job_and_the_table(tmp_path):
    jobs = [{"name": "bert", "min_gpus": 1, "max_gpus": 8, "samples": 2e6,
             "throughput": {"1": 210.5, "2": 400, "4": 760, "8": 1300}},
            {"name": "gpt", "min_gpus": 4, "max_gpus": 8, "samples": 5e5, "model": SMALL_GPT}]
    path = write(tmp_path, "jobs.json", {"jobs": jobs})
    out = makespan_json(path, 8, "--time-limit", 20)
    check_schedule(out, jobs, 8)
    gpt = out["jobs"][1]
    best = plan_json(write(tmp_path, "gpt.json", SMALL_GPT), gpt["gpus"])[0]
    assert gpt["config"] == {k: best[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "virtual_stages")}
    assert gpt["samples_per_s"] == pytest.approx(512 / best["step_seconds"], rel=1e-12)
    assert out["makespan_s"] <= out["greedy_makespan_s"] + 1e-9
    assert out["jobs"][0]["config"] is None
    assert out["jobs"][0]["global_batch"] is None and gpt["global_batch"] == 512
    text = run("allocate", "--jobs", path, "--gpus", 8, "--policy", "makespan").stdout.splitlines()
    assert text[0].startswith(f"{path} on 8 GPUs (makespan): every job done after ")
    assert text[1].startswith("solver: GLPK ")
    assert text[2].split() == ["job", "gpus", "start_s", "end_s", "GPU", "ids", "configuration"]
    row = text[4].split()
    assert row[:2] == ["gpt", str(gpt["gpus"])]
    assert row[-1] == "tp={tp},pp={pp},dp={dp},micro_batch={micro_batch}".format(**gpt["config"])


def test_makespan_stopped_by_its_time_limit_still_gives_a_valid_schedule(tmp_path):
    rng = random.Random(7)
    jobs = [{"name": f"j{i}", "min_gpus": 1, "max_gpus": 32, "samples": rng.randint(1, 9) * 1e5,
             "throughput": {str(g): 50 * g ** 0.8 for g in (1, 2, 4, 8, 16, 32)}} for i in range(10)]
    path = write(tmp_path, "jobs.json", {"jobs": jobs})
    out = makespan_json(path, 32, "--time-limit", 0.5, "--slots", 200)
    check_schedule(out, jobs, 32)
    s = out["solver"]
    assert s["seconds"] < 5
    # 10 jobs x 6 options x 200 slots is far more than half a second of branch and cut.
    assert not s["optimal"] and (s["gap"] is None or s["gap"] > 0), s
    assert s["bound_slots"] is None or s["bound_slots"] <= s["makespan_slots"] <= s["slots"]
    assert out["makespan_s"] <= out["greedy_makespan_s"] + 1e-9


def test_makespan_refuses_bad_input(tmp_path):
    no_samples = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "throughput": {"1": 10}}]}
    path = write(tmp_path, "jobs.json", no_samples)
    assert_error(run("allocate", "--jobs", path, "--gpus", 8, "--policy", "makespan", check_rc=1),
                 "job 'a' lacks 'samples'")
    wide = {"jobs": [{"name": "w", "min_gpus": 16, "max_gpus": 16, "samples": 10, "throughput": {"16": 10}}]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "w.json", wide), "--gpus", 8, "--policy", "makespan",
                     check_rc=1), "job 'w' asks for at least 16 GPUs, more than the 8 there are")
    bad = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 8, "samples": "many", "throughput": {"1": 10}}]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "b.json", bad), "--gpus", 8, "--policy", "makespan",
                     check_rc=1), "('a'): samples must be a number of samples > 0")
    r = run("allocate", "--jobs", path, "--gpus", 8, "--policy", "makespan", "--slots", 1, check_rc=None)
    assert r.returncode != 0 and "--slots" in r.stderr


def test_allocate_refuses_inputs_it_cannot_hold_before_building_anything(tmp_path):
    # --slots 20000 is in range, but the program's terms grow as the slots squared (it ran out of
    # memory): refused with the size it would need.
    jobs = {"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 1, "samples": 250, "throughput": {"1": 100}},
                     {"name": "b", "min_gpus": 1, "max_gpus": 1, "samples": 250, "throughput": {"1": 100}}]}
    path = write(tmp_path, "two.json", jobs)
    r = run("allocate", "--jobs", path, "--gpus", 1, "--policy", "makespan", "--slots", 20000, check_rc=1)
    assert_error(r, "terms (about")
    assert "use fewer, longer slots (--slots)" in r.stderr
    # A JOBS.json that is a device: refused after 16 MiB, not read to the end.
    assert_error(run("allocate", "--jobs", "/dev/zero", "--gpus", 8, check_rc=1),
                 "/dev/zero: more than 16 MiB; not a file this command reads")
    # 3,000 jobs on 65,536 GPUs: the throughput policy's table would take 750 MiB.
    many = {"jobs": [{"name": f"j{i}", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 10, "2": 19}}
                     for i in range(3000)]}
    assert_error(run("allocate", "--jobs", write(tmp_path, "many.json", many), "--gpus", 65536, check_rc=1),
                 "3000 jobs on 65536 GPUs need a table of 196611000 choices (750 MiB), more than 134217728")
