"""bench/simulate.py's event loop, on hand-made jobs whose end times are worked out by hand,
deciding through the real `ptcfs allocate` (the dynamic program) and by its own static rule."""

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import simulate  # noqa: E402


class FixedCurves:
    """rate(size, gpus, batch) from a function: no planner."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def rate(self, size, gpus, batch):
        return self.fn(gpus, batch)


def two_jobs(work):
    # A at 0, B at 1,800 s; both usable on 1, 2, 4, 8 GPUs; smallest batch 64.
    return [simulate.Job("a", 0.0, "gpt-350m", 64, [1, 2, 4, 8], work),
            simulate.Job("b", 1800.0, "gpt-350m", 64, [1, 2, 4, 8], work)]


def test_static_runs_first_come_first_served_on_one_node(tmp_path):
    curves = FixedCurves(lambda g, b: 10.0 * g)
    jobs = two_jobs(10.0 * 8 * 3600)  # one hour on 8 GPUs
    r = simulate.Run(jobs, curves, 8, str(tmp_path), "static", restart_s=30, link_share=0.5).go()
    # A: starts at 0, runs from 30 s (its restart) for 3,600 s; B waits for its 8 GPUs until then.
    assert r["ends_s"] == [3630.0, 3630.0 + 30 + 3600]
    assert r["jct_s"] == [3630.0, 7260.0 - 1800]
    assert r["reconfigs"] == 0 and r["pause_s"] == 0
    assert r["makespan_s"] == 7260.0


def test_gpus_only_shares_the_gpus_and_pays_for_each_change(tmp_path):
    # Concave: the dynamic program gives A all 8 GPUs alone, then 4 and 4 (2 + 2 = 4 units of
    # speed-up against sqrt(8) for one job on 8, or 2 + sqrt(2) for 4 and 2).
    curves = FixedCurves(lambda g, b: 10.0 * math.sqrt(g))
    work = 10.0 * math.sqrt(8) * 3600
    jobs = two_jobs(work)
    r = simulate.Run(jobs, curves, 8, str(tmp_path), "gpus-only", restart_s=30, link_share=0.5).go()
    pause = 30 + 16 * simulate.params("gpt-350m") / (simulate.GPU["inter_node_gbps"] / 8 * 1e9 * 0.5)
    # A: 8 GPUs from 30 s to 1,800 s, then 4 GPUs after its pause.
    left_a = work - 10 * math.sqrt(8) * (1800 - 30)
    end_a = 1800 + pause + left_a / (10 * 2)
    # B: 4 GPUs from 1,830 s (it starts: a restart) until A ends, then 8 GPUs after its own pause.
    left_b = work - 10 * 2 * (end_a - 1830)
    end_b = end_a + pause + left_b / (10 * math.sqrt(8))
    assert r["ends_s"] == pytest.approx([end_a, end_b], rel=1e-9)
    assert r["reconfigs"] == 2
    assert r["pause_s"] == pytest.approx(2 * pause, rel=1e-12)
    assert r["decisions"] == 3  # A arrives, B arrives, A ends (B's end leaves no one to decide for)


def test_moves_weighed_keep_a_job_where_a_short_horizon_does_not_pay_for_its_move(tmp_path):
    # As above, with `allocate --horizon 60`: a change costs each job its pause (about 30.5 s), so a
    # running job's other options count at f = 1 - pause / 60 (about 0.49). At B's arrival A still
    # shrinks to 4 (it cannot keep 8: B needs one), but when A ends B keeps its 4 GPUs: on 8 it
    # would count f x sqrt(8), about 1.4, against 2 on its current 4.
    curves = FixedCurves(lambda g, b: 10.0 * math.sqrt(g))
    work = 10.0 * math.sqrt(8) * 3600
    jobs = two_jobs(work)
    r = simulate.Run(jobs, curves, 8, str(tmp_path), "gpus-only", restart_s=30, link_share=0.5, horizon_s=60).go()
    pause = 30 + 16 * simulate.params("gpt-350m") / (simulate.GPU["inter_node_gbps"] / 8 * 1e9 * 0.5)
    assert 0 < 1 - pause / 60 < 2 / math.sqrt(8)
    left_a = work - 10 * math.sqrt(8) * (1800 - 30)
    end_a = 1800 + pause + left_a / (10 * 2)
    end_b = 1830 + work / (10 * 2)  # on 4 GPUs from its start to its end
    assert r["ends_s"] == pytest.approx([end_a, end_b], rel=1e-9)
    assert r["reconfigs"] == 1
    assert r["pause_s"] == pytest.approx(pause, rel=1e-12)


def test_summary_counts_jobs_done_within_the_window():
    res = {"jct_s": [10.0, 30.0, 50.0], "ends_s": [10.0, 40.0, 90.0]}
    s = simulate.summary(res, 40.0)
    assert s["completed_in_window"] == 2
    assert s["avg_jct_s"] == 30.0
