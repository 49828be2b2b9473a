"""ptcfs.live: real gloo processes reshard a GPT-style state through
tp=2,pp=2,dp=1 -> tp=1,pp=2,dp=2 -> tp=1,pp=1,dp=1 -> tp=2,pp=2,dp=1 without a checkpoint; every
tensor equals the ptcgen oracle's slice bit for bit, and the bytes each rank sends and receives
are the plan's, whose minimum an independent count (element sets from ptcgen) confirms."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

import live_worker  # noqa: E402
import ptcgen  # noqa: E402
from ptcfs import Error, live  # noqa: E402

CONFIGS = [(2, 2, 1), (1, 2, 2), (1, 1, 1), (2, 2, 1)]


def small_ptc():
    # vocab 200 pads to 256 at tp=1 and tp=2; dense_h_to_4h is fused (two parts).
    return ptcgen.make_ptc("gpt", tp=2, pp=2, dp=1, layers=4, hidden=32, vocab=200, max_seq=16)


def run_ranks(tmp_path, ptc, configs, chunk_bytes, staging_bytes):
    world = max(t * p * d for t, p, d in configs)
    init = str(tmp_path / "init")
    mp.spawn(live_worker.run, args=(world, init, str(tmp_path), ptc, configs, chunk_bytes, staging_bytes),
             nprocs=world, join=True)
    return [json.load(open(tmp_path / f"r{r}.json")) for r in range(world)]


def independent_min(ptc, frm, to, rank):
    """Bytes rank `rank` lacks for its new slices: elements of its new slices (by global index,
    from ptcgen) that its old slices do not hold, times the element size."""
    world_from = frm[0] * frm[1] * frm[2]

    def held(cfg, tensors):
        tp, pp, dp = cfg
        if rank >= tp * pp * dp:
            return {}
        t, p = rank % tp, rank // (tp * dp)
        return ptcgen.shard_slices(ptc, tp, pp, tensors=tensors)[(t, p)]

    index = {n: np.arange(1, int(np.prod(s["shape"])) + 1, dtype=np.int64).reshape(s["shape"])
             for n, s in ptc["tensors"].items()}  # 0 is padding
    old = held(frm, index) if rank < world_from else {}
    total = 0
    for n, new in held(to, index).items():
        need = set(np.unique(new).tolist()) - {0}
        have = set(np.unique(old[n]).tolist()) if n in old else set()
        total += len(need - have) * ptcgen.itemsize(ptc["tensors"][n]["dtype"])
    return total


@pytest.mark.parametrize("chunk_bytes,staging_bytes", [(16 << 20, 64 << 20), (1000, 4096)],
                         ids=["one-round", "chunked"])
def test_live_reshard_round_trip_matches_the_oracle_and_moves_the_minimum(tmp_path, chunk_bytes, staging_bytes):
    ptc = small_ptc()
    ranks = run_ranks(tmp_path, ptc, CONFIGS, chunk_bytes, staging_bytes)
    for i, (frm, to) in enumerate(zip(CONFIGS, CONFIGS[1:])):
        p = live.reshard_plan(ptc, frm, to)
        assert p["bytes_min"] > 0
        sent = 0
        for r, records in enumerate(ranks):
            rec = records[i]
            st = rec["stats"]
            assert rec["differ"] == [], (frm, to, r)
            assert st["sent"] == st["plan_sent"] == p["ranks"][r]["sent"]
            assert st["received"] == st["plan_received"] == st["min"] == independent_min(ptc, frm, to, r)
            assert st["staging_peak"] <= staging_bytes or st["rounds"] > 1
            sent += st["sent"]
        assert sent == p["bytes_min"] == sum(p["ranks"][r]["min"] for r in range(len(ranks)))
        if staging_bytes != 4096:  # one round: whole rows of a slice went without a staging copy
            assert any(rec[i]["stats"]["staging_peak"] < rec[i]["stats"]["sent"] + rec[i]["stats"]["received"]
                       for rec in ranks), (frm, to)
        rounds = ranks[0][i]["stats"]["rounds"]
        if staging_bytes == 4096:
            assert rounds == len(live.rounds(p, chunk_bytes, staging_bytes)) > 1
            assert all(ranks[r][i]["stats"]["staging_peak"] <= staging_bytes for r in range(len(ranks)))
        else:
            assert rounds == 1


def test_plan_of_tp2_to_tp1_names_the_rows_rank_1_sends():
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0,
           "tensors": {"a": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0}, "b": {"dtype": "F32", "shape": [3]}}}
    p = live.reshard_plan(ptc, (2, 1, 1), "tp=1,pp=1,dp=1")
    assert p["bytes_min"] == 16
    assert p["moves"][1] == {"tensor": "a", "src_rank": 1, "dst_rank": 0, "bytes": 16,
                             "src": {"start": [0, 0], "shape": [2, 2]}, "dst": {"start": [2, 0], "shape": [2, 2]}}
    assert [(r["min"], r["sent"], r["received"]) for r in p["ranks"]] == [(16, 0, 16), (0, 16, 0)]
    assert [len(r) for r in live.rounds(p, chunk_bytes=8, staging_bytes=8)] == [1, 1]


def test_plan_refuses_a_config_that_does_not_fit():
    with pytest.raises(Error) as e:
        live.reshard_plan(small_ptc(), (3, 1, 1), (1, 1, 1))
    assert e.value.code == "invalid_argument"


def test_live_plan_command_prints_the_plan_reshard_runs(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "ptc.json"
    path.write_text(json.dumps(small_ptc()))
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python")}
    base = [sys.executable, "-m", "ptcfs", "live-plan", str(path), "--from", "tp=2,pp=2,dp=1", "--to", "tp=1,pp=2,dp=2"]
    r = subprocess.run(base + ["--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == live.reshard_plan(small_ptc(), (2, 2, 1), (1, 2, 2))
    r = subprocess.run(base, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "live plan tp=2,pp=2,dp=1 -> tp=1,pp=2,dp=2: 142 moves, 144640 bytes between ranks (the minimum)"
    assert lines[2].split() == ["0", "tp0-pp0", "tp0-pp0", "41152", "37568", "37568"]
    r = subprocess.run(base[:-1] + ["tp=3,pp=1,dp=1"], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "invalid_argument: live plan to tp=3,pp=1,dp=1" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
def test_nccl_communicator_says_it_needs_cuda_where_there_is_none():
    with pytest.raises(Error) as e:
        live.NcclComm()
    assert e.value.code == "unavailable"
    assert e.value.message == "NcclComm needs CUDA: torch sees no GPU in this process"


@pytest.mark.parametrize("fault, says", [
    ("f16", "the state of rank 1 does not fit the PTC (nothing was sent): rank 1 (tp1-pp0 of tp=2,pp=2,dp=1): "
            "tensor 'layers.0.self_attention.query_key_value.weight' is torch.float16 [48, 32], its slice is "
            "torch.bfloat16 [48, 32]"),
    ("whole", "the state of rank 1 does not fit the PTC (nothing was sent): rank 1 (tp1-pp0 of tp=2,pp=2,dp=1): "
              "tensor 'layers.0.self_attention.query_key_value.weight' is torch.bfloat16 [96, 32], its slice is "
              "torch.bfloat16 [48, 32]"),
])
def test_a_rank_whose_state_does_not_fit_fails_every_rank_before_a_byte_moves(tmp_path, fault, says):
    outcomes = run_faulty(tmp_path, fault)
    assert outcomes == ["Error: invalid_argument: live reshard: " + says] * 4, outcomes


def test_a_rank_with_another_plan_fails_every_rank_fast_naming_it(tmp_path):
    outcomes = run_faulty(tmp_path, "other_to")
    want = "Error: invalid_argument: live reshard: rank{} {} called with another PTC, from or to than rank {} " \
           "(nothing was sent)"
    assert outcomes == [want.format("", 1, 0), want.format("s", "0, 2, 3", 1), want.format("", 1, 2),
                        want.format("", 1, 3)], outcomes


def run_faulty(tmp_path, fault, timeout=120):
    """Outcomes of 4 ranks resharding tp=2,pp=2,dp=1 -> tp=1,pp=1,dp=1 with rank 1 at fault; every rank
    must return within `timeout` seconds (a hang is a failure, not a wait for gloo's 30 minutes)."""
    import time
    ptc = small_ptc()
    ctx = mp.spawn(live_worker.run_faulty, args=(4, str(tmp_path / "init"), str(tmp_path), ptc, (2, 2, 1),
                                                 (1, 1, 1), fault), nprocs=4, join=False)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"ranks still running after {timeout} s")
    return [json.load(open(tmp_path / f"r{r}.json")) for r in range(4)]
