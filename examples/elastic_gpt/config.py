"""The model's size, its PTC, and its deterministic initial weights.

Every parallel config starts from identical weights: each FULL tensor is drawn from a seed
per tensor name, and a rank takes its slice of it (ptcfs.split, padding zero-filled)."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Dict, Tuple

import numpy as np

import ptcfs

EXP_AVG, EXP_AVG_SQ, STEP = "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "optimizer.step"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab: int = 100       # logical vocabulary; padded to a multiple of pad_to * tp
    pad_to: int = 8
    hidden: int = 32
    heads: int = 4
    layers: int = 4
    seq: int = 16
    global_batch: int = 8
    micro_batch: int = 2   # per DP rank; a DP rank runs global_batch / dp / micro_batch micro-batches
    # 3e-3, not more: at 1e-2 this model trains at the edge of stability (its loss rises for
    # a few iterations), where the rounding differences between parallel configs grow tenfold
    # per iteration; the losses still agree to 1e-7, but the saved state no longer does
    # (1e-2 apart after 16 iterations). At 3e-3 they stay near 1e-6.
    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


def param_shapes(cfg: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """Global logical shapes of the parameters, under Megatron's names. The QKV weight is
    [Q; K; V] (not interleaved per head), hence parts=3 in the PTC. It has no bias (as in
    Llama, or Megatron with --disable-bias-linear): the K part of a QKV bias has a zero
    gradient in exact arithmetic (softmax ignores a constant added to all of a query's
    scores), so Adam, dividing by the gradient's own scale, would turn its rounding noise
    into updates of lr * noise / eps that differ between parallel configs, and the saved
    state could not be compared across them. The output layer is separate from the word
    embedding (not tied): tying across pipeline stages would need an extra all-reduce of
    their gradients between the first and last stage."""
    h, v = cfg.hidden, cfg.vocab
    s = {"embedding.word_embeddings.weight": (v, h),
         "embedding.position_embeddings.weight": (cfg.seq, h),
         "final_layernorm.weight": (h,), "final_layernorm.bias": (h,),
         "output_layer.weight": (v, h)}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        s.update({p + "input_layernorm.weight": (h,), p + "input_layernorm.bias": (h,),
                  p + "self_attention.query_key_value.weight": (3 * h, h),
                  p + "self_attention.dense.weight": (h, h), p + "self_attention.dense.bias": (h,),
                  p + "post_attention_layernorm.weight": (h,), p + "post_attention_layernorm.bias": (h,),
                  p + "mlp.dense_h_to_4h.weight": (4 * h, h), p + "mlp.dense_h_to_4h.bias": (4 * h,),
                  p + "mlp.dense_4h_to_h.weight": (h, 4 * h), p + "mlp.dense_4h_to_h.bias": (h,)})
    return s


def model_ptc(cfg: ModelConfig, tp: int, pp: int, dp: int) -> dict:
    """The PTC of parameters plus Adam state (each moment partitioned like its parameter)
    and the step count (replicated on every stage), derived from the names."""
    shapes = {}
    for name, shape in param_shapes(cfg).items():
        for prefix in ("", EXP_AVG, EXP_AVG_SQ):
            shapes[prefix + name] = (shape, "F32")
    shapes[STEP] = ((1,), "I64")
    return ptcfs.infer_megatron(shapes, num_layers=cfg.layers, tp=tp, pp=pp, dp=dp, pad_to=cfg.pad_to,
                                qkv_parts=3, overrides={STEP: {"stage": "all"}})


def init_full(name: str, shape: Tuple[int, ...], seed: int) -> np.ndarray:
    """The whole initial tensor, from a generator seeded by (seed, crc32(name))."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    noise = rng.standard_normal(shape, dtype=np.float32)
    if "layernorm.weight" in name:
        return (1.0 + 0.1 * noise).astype(np.float32)
    return (0.02 * noise).astype(np.float32)
