"""infer_megatron: the PTC derived from Megatron-style names, exactly."""

import numpy as np
import pytest

import ptcfs
import ptcgen
from ptcfs import ptc as P


def gpt_shapes(h=64, vocab=100, layers=2, seq=16):
    s = {"embedding.word_embeddings.weight": ([vocab, h], "F32"),
         "embedding.position_embeddings.weight": ([seq, h], "F32"),
         "final_layernorm.weight": ([h], "F32"), "final_layernorm.bias": ([h], "F32"),
         "output_layer.weight": ([vocab, h], "F32")}
    for i in range(layers):
        p = f"layers.{i}."
        s.update({p + "input_layernorm.weight": ([h], "F32"), p + "input_layernorm.bias": ([h], "F32"),
                  p + "self_attention.query_key_value.weight": ([3 * h, h], "F32"),
                  p + "self_attention.query_key_value.bias": ([3 * h], "F32"),
                  p + "self_attention.dense.weight": ([h, h], "F32"),
                  p + "self_attention.dense.bias": ([h], "F32"),
                  p + "post_attention_layernorm.weight": ([h], "F32"),
                  p + "mlp.dense_h_to_4h.weight": ([4 * h, h], "F32"),
                  p + "mlp.dense_h_to_4h.bias": ([4 * h], "F32"),
                  p + "mlp.dense_4h_to_h.weight": ([h, 4 * h], "F32"),
                  p + "mlp.dense_4h_to_h.bias": ([h], "F32")})
    return s


def test_gpt_rules_exactly():
    ptc = ptcfs.infer_megatron(gpt_shapes(), tp=2, pp=2, dp=1, pad_to=8)
    T = ptc["tensors"]
    assert ptc["parallelism"] == {"tp": 2, "pp": 2, "dp": 1} and ptc["num_layers"] == 2
    assert T["embedding.word_embeddings.weight"] == {"dtype": "F32", "shape": [100, 64], "tp_dim": 0, "pad_to": 8,
                                                     "stage": "first"}
    assert T["embedding.position_embeddings.weight"] == {"dtype": "F32", "shape": [16, 64], "stage": "first"}
    assert T["layers.1.self_attention.query_key_value.weight"] == {"dtype": "F32", "shape": [192, 64], "tp_dim": 0,
                                                                   "parts": 3, "layer": 1}
    assert T["layers.1.self_attention.query_key_value.bias"] == {"dtype": "F32", "shape": [192], "tp_dim": 0,
                                                                 "parts": 3, "layer": 1}
    assert T["layers.0.self_attention.dense.weight"] == {"dtype": "F32", "shape": [64, 64], "tp_dim": 1, "layer": 0}
    assert T["layers.0.self_attention.dense.bias"] == {"dtype": "F32", "shape": [64], "layer": 0}
    assert T["layers.0.mlp.dense_h_to_4h.weight"] == {"dtype": "F32", "shape": [256, 64], "tp_dim": 0, "layer": 0}
    assert T["layers.0.mlp.dense_h_to_4h.bias"] == {"dtype": "F32", "shape": [256], "tp_dim": 0, "layer": 0}
    assert T["layers.0.mlp.dense_4h_to_h.weight"] == {"dtype": "F32", "shape": [64, 256], "tp_dim": 1, "layer": 0}
    assert T["layers.0.mlp.dense_4h_to_h.bias"] == {"dtype": "F32", "shape": [64], "layer": 0}
    assert T["layers.1.post_attention_layernorm.weight"] == {"dtype": "F32", "shape": [64], "layer": 1}
    assert T["final_layernorm.bias"] == {"dtype": "F32", "shape": [64], "stage": "last"}
    assert T["output_layer.weight"] == {"dtype": "F32", "shape": [100, 64], "tp_dim": 0, "pad_to": 8, "stage": "last"}
    assert len(T) == len(gpt_shapes())


def test_optimizer_state_takes_its_parameters_partitioning():
    shapes = gpt_shapes(layers=1)
    names = list(shapes)
    for n in names:
        shapes["optimizer.exp_avg." + n] = shapes[n]
        shapes["optimizer.exp_avg_sq." + n] = shapes[n]
    shapes["optimizer.step"] = ([1], "I64")
    ptc = ptcfs.infer_megatron(shapes, tp=2, overrides={"optimizer.step": {"stage": "all"}})
    T = ptc["tensors"]
    for n in names:
        assert T["optimizer.exp_avg." + n] == T[n] == T["optimizer.exp_avg_sq." + n], n
    assert T["optimizer.step"] == {"dtype": "I64", "shape": [1], "stage": "all"}


