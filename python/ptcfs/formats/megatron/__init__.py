"""Deriving a PTC from Megatron-style tensor names (global names, global layer index).

The rules (name -> partitioning), for a GPT-style Megatron model:

| name (after an optional prefix ending in '.') | tp_dim | other |
|---|---|---|
| embedding.word_embeddings.weight | 0 | pad_to (vocab padding), stage first |
| embedding.position_embeddings.weight | - | stage first |
| layers.{i}.self_attention.query_key_value.weight / .bias | 0 | parts = qkv_parts, layer i |
| layers.{i}.self_attention.dense.weight | 1 | layer i (row-parallel) |
| layers.{i}.self_attention.dense.bias | - | layer i (added after the all-reduce) |
| layers.{i}.mlp.dense_h_to_4h.weight / .bias | 0 | parts = mlp_parts, layer i |
| layers.{i}.mlp.dense_4h_to_h.weight | 1 | layer i |
| layers.{i}.mlp.dense_4h_to_h.bias | - | layer i |
| layers.{i}.*norm* | - | layer i |
| final_layernorm.* / final_norm.* | - | stage last |
| output_layer.weight | 0 | pad_to, stage last |
| word_embeddings_for_head.weight | 0 | pad_to, stage last (the tied copy on the last stage) |

Megatron Core names take the same rules: linear_qkv as query_key_value, linear_proj as dense,
linear_fc1 as dense_h_to_4h, linear_fc2 as dense_4h_to_h (``decoder.layers.{i}.`` prefix).

The fused QKV projection: ``qkv_parts=3`` (the default) models the non-interleaved layout
[Q; K; V] (each h rows, heads in order inside each): TP rank t holds the t-th chunk of Q, of
K and of V, concatenated, which is exactly the rows its heads need. Megatron's own checkpoint
layout interleaves per head ([head0: q k v][head1: q k v]...); with that layout a plain split
(``qkv_parts=None``) gives each rank its heads, and that is what to pass for real Megatron
checkpoints. ``mlp_parts=2`` is for a fused SwiGLU gate/up projection.

Optimizer state named ``<prefix><param name>`` (prefixes ``optimizer.exp_avg.`` and
``optimizer.exp_avg_sq.`` by default) takes its parameter's partitioning. Names no rule knows
are an error unless ``overrides`` gives their spec (e.g. {"optimizer.step": {"stage": "all"}}):
a TP-split tensor guessed as replicated would be silently wrong.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ... import dtypes as _dt
from ... import ptc as _ptc
from ...errors import invalid

OPTIMIZER_PREFIXES = ("optimizer.exp_avg.", "optimizer.exp_avg_sq.")

_LAYER = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(.+)$")

# The rest of a layer's parameter name, in Megatron's legacy names and in Megatron Core's.
_COLUMN_QKV = {"self_attention.query_key_value.weight", "self_attention.query_key_value.bias",
               "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"}
_COLUMN_MLP = {"mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias"}
_ROW = {"self_attention.dense.weight", "mlp.dense_4h_to_h.weight", "self_attention.linear_proj.weight",
        "mlp.linear_fc2.weight"}
_ATTN_OUT = {"self_attention.dense.weight", "self_attention.linear_proj.weight"}  # row-parallel, over heads
# Row-parallel biases are added after the all-reduce; norms (any name with "norm") are whole.
_REPLICATED = {"self_attention.dense.bias", "mlp.dense_4h_to_h.bias", "self_attention.linear_proj.bias",
               "mlp.linear_fc2.bias"}


def _dtype_name(dt: Any) -> str:
    """A safetensors dtype name from a name, a numpy dtype or a torch dtype."""
    if isinstance(dt, str) and dt in _dt.NUMPY:
        return dt
    s = str(dt)
    if s.startswith("torch."):
        torch_names = {"torch.float64": "F64", "torch.float32": "F32", "torch.float16": "F16",
                       "torch.bfloat16": "BF16", "torch.int64": "I64", "torch.int32": "I32",
                       "torch.int16": "I16", "torch.int8": "I8", "torch.uint8": "U8", "torch.bool": "BOOL"}
        if s in torch_names:
            return torch_names[s]
        raise invalid(f"no safetensors dtype for {s}")
    try:
        name = _dt.safetensors_dtype_of(np.empty(0, dtype=np.dtype(dt)))
    except TypeError:
        name = None
    if name is None:
        raise invalid(f"no safetensors dtype for {dt!r}")
    return name


def _shape_dtype(v: Any, name: str) -> Tuple[list, str]:
    if hasattr(v, "shape") and hasattr(v, "dtype"):  # an array or tensor
        return [int(s) for s in v.shape], _dtype_name(v.dtype)
    try:
        shape, dt = v
    except (TypeError, ValueError):
        raise invalid(f"tensor '{name}': expected (shape, dtype) or an array, got {v!r}") from None
    return [int(s) for s in shape], _dtype_name(dt)


def _rule(name: str, pad_to: int, qkv_parts: Optional[int], mlp_parts: Optional[int],
          qkv_heads: Optional[int] = None, attn_heads: Optional[int] = None) -> Optional[dict]:
    """Partitioning fields of a parameter name, or None when no rule knows it. `qkv_heads`: the
    heads (per part) of the fused QKV, `attn_heads`: those of the attention output's columns."""
    def split(dim, parts=None, heads=None):
        d = {"tp_dim": dim}
        if parts and parts > 1:
            d["parts"] = parts
        if heads:
            d["heads"] = heads
        return d

    m = _LAYER.match(name)
    if m:
        i, rest = int(m.group(1)), m.group(2)
        if rest in _COLUMN_QKV:
            spec = split(0, qkv_parts, qkv_heads)
        elif rest in _ATTN_OUT:
            spec = split(1, heads=attn_heads)
        elif rest in _ROW:
            spec = split(1)
        elif rest in _COLUMN_MLP:
            spec = split(0, mlp_parts)
        elif rest in _REPLICATED or "norm" in rest:
            spec = {}
        else:
            return None
        spec["layer"] = i
        return spec
    if name.endswith("embedding.word_embeddings.weight") or name.endswith("word_embeddings_for_head.weight"):
        return {"tp_dim": 0, "pad_to": pad_to, "stage": "last" if "for_head" in name else "first"}
    if name.endswith("embedding.position_embeddings.weight"):
        return {"stage": "first"}
    if re.search(r"(^|\.)final_(layer)?norm\.[^.]+$", name):
        return {"stage": "last"}
    if name.endswith("output_layer.weight"):
        return {"tp_dim": 0, "pad_to": pad_to, "stage": "last"}
    return None


