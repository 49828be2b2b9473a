"""The PTC model: parsing like the daemon, exact slice geometry against ptcgen's oracle."""

import copy
import json

import numpy as np
import pytest

import ptcfs
import ptcgen
from ptcfs import ptc as P


def gpt(tp=2, pp=2, dp=1, layers=4, hidden=64, vocab=100):
    return ptcgen.make_ptc("gpt", tp, pp, dp, layers, hidden, vocab)


def test_stage_assignment_earlier_stages_take_the_remainder():
    assert [list(r) for r in P.stage_layers(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(r) for r in P.stage_layers(4, 3)] == [[0, 1], [2], [3]]
    assert [list(r) for r in P.stage_layers(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert P.stages_of({"layer": 4}, 7, 3) == [1]
    assert P.stages_of({}, 4, 2) == [0]
    assert P.stages_of({"stage": "last"}, 4, 3) == [2]
    assert P.stages_of({"stage": "all"}, 4, 3) == [0, 1, 2]
    assert P.stages_of({"stage": [2, 0]}, 4, 3) == [0, 2]


def test_exact_pieces_of_parts_and_pad_to():
    qkv = {"dtype": "F32", "shape": [12, 2], "tp_dim": 0, "parts": 3}
    assert P.pieces(qkv, 2, 1) == [((0, 2), (2, 4)), ((2, 4), (6, 8)), ((4, 6), (10, 12))]
    full = np.arange(24, dtype=np.float32).reshape(12, 2)
    assert P.split(full, qkv, 2, 1)[:, 0].tolist() == [4, 6, 12, 14, 20, 22]
    emb = {"dtype": "F32", "shape": [10, 1], "tp_dim": 0, "pad_to": 4}
    assert P.padded_size(10, 4, 2) == 16 and P.local_shape(emb, 2) == [8, 1]
    s1 = P.split(np.arange(10, dtype=np.float32).reshape(10, 1), emb, 2, 1)
    assert s1[:, 0].tolist() == [8, 9, 0, 0, 0, 0, 0, 0]
    # a rank that holds only padding: 3 rows, pad_to 1, tp 4 -> c = 1, rank 3 holds row 3 >= 3
    tiny = {"dtype": "F32", "shape": [3], "tp_dim": 0, "pad_to": 1}
    assert P.pieces(tiny, 4, 3) == [] and P.split(np.ones(3, np.float32), tiny, 4, 3).tolist() == [0]
    col = {"dtype": "F32", "shape": [2, 6], "tp_dim": 1}
    assert P.split(np.arange(12).reshape(2, 6), col, 3, 2).tolist() == [[4, 5], [10, 11]]


@pytest.mark.parametrize("style", ["gpt", "llama"])
@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 2), (4, 1), (1, 4), (2, 3)])
def test_split_and_shard_tensors_match_ptcgen_and_gather_inverts(style, tp, pp):
    ptc = ptcgen.make_ptc(style, 2, 2, 1, layers=5, hidden=128, vocab=300)
    full = ptcgen.full_tensors(ptc, seed=3)
    want = ptcgen.shard_slices(ptc, tp, pp, tensors=full)
    layout = ptcgen.layout(ptc, tp, pp)
    ptc_b = P.with_parallelism(ptc, tp, pp, 1)
    for (t, p), sl in want.items():
        got = P.shard_tensors(ptc_b, t, p)
        assert list(got) == sorted(sl)  # name order
        assert {n: (d, list(s)) for n, (d, s) in got.items()} == {n: (d, list(s)) for n, (d, s) in layout[(t, p)].items()}
        for name, arr in sl.items():
            mine = P.split(full[name], ptc["tensors"][name], tp, t)
            assert mine.dtype == arr.dtype and np.array_equal(mine, arr), (name, t, p)
    for name, spec in ptc["tensors"].items():
        ranks = tp if "tp_dim" in spec else 1
        slices = [P.split(full[name], spec, tp, t) for t in range(ranks)]
        assert np.array_equal(P.gather(slices, spec, ranks), full[name]), name


def test_gather_checks_its_input():
    spec = {"dtype": "F32", "shape": [4], "tp_dim": 0}
    with pytest.raises(ptcfs.Error, match="slice of TP rank 1 has shape"):
        P.gather([np.zeros(2), np.zeros(3)], spec, 2)
    with pytest.raises(ptcfs.Error, match="differs between TP ranks"):
        P.gather([np.zeros(4), np.ones(4)], {"dtype": "F32", "shape": [4]}, 2)


def bad(ptc, path, value, delete=False):
    out = copy.deepcopy(ptc)
    obj = out
    for k in path[:-1]:
        obj = obj[k]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return out


EMB = ("tensors", "embedding.word_embeddings.weight")