def test_reproduces_ptcgens_gpt_ptc():
    """ptcgen's GPT (plain QKV split, fused 2-part h->4h) from names alone, up to normalization."""
    want = ptcgen.make_ptc("gpt", 2, 2, 1, layers=4, hidden=64, vocab=100)
    shapes = {n: (s["shape"], s["dtype"]) for n, s in want["tensors"].items()}
    got = ptcfs.infer_megatron(shapes, tp=2, pp=2, dp=1, pad_to=128, qkv_parts=None, mlp_parts=2,
                               overrides={"extra/rng_state": {"stage": "all"}})
    assert P.normalize(got) == P.normalize(want)


def test_dtype_forms_and_arrays():
    torch = pytest.importorskip("torch")
    got = ptcfs.infer_megatron({"layers.0.input_layernorm.weight": np.zeros(8, np.float16),
                                "layers.0.self_attention.dense.weight": ([8, 8], torch.bfloat16),
                                "layers.0.mlp.dense_4h_to_h.bias": ([8], np.dtype("float64"))})
    T = got["tensors"]
    assert [T[n]["dtype"] for n in sorted(T)] == ["F16", "F64", "BF16"]
    assert got["num_layers"] == 1


def test_unknown_names_and_uneven_splits_are_errors():
    with pytest.raises(ptcfs.Error, match=r"no rule for 2 tensor\(s\): layers.0.rotary.freqs, step"):
        ptcfs.infer_megatron({"layers.0.rotary.freqs": ([4], "F32"), "step": ([1], "I64"),
                              "layers.0.input_layernorm.weight": ([4], "F32")})
    with pytest.raises(ptcfs.Error, match="tensor 'layers.0.mlp.dense_4h_to_h.weight': dimension 1 of size 256 does not split.*tp=3"):
        ptcfs.infer_megatron(gpt_shapes(), tp=3)
    with pytest.raises(ptcfs.Error, match="more pipeline stages"):
        ptcfs.infer_megatron(gpt_shapes(layers=2), pp=3)


def test_megatron_core_prefixes_are_recognised():
    got = ptcfs.infer_megatron({"decoder.layers.3.self_attention.dense.weight": ([4, 4], "F32"),
                                "decoder.final_layernorm.weight": ([4], "F32")}, tp=2)
    assert got["tensors"]["decoder.layers.3.self_attention.dense.weight"]["layer"] == 3
    assert got["tensors"]["decoder.final_layernorm.weight"]["stage"] == "last"
    assert got["num_layers"] == 4


def test_heads_go_on_the_attention_tensors_and_refuse_a_tp_that_splits_one():
    # 8 heads in 2 key/value groups, Megatron's interleaved QKV: the QKV rows are 2 groups.
    ptc = ptcfs.infer_megatron(gpt_shapes(), tp=2, qkv_parts=None, heads=8, query_groups=2)
    T = ptc["tensors"]
    assert T["layers.0.self_attention.query_key_value.weight"] == {"dtype": "F32", "shape": [192, 64], "tp_dim": 0,
                                                                   "heads": 2, "layer": 0}
    assert T["layers.1.self_attention.query_key_value.bias"]["heads"] == 2
    assert T["layers.0.self_attention.dense.weight"] == {"dtype": "F32", "shape": [64, 64], "tp_dim": 1, "heads": 8,
                                                         "layer": 0}
    assert "heads" not in T["layers.0.mlp.dense_h_to_4h.weight"] and "heads" not in T["layers.0.self_attention.dense.bias"]
    with pytest.raises(ptcfs.Error, match="query_key_value.bias': dimension 0 holds 2 heads, which tp=4 does not"):
        P.with_parallelism(ptc, 4, 1, 1)
    # Non-interleaved [Q; K; V]: each of the 3 parts holds every head.
    mha = ptcfs.infer_megatron(gpt_shapes(), tp=2, heads=8)
    assert mha["tensors"]["layers.0.self_attention.query_key_value.weight"]["heads"] == 8
    assert mha["tensors"]["layers.0.self_attention.query_key_value.weight"]["parts"] == 3
    with pytest.raises(ptcfs.Error, match="qkv_parts=3 needs equal parts"):
        ptcfs.infer_megatron(gpt_shapes(), tp=2, heads=8, query_groups=2)
    with pytest.raises(ptcfs.Error, match=r"heads \(8\) is not a multiple of query_groups \(3\)"):
        ptcfs.infer_megatron(gpt_shapes(), tp=2, qkv_parts=None, heads=8, query_groups=3)