def infer_megatron(named_shapes_dtypes: Mapping[str, Any], num_layers: Optional[int] = None,
                   tp: int = 1, pp: int = 1, dp: int = 1, pad_to: int = 128,
                   qkv_parts: Optional[int] = 3, mlp_parts: Optional[int] = None,
                   optimizer_prefixes: Sequence[str] = OPTIMIZER_PREFIXES,
                   overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
                   heads: Optional[int] = None, query_groups: Optional[int] = None) -> dict:
    """The PTC of a Megatron-style model.

    `named_shapes_dtypes`: {global name: (global logical shape, dtype)} or {name: array}; a
    dtype is a safetensors name ("BF16"), a numpy dtype or a torch dtype. `num_layers`
    defaults to 1 + the highest layer index seen. `pad_to` is the vocabulary padding
    (Megatron's make-vocab-size-divisible-by). `overrides` maps a name to the partitioning
    fields (tp_dim, parts, pad_to, layer, stage) to use instead of the rules. The result is
    checked against (tp, pp): an uneven split is an error naming the tensor.

    `heads` (Megatron's num_attention_heads) and `query_groups` (num_query_groups; default
    `heads`) put ptc.json's "heads" on the attention tensors, so that no layout splits a head:
    the fused QKV holds `query_groups` groups when interleaved (``qkv_parts=None``), each of its
    3 parts `heads` heads otherwise (equal parts need query_groups == heads); the attention
    output's columns hold `heads` heads."""
    qkv_heads = None
    if heads is not None:
        groups = heads if query_groups is None else query_groups
        if groups < 1 or heads % groups:
            raise invalid(f"infer_megatron: heads ({heads}) is not a multiple of query_groups ({groups})")
        if qkv_parts and qkv_parts > 1 and groups != heads:
            raise invalid(f"infer_megatron: qkv_parts={qkv_parts} needs equal parts, but {heads} query heads have "
                          f"{groups} key/value groups (pass qkv_parts=None for Megatron's interleaved QKV)")
        qkv_heads = groups if not qkv_parts or qkv_parts == 1 else heads
    overrides = dict(overrides or {})
    tensors: Dict[str, dict] = {}
    unknown = []
    max_layer = -1
    for name in sorted(named_shapes_dtypes):
        shape, dtype = _shape_dtype(named_shapes_dtypes[name], name)
        base = name
        for prefix in optimizer_prefixes:
            if name.startswith(prefix):
                base = name[len(prefix):]  # optimizer state: its parameter's partitioning
                break
        if name in overrides:
            fields = dict(overrides[name])
        elif base in overrides:
            fields = dict(overrides[base])
        else:
            fields = _rule(base, pad_to, qkv_parts, mlp_parts, qkv_heads, heads)
            if fields is None:
                unknown.append(name)
                continue
        if "layer" in fields:
            max_layer = max(max_layer, fields["layer"])
        tensors[name] = {"dtype": dtype, "shape": shape, **fields}
    if unknown:
        raise invalid(f"infer_megatron: no rule for {len(unknown)} tensor(s): {', '.join(unknown[:8])}"
                      f"{' ...' if len(unknown) > 8 else ''} (give their partitioning in overrides)")
    if num_layers is None:
        num_layers = max_layer + 1
    ptc = {"parallelism": {"tp": int(tp), "pp": int(pp), "dp": int(dp)},
           "num_layers": int(num_layers), "tensors": tensors}
    _ptc.check_layout(ptc, where="infer_megatron")
    return ptc
