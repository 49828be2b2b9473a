"""The shape each Megatron-LM parameter must have, from the arguments the checkpoint stores.

Megatron saves its run's ``args`` in every rank file; they fix every parameter's global shape:

| parameter (legacy / Megatron Core name) | shape |
|---|---|
| word_embeddings, output_layer, word_embeddings_for_head | [padded_vocab_size, hidden] |
| position_embeddings | [max_position_embeddings, hidden] |
| query_key_value / linear_qkv weight, bias | [(heads + 2 groups) kv, hidden], [(heads + 2 groups) kv] |
| dense / linear_proj weight, bias | [hidden, heads kv], [hidden] |
| dense_h_to_4h / linear_fc1 weight, bias | [ffn m, hidden], [ffn m] (m = 2 with swiglu) |
| dense_4h_to_h / linear_fc2 weight, bias | [hidden, ffn], [hidden] |
| q_layernorm, k_layernorm | [kv] |
| any other norm | [hidden] |

with hidden = hidden_size, heads = num_attention_heads, kv = kv_channels (default hidden / heads),
groups = num_query_groups with group_query_attention (else heads), ffn = ffn_hidden_size. A size the
args do not give (or give as something other than a positive int) is not checked; the number of
dimensions always is. Without args nothing is checked. (docs/FORMATS.md, "Megatron-LM checkpoints".)
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

from ...errors import invalid

_LAYER = re.compile(r"(?:^|\.)layers\.\d+\.(.+)$")
_QKV = ("self_attention.query_key_value.", "self_attention.linear_qkv.")
_PROJ = ("self_attention.dense.", "self_attention.linear_proj.")
_FC1 = ("mlp.dense_h_to_4h.", "mlp.linear_fc1.")
_FC2 = ("mlp.dense_4h_to_h.", "mlp.linear_fc2.")


def _size(args: Any, name: str) -> Optional[int]:
    v = getattr(args, name, None)
    return v if type(v) is int and v > 0 else None


def _mul(*xs: Optional[int]) -> Optional[int]:
    out = 1
    for x in xs:
        if x is None:
            return None
        out *= x
    return out


def expected(name: str, args: Any) -> Optional[List[Optional[int]]]:
    """The global shape parameter `name` must have (None: a size the args leave open), or None
    when the table above does not cover the name."""
    hidden, heads = _size(args, "hidden_size"), _size(args, "num_attention_heads")
    kv = _size(args, "kv_channels") or (hidden // heads if hidden and heads and hidden % heads == 0 else None)
    groups = _size(args, "num_query_groups") if getattr(args, "group_query_attention", False) is True else heads
    ffn = _size(args, "ffn_hidden_size")
    fc1 = _mul(ffn, 2 if getattr(args, "swiglu", False) is True else 1)
    qkv = _mul(kv, heads + 2 * groups) if heads and groups else None
    weight = name.endswith(".weight")
    m = _LAYER.search(name)
    if m:
        rest = m.group(1)
        if rest.startswith(_QKV) and rest.endswith((".weight", ".bias")):
            return [qkv, hidden] if weight else [qkv]
        if rest.startswith(_PROJ) and rest.endswith((".weight", ".bias")):
            return [hidden, _mul(heads, kv)] if weight else [hidden]
        if rest.startswith(_FC1) and rest.endswith((".weight", ".bias")):
            return [fc1, hidden] if weight else [fc1]
        if rest.startswith(_FC2) and rest.endswith((".weight", ".bias")):
            return [hidden, ffn] if weight else [hidden]
        if "q_layernorm." in rest or "k_layernorm." in rest:
            return [kv]
        if "norm" in rest:
            return [hidden]
        return None
    if name.endswith(("word_embeddings.weight", "output_layer.weight", "word_embeddings_for_head.weight")):
        return [_size(args, "padded_vocab_size"), hidden]
    if name.endswith("position_embeddings.weight"):
        return [_size(args, "max_position_embeddings"), hidden]
    if re.search(r"(^|\.)final_(layer)?norm\.[^.]+$", name):
        return [hidden]
    return None


def check(name: str, shape: List[int], args: Any, where: str) -> None:
    """Refuses a parameter (or its optimizer state, by the parameter's `name`) whose global
    `shape` the checkpoint's own args contradict."""
    if args is None:
        return
    want = expected(name, args)
    if want is None:
        return
    if len(want) != len(shape) or any(w is not None and w != s for w, s in zip(want, shape)):
        shown = "[" + ", ".join("?" if w is None else str(w) for w in want) + "]"
        raise invalid(f"{where} has shape {list(shape)}; the checkpoint's args (hidden_size, num_attention_heads, "
                      f"kv_channels, num_query_groups, ffn_hidden_size, padded_vocab_size, ...) say {shown}")
