"""Live mesh changes of DTensor state (ptcfs.live.reshard_dtensors) on 4 gloo processes, and its
plan (ptcfs.boxes) against an element-by-element count."""

import itertools
import json
import os
import random

import pytest
import torch.multiprocessing as mp

import live_dtensor_worker
from ptcfs import boxes


def test_fsdp2_and_tp_state_moves_through_three_meshes_bit_exact_with_the_minimum_bytes(tmp_path):
    init = str(tmp_path / "init")
    mp.spawn(live_dtensor_worker.run, args=(4, init, str(tmp_path)), nprocs=4, join=True)
    recs = [json.load(open(os.path.join(tmp_path, f"rank{r}.json"))) for r in range(4)]
    for i, to in enumerate(["dp2", "dp3", "dp2xtp2"]):
        per_rank = [recs[r][i] for r in range(4)]
        assert all(x["to"] == to for x in per_rank)
        assert [x["differ"] for x in per_rank] == [[], [], [], []], to
        stats = [x["stats"] for x in per_rank]
        # Every rank received exactly what it lacked; what was received was sent.
        assert [s["received"] for s in stats] == [s["min"] for s in stats], to
        assert sum(s["sent"] for s in stats) == sum(s["received"] for s in stats) == stats[0]["min_total"]
        ref_loss, new_loss = per_rank[0]["losses"][0]
        assert new_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7), to
    # dp 2 -> dp 3: rank 2 joins with nothing and receives all of its shards.
    joined = recs[2][1]["stats"]
    assert joined["received"] == joined["min"] > 0


def brute_min(held, wanted, dst):
    """Elements of dst's wanted box that dst does not hold, counted one by one."""
    want = wanted[dst]
    own = held.get(dst)
    n = 0
    for idx in itertools.product(*[range(o, o + s) for o, s in zip(*want)]):
        if own is None or not all(o <= i < o + s for i, o, s in zip(idx, *own)):
            n += 1
    return n


def chunks(n, k):
    """torch.chunk's split of n into k: ceil(n/k) each, the last smaller, trailing ones empty."""
    c = -(-n // k)
    return [(min(i * c, n), max(0, min(c, n - i * c))) for i in range(k)]


def grid(shape, parts):
    """The boxes of a Shard-on-every-dim grid, rank order."""
    per_dim = [chunks(n, k) for n, k in zip(shape, parts)]
    return [(tuple(o for o, _ in c), tuple(s for _, s in c)) for c in itertools.product(*per_dim)]


@pytest.mark.parametrize("seed", range(6))
def test_plan_moves_every_element_once_from_a_holder_and_receives_the_minimum(seed):
    rnd = random.Random(seed)
    shape = (rnd.randint(1, 9), rnd.randint(1, 7))
    old = grid(shape, (rnd.randint(1, 4), rnd.randint(1, 3)))
    new = grid(shape, (rnd.randint(1, 4), rnd.randint(1, 3)))
    rep = rnd.randint(1, 2)  # the old boxes replicated over `rep` groups of ranks
    held = {g * len(old) + r: b for g in range(rep) for r, b in enumerate(old)}
    wanted = {r: b for r, b in enumerate(new)}
    p = boxes.plan({"t": held}, {"t": wanted}, {"t": 2})
    cover = {}
    for m in p["moves"]:
        assert m["tensor"] == "t"
        src_box, dst_box = held[m["src_rank"]], wanted[m["dst_rank"]]
        for idx in itertools.product(*[range(a, a + s) for a, s in zip(m["dst"]["start"], m["dst"]["shape"])]):
            g = tuple(i + o for i, o in zip(idx, dst_box[0]))
            src_idx = tuple(gi - o for gi, o in zip(g, src_box[0]))
            assert all(0 <= i < s for i, s in zip(src_idx, src_box[1]))  # the source holds it
            cover.setdefault(m["dst_rank"], []).append(g)
        assert m["bytes"] == 2 * boxes.volume((tuple(m["dst"]["start"]), tuple(m["dst"]["shape"])))
    for r, b in wanted.items():
        got = sorted(cover.get(r, []))
        assert got == sorted(itertools.product(*[range(o, o + s) for o, s in zip(*b)]))  # each once
        st = p["ranks"].get(r, {"min": 0, "received": 0})
        assert st["min"] == st["received"] == 2 * brute_min(held, wanted, r)


def test_replicas_share_the_sending_and_a_hole_is_refused():
    held = {0: ((0,), (8,)), 1: ((0,), (8,))}
    wanted = {2: ((0,), (8,)), 3: ((0,), (8,))}
    p = boxes.plan({"t": held}, {"t": wanted}, {"t": 4})
    assert p["ranks"][0]["sent"] == p["ranks"][1]["sent"] == 32
    with pytest.raises(ValueError, match="tensor 't': rank 2 wants elements at \\[4\\] that no rank holds"):
        boxes.plan({"t": {0: ((0,), (4,))}}, {"t": {2: ((0,), (8,))}}, {"t": 4})


def test_a_target_no_rank_can_fill_fails_every_rank_before_a_byte_moves(tmp_path):
    mp.spawn(live_dtensor_worker.run_bad, args=(4, str(tmp_path / "init"), str(tmp_path)), nprocs=4, join=True)
    errs = [json.load(open(os.path.join(tmp_path, f"bad{r}.json"))) for r in range(4)]
    assert {e[0] for e in errs} == {'Error: invalid_argument: live mesh change: rank 1 wants tensor extra, which no rank holds '
                                     '(nothing was sent)'}
    assert {e[1] for e in errs} == {'Error: invalid_argument: live mesh change: rank 0 wants w as torch.float32 [16, 9], it is '
                                     'torch.float32 [16, 8] (nothing was sent)'}
