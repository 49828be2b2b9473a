"""Writes Megatron-LM checkpoints with torch, in the layout Megatron-LM writes, from global tensors.

The oracle for the Megatron importer, written from Megatron-LM's code (megatron/training/
checkpointing.py: get_checkpoint_name, generate_state_dict; megatron/legacy/model: the
state_dict_for_save_checkpoint nesting; megatron/core/optimizer: param groups by weight
decay, Float16OptimizerWithFloat16Params' state_dict) and not from ptcfs: every split here is
torch.chunk / torch.cat the way Megatron's parallel layers cut their weights.

`model(...)` gives the global tensors by global name, `write(...)` the save directory; the
expected PTC-side names are the global names themselves (dot-joined state-dict paths with
global layer numbers), optimizer state under optimizer.exp_avg. / exp_avg_sq. / fp32_param.
"""

from __future__ import annotations

import argparse
import io
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

COLUMN = ("query_key_value", "dense_h_to_4h", "linear_qkv", "linear_fc1")  # split dim 0
ROW = ("self_attention.dense.weight", "dense_4h_to_h.weight", "linear_proj.weight", "linear_fc2.weight")


class Spec:
    def __init__(self, layers=4, hidden=16, heads=4, ffn=64, vocab=100, seq=32, divisible_by=4, tp=2, pp=2, vp=1,
                 dtype=torch.float16, swiglu=False, tied=True, mcore=False, optimizer=True, seed=0):
        self.__dict__.update(locals())
        del self.__dict__["self"]
        self.padded_vocab = -(-vocab // (divisible_by * tp)) * divisible_by * tp

    @property
    def prefix(self) -> Tuple[str, str]:
        """(layer prefix, final norm prefix)"""
        return ("decoder.", "decoder.final_layernorm.") if self.mcore else \
            ("language_model.encoder.", "language_model.encoder.final_norm.")


def _layer_names(s: Spec, i: int) -> List[Tuple[str, Tuple[int, ...]]]:
    h, f = s.hidden, s.ffn * (2 if s.swiglu else 1)
    p = f"{s.prefix[0]}layers.{i}."
    if s.mcore:
        return [(p + "self_attention.linear_qkv.layer_norm_weight", (h,)),
                (p + "self_attention.linear_qkv.layer_norm_bias", (h,)),
                (p + "self_attention.linear_qkv.weight", (3 * h, h)), (p + "self_attention.linear_qkv.bias", (3 * h,)),
                (p + "self_attention.linear_proj.weight", (h, h)), (p + "self_attention.linear_proj.bias", (h,)),
                (p + "mlp.linear_fc1.layer_norm_weight", (h,)), (p + "mlp.linear_fc1.layer_norm_bias", (h,)),
                (p + "mlp.linear_fc1.weight", (f, h)), (p + "mlp.linear_fc1.bias", (f,)),
                (p + "mlp.linear_fc2.weight", (h, s.ffn)), (p + "mlp.linear_fc2.bias", (h,))]
    return [(p + "input_norm.weight", (h,)), (p + "input_norm.bias", (h,)),
            (p + "self_attention.query_key_value.weight", (3 * h, h)),
            (p + "self_attention.query_key_value.bias", (3 * h,)),
            (p + "self_attention.dense.weight", (h, h)), (p + "self_attention.dense.bias", (h,)),
            (p + "post_attention_norm.weight", (h,)), (p + "post_attention_norm.bias", (h,)),
            (p + "mlp.dense_h_to_4h.weight", (f, h)), (p + "mlp.dense_h_to_4h.bias", (f,)),
            (p + "mlp.dense_4h_to_h.weight", (h, s.ffn)), (p + "mlp.dense_4h_to_h.bias", (h,))]


def _emb(s: Spec) -> Tuple[str, str]:
    return ("embedding.", "output_layer.weight") if s.mcore else \
        ("language_model.embedding.", "language_model.output_layer.weight")


def model(s: Spec) -> Dict[str, torch.Tensor]:
    """Global parameters by global name, in Megatron's parameter order (the vocabulary padded
    as Megatron pads it, padding rows random as Megatron initialises them)."""
    g = torch.Generator().manual_seed(s.seed)
    names = [(_emb(s)[0] + "word_embeddings.weight", (s.padded_vocab, s.hidden)),
             (_emb(s)[0] + "position_embeddings.weight", (s.seq, s.hidden))]
    for i in range(s.layers):
        names += _layer_names(s, i)
    names += [(s.prefix[1] + "weight", (s.hidden,)), (s.prefix[1] + "bias", (s.hidden,))]
    if not s.tied:
        names.append((_emb(s)[1], (s.padded_vocab, s.hidden)))
    return {n: torch.randn(shape, generator=g).to(s.dtype) for n, shape in names}


def _split(name: str, x: torch.Tensor, s: Spec, t: int) -> torch.Tensor:
    """TP rank t's slice of a global parameter, as Megatron's parallel layers hold it."""
    if name.endswith(("word_embeddings.weight", "output_layer.weight", "word_embeddings_for_head.weight")):
        return x.chunk(s.tp, 0)[t].clone()  # (the vocabulary is padded to divisible_by x tp)
    if any(r in name for r in ROW):
        return x.chunk(s.tp, 1)[t].clone()
    if any(c + ".weight" in name or c + ".bias" in name for c in COLUMN):
        if s.swiglu and ("dense_h_to_4h" in name or "linear_fc1" in name):
            gate, up = x.chunk(2, 0)  # each rank holds its part of gate, then its part of up
            return torch.cat([gate.chunk(s.tp, 0)[t], up.chunk(s.tp, 0)[t]], 0).clone()
        return x.chunk(s.tp, 0)[t].clone()
    return x.clone()


def _stage_chunks(s: Spec) -> Dict[Tuple[int, int], range]:
    """(chunk v, stage p) -> global layers: Megatron's interleaved assignment."""
    per = s.layers // (s.pp * s.vp)
    return {(v, p): range(v * s.layers // s.vp + p * per, v * s.layers // s.vp + (p + 1) * per)
            for v in range(s.vp) for p in range(s.pp)}


def _nest(flat: Dict[str, torch.Tensor], s: Spec) -> dict:
    """The nesting of GPTModel.state_dict_for_save_checkpoint (legacy), or flat (Megatron Core)."""
    if s.mcore:
        return dict(flat)
    out: dict = {}
    for name, x in flat.items():
        if name.startswith("language_model.embedding."):
            a, b = name[len("language_model.embedding."):].split(".")
            out.setdefault("language_model", {}).setdefault("embedding", {}).setdefault(a, {})[b] = x
        elif name.startswith("language_model.encoder."):
            out.setdefault("language_model", {}).setdefault("encoder", {})[name[len("language_model.encoder."):]] = x
        elif name == "language_model.output_layer.weight":
            out.setdefault("language_model", {}).setdefault("output_layer", {})["weight"] = x
        elif name == "word_embeddings_for_head.weight":
            out.setdefault("word_embeddings_for_head", {})["weight"] = x
        else:
            raise AssertionError(name)
    return out


def rank_params(s: Spec, full: Dict[str, torch.Tensor], t: int, p: int) -> List[List[Tuple[str, str, torch.Tensor]]]:
    """Per model chunk of rank (t, p): [(local name, global name, local slice)] in model order."""
    chunks = []
    emb, out = _emb(s)
    for v in range(s.vp):
        layers = _stage_chunks(s)[(v, p)]
        first, last = (v, p) == (0, 0), (v, p) == (s.vp - 1, s.pp - 1)
        items = []
        for name, x in full.items():
            if name.startswith(emb):
                keep = first
            elif name == out:
                keep = last
            elif name.startswith(s.prefix[1]):
                keep = last
            else:
                i = int(name[len(s.prefix[0]) + len("layers."):].split(".")[0])
                keep = i in layers
                if keep:
                    local = f"{s.prefix[0]}layers.{i - layers.start}." + name.split(f"layers.{i}.", 1)[1]
                    items.append((local, name, _split(name, x, s, t)))
                continue
            if keep:
                items.append((name, name, _split(name, x, s, t)))
        if s.tied and last and s.pp > 1 and not s.mcore:  # the last stage's copy of the embedding
            w = full[emb + "word_embeddings.weight"]
            items.append(("word_embeddings_for_head.weight", "word_embeddings_for_head.weight", _split("word_embeddings_for_head.weight", w, s, t)))
        chunks.append(items)
    return chunks


def _args(s: Spec) -> argparse.Namespace:
    return argparse.Namespace(num_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
                              ffn_hidden_size=s.ffn, kv_channels=s.hidden // s.heads, group_query_attention=False,
                              num_query_groups=None, max_position_embeddings=s.seq, tensor_model_parallel_size=s.tp,
                              pipeline_model_parallel_size=s.pp,
                              virtual_pipeline_model_parallel_size=s.vp if s.vp > 1 else None,
                              make_vocab_size_divisible_by=s.divisible_by, padded_vocab_size=s.padded_vocab,
                              swiglu=s.swiglu, untie_embeddings_and_output_weights=not s.tied,
                              params_dtype=s.dtype, use_distributed_optimizer=False, fp16=s.dtype == torch.float16,
                              bf16=s.dtype == torch.bfloat16, weight_decay=0.1)


def optimizer_truth(s: Spec, full: Dict[str, torch.Tensor]) -> Dict[str, Tuple[torch.Tensor, ...]]:
    """Global (exp_avg, exp_avg_sq, fp32 master) of every parameter: what the TP ranks' Adam
    states are slices of (a replicated parameter's state is the same on every rank)."""
    g = torch.Generator().manual_seed(s.seed + 1)
    names = dict(full)
    if s.tied and s.pp > 1 and not s.mcore:
        names["word_embeddings_for_head.weight"] = full[_emb(s)[0] + "word_embeddings.weight"]
    return {n: (torch.randn(x.shape, generator=g), torch.rand(x.shape, generator=g), torch.randn(x.shape, generator=g))
            for n, x in names.items()}


def optimizer_state(s: Spec, chunks, step: int, truth, t: int) -> dict:
    """Megatron's Float16OptimizerWithFloat16Params.state_dict() for TP rank t."""
    params = [(gname, x) for items in chunks for _, gname, x in items]
    groups = {False: [], True: []}  # no_wd -> params, each in model order
    for gname, x in params:
        groups[gname.endswith(".bias") or x.dim() == 1].append(gname)
    state, param_groups, masters = {}, [], []
    idx = 0
    for no_wd in (False, True):  # Megatron: weight-decay group first
        ids, group_masters = [], []
        for gname in groups[no_wd]:
            a, b, m = (_split(gname, x, s, t) for x in truth[gname])
            state[idx] = {"exp_avg": a, "exp_avg_sq": b, "step": step}
            ids.append(idx)
            group_masters.append(m)
            idx += 1
        param_groups.append({"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0 if no_wd else 0.1,
                             "wd_mult": 0.0 if no_wd else 1.0, "lr_mult": 1.0, "params": ids})
        masters.append(group_masters)
    return {"optimizer": {"state": state, "param_groups": param_groups}, "grad_scaler": {"scale": torch.tensor(4096.0)},
            "fp32_from_fp16_params": masters}


def write(root: str, s: Spec, iteration: int = 1000) -> Tuple[Dict[str, torch.Tensor], Dict[str, Tuple], Dict]:
    """Writes ROOT/latest_checkpointed_iteration.txt and ROOT/iter_XXXXXXX/mp_rank_*/model_optim_rng.pt.
    Returns (global parameters, {global name: global optimizer state}, {(t, p): chunks})."""
    full = model(s)
    opt_truth = optimizer_truth(s, full) if s.optimizer else {}
    d = os.path.join(root, f"iter_{iteration:07d}")
    ranks = {}
    for t in range(s.tp):
        for p in range(s.pp):
            chunks = rank_params(s, full, t, p)
            ranks[(t, p)] = chunks
            sd = {"args": _args(s), "checkpoint_version": 3.0, "iteration": iteration,
                  "rng_state": [{"random_rng_state": (3, tuple(range(10)), None),
                                 "np_rng_state": np.random.RandomState(t).get_state(),
                                 "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.get_rng_state(),
                                 "rng_tracker_states": {}}],
                  "opt_param_scheduler": {"max_lr": 1e-4, "num_steps": iteration}}
            for v, items in enumerate(chunks):
                flat = {local: x for local, _, x in items}
                if s.mcore:  # Transformer Engine layers carry an _extra_state beside their weights
                    flat.update({k.rsplit(".", 1)[0] + "._extra_state": io.BytesIO(b"te") for k in list(flat)
                                 if k.endswith("linear_qkv.weight")})
                sd["model" if s.vp == 1 else f"model{v}"] = _nest(flat, s)
            if s.optimizer:
                sd["optimizer"] = optimizer_state(s, chunks, iteration, opt_truth, t)
            rank = f"mp_rank_{t:02d}" + (f"_{p:03d}" if s.pp > 1 else "")
            os.makedirs(os.path.join(d, rank), exist_ok=True)
            torch.save(sd, os.path.join(d, rank, "model_optim_rng.pt"))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return full, opt_truth, ranks


def numpy_of(x: torch.Tensor) -> np.ndarray:
    """The array a ptcfs view holds for a torch tensor (BF16 as uint16 bits)."""
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def expected(s: Spec, full, opt_truth, vocab_size: Optional[int] = None, iteration: int = 1000) -> Dict[str, np.ndarray]:
    """Every tensor the import must show in full/, by name."""
    out = {n: numpy_of(x) for n, x in full.items()}
    if s.tied and s.pp > 1 and not s.mcore:
        out["word_embeddings_for_head.weight"] = out[_emb(s)[0] + "word_embeddings.weight"]
    for gname, states in opt_truth.items():
        for k, prefix in enumerate(("optimizer.exp_avg.", "optimizer.exp_avg_sq.", "optimizer.fp32_param.")):
            out[prefix + gname] = numpy_of(states[k])
    if opt_truth:
        out["optimizer.step"] = np.array([iteration], dtype=np.int64)
    if vocab_size is not None:
        for n in list(out):
            if n.endswith("word_embeddings.weight") or n.endswith("output_layer.weight") or \
                    n.endswith("word_embeddings_for_head.weight"):
                out[n] = out[n][:vocab_size]
    return out