@pytest.mark.parametrize("mutate, text", [
    (lambda p: bad(p, ("extra",), 1), "unknown key 'extra'"),
    (lambda p: bad(p, ("parallelism", "ep"), 1), "parallelism: unknown key 'ep'"),
    (lambda p: bad(p, EMB + ("bias",), True), "tensor 'embedding.word_embeddings.weight': unknown key 'bias'"),
    (lambda p: bad(p, ("parallelism", "tp"), True), "parallelism.tp: expected an integer, got true"),
    (lambda p: bad(p, ("parallelism", "tp"), 2.0), "expected an integer, got 2.0"),
    (lambda p: bad(p, ("parallelism", "dp"), 0), "0 is outside [1,"),
    (lambda p: bad(p, ("parallelism", "dp"), None, delete=True), "missing 'dp'"),
    (lambda p: bad(p, EMB + ("dtype",), "F33"), "unknown dtype \"F33\""),
    (lambda p: bad(p, EMB + ("tp_dim",), 2), "tp_dim: 2 is outside [0, 1]"),
    (lambda p: bad(p, EMB + ("parts",), 2), "'pad_to' and 'parts' cannot be combined"),
    (lambda p: bad(p, EMB + ("layer",), 0), "either 'layer' or 'stage'"),
    (lambda p: bad(p, EMB + ("stage",), "middle"), "stage 'middle'"),
    (lambda p: bad(p, EMB + ("stage",), [0, 0]), "repeats an index"),
    (lambda p: bad(p, ("tensors", "layers.0.input_layernorm.weight", "layer"), 4), "layer: 4 is outside [0, 3]"),
    (lambda p: bad(p, ("tensors", "layers.0.input_layernorm.weight", "parts"), 2), "'parts' needs a 'tp_dim'"),
    (lambda p: bad(p, ("tensors",), {}), "'tensors' must be a non-empty object"),
    (lambda p: bad(p, ("tensors", "a/../b"), {"dtype": "F32", "shape": [1]}), "'.' or '..' path component"),
])
def test_validation_refuses_what_the_daemon_refuses(mutate, text):
    with pytest.raises(ptcfs.Error) as e:
        P.loads(json.dumps(mutate(gpt())), "x/ptc.json")
    assert e.value.code == "invalid_argument"
    assert text in e.value.message and e.value.message.startswith("x/ptc.json"), e.value.message


def test_repeated_keys_are_refused():
    with pytest.raises(ptcfs.Error, match="key 'tp' is repeated"):
        P.loads('{"parallelism": {"tp": 1, "tp": 2, "pp": 1, "dp": 1}, "tensors": {"a": {"dtype": "U8", "shape": []}}}')


@pytest.mark.parametrize("tp, pp, text", [
    (2, 5, "more pipeline stages (5) than layers (4)"),
    (3, 1, "tensor 'layers.0.self_attention.dense.weight': dimension 1 of size 64 does not split"),
])
def test_layouts_that_do_not_split_are_refused(tp, pp, text):
    with pytest.raises(ptcfs.Error) as e:
        P.with_parallelism(gpt(), tp, pp, 1)
    assert text in e.value.message


QKV = ("tensors", "layers.0.self_attention.query_key_value.weight")  # [192, 64]: 3 x hidden rows


def test_heads_are_read_written_and_refuse_a_tp_that_splits_a_head():
    ptc = bad(gpt(), QKV + ("heads",), 4)  # 4 heads of 48 rows (q, k, v of 16 each, interleaved)
    assert P.loads(json.dumps(ptc))["tensors"][QKV[1]]["heads"] == 4
    assert json.loads(P.dumps(ptc))["tensors"][QKV[1]]["heads"] == 4
    P.check_layout(ptc, tp=2)
    P.check_layout(ptc, tp=4)
    # tp=8 divides the 192 rows (24 each) but not the 4 heads.
    assert P.local_shape(gpt()["tensors"][QKV[1]], 8) == [24, 64]
    with pytest.raises(ptcfs.Error) as e:
        P.with_parallelism(ptc, 8, 2, 1)
    assert e.value.message == ("ptc.json: config tp=8,pp=2: tensor 'layers.0.self_attention.query_key_value.weight': "
                               "dimension 0 holds 4 heads, which tp=8 does not divide (a rank would hold part of a head)")
    with pytest.raises(ptcfs.Error, match="holds 4 heads, which tp=8"):
        P.pieces(ptc["tensors"][QKV[1]], 8, 0)
    with pytest.raises(ptcfs.Error, match="holds 4 heads per part, which tp=8"):
        P.local_shape({"dtype": "F32", "shape": [96, 2], "tp_dim": 0, "parts": 3, "heads": 4}, 8)


@pytest.mark.parametrize("mutate, text", [
    (lambda p: bad(p, QKV + ("heads",), 5), "shape[0] (192) is not 5 equal heads"),
    (lambda p: bad(p, QKV + ("heads",), 0), "heads: 0 is outside [1,"),
    (lambda p: bad(p, QKV + ("heads",), "4"), "heads: expected an integer"),
    (lambda p: bad(p, EMB + ("heads",), 2), "'heads' and 'pad_to' cannot be combined"),
    (lambda p: bad(p, ("tensors", "layers.0.input_layernorm.weight", "heads"), 2), "'heads' needs a 'tp_dim'"),
])
def test_bad_heads_are_refused_as_the_daemon_refuses_them(mutate, text):
    with pytest.raises(ptcfs.Error) as e:
        P.loads(json.dumps(mutate(gpt())), "x/ptc.json")
    assert text in e.value.message, e.value.message


def test_stage_list_beyond_pp_is_refused():
    p = bad(gpt(pp=1), ("tensors", "extra/rng_state", "stage"), [0, 3])
    with pytest.raises(ptcfs.Error, match="placed on stage 3 but there are only 2 stages"):
        P.check_layout(p, 1, 2)


def test_dumps_is_normalized_and_loads_back():
    p = gpt()
    text = P.dumps(p)
    back = P.loads(text)
    assert back["tensors"]["embedding.position_embeddings.weight"]["stage"] == "first"  # made explicit
    assert P.normalize(back) == back and P.dumps(back) == text
    assert json.loads(text) == P.normalize(p)
    assert text.endswith("}\n") and '"dp": 1' in text
