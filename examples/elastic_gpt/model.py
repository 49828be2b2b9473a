"""One pipeline stage of the GPT on one TP rank: its parameter slices and its forward pass.

Parameters are a dict {global name: local slice} so they save and load by name. Column-
parallel layers (QKV, h->4h, output head) hold rows of the weight; row-parallel ones (the
attention's dense, 4h->h) hold columns and sum their partial outputs over TP; the word
embedding and the output head are split over the (padded) vocabulary."""

from __future__ import annotations

import math
from typing import Dict, List

import torch
import torch.nn.functional as F

import ptcfs
from config import ModelConfig, init_full, model_ptc, param_shapes
from parallel import Grid, copy_to_tp, gather_from_tp, reduce_from_tp


class Stage:
    def __init__(self, cfg: ModelConfig, grid: Grid, seed: int, device: torch.device):
        self.cfg, self.grid, self.device = cfg, grid, device
        self.ptc = model_ptc(cfg, grid.tp, grid.pp, grid.dp)
        held = ptcfs.shard_tensors(self.ptc, grid.t, grid.p)
        self.layers: List[int] = list(ptcfs.ptc.stage_layers(cfg.layers, grid.pp)[grid.p])
        self.params: Dict[str, torch.nn.Parameter] = {}
        for name, shape in param_shapes(cfg).items():
            if name not in held:
                continue
            spec = self.ptc["tensors"][name]
            local = ptcfs.split(init_full(name, shape, seed), spec, grid.tp, grid.t)
            assert list(local.shape) == held[name][1], name
            self.params[name] = torch.nn.Parameter(torch.from_numpy(local).to(device))

    def P(self, name: str) -> torch.nn.Parameter:
        return self.params[name]

    # -- pieces

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Vocabulary-parallel lookup: each TP rank looks up the tokens in its row range,
        zeros elsewhere, and the sum over TP gives every token's row."""
        w = self.P("embedding.word_embeddings.weight")
        c = w.shape[0]
        lo = self.grid.t * c
        mine = (tokens >= lo) & (tokens < lo + c)
        x = F.embedding((tokens - lo).clamp(0, c - 1), w) * mine.unsqueeze(-1).to(w.dtype)
        x = reduce_from_tp(x, self.grid)
        return x + self.P("embedding.position_embeddings.weight")[: tokens.shape[1]]

    def layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        cfg, g = self.cfg, self.grid
        p = f"layers.{i}."
        h = F.layer_norm(x, (cfg.hidden,), self.P(p + "input_layernorm.weight"), self.P(p + "input_layernorm.bias"))
        h = copy_to_tp(h, g)
        # This rank's heads: its chunk of Q, of K and of V ([Q; K; V] split as 3 parts).
        q, k, v = F.linear(h, self.P(p + "self_attention.query_key_value.weight")).chunk(3, dim=-1)
        b, s, _ = q.shape
        nh, hd = cfg.heads // g.tp, cfg.hidden // cfg.heads
        q, k, v = (y.reshape(b, s, nh, hd).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        ctx = (scores.masked_fill(causal, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, s, nh * hd)
        a = reduce_from_tp(F.linear(ctx, self.P(p + "self_attention.dense.weight")), g)
        x = x + a + self.P(p + "self_attention.dense.bias")
        h = F.layer_norm(x, (cfg.hidden,), self.P(p + "post_attention_layernorm.weight"),
                         self.P(p + "post_attention_layernorm.bias"))
        h = copy_to_tp(h, g)
        m = F.gelu(F.linear(h, self.P(p + "mlp.dense_h_to_4h.weight"), self.P(p + "mlp.dense_h_to_4h.bias")))
        m = reduce_from_tp(F.linear(m, self.P(p + "mlp.dense_4h_to_h.weight")), g)
        return x + m + self.P(p + "mlp.dense_4h_to_h.bias")

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy. The padded vocabulary rows are cut off before the
        softmax, so the loss does not depend on tp's padding."""
        cfg = self.cfg
        h = F.layer_norm(x, (cfg.hidden,), self.P("final_layernorm.weight"), self.P("final_layernorm.bias"))
        h = copy_to_tp(h, self.grid)
        logits = gather_from_tp(F.linear(h, self.P("output_layer.weight")), self.grid)[..., : cfg.vocab]
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """This stage's layers (after the embedding on the first stage)."""
        for i in self.layers:
            x = self.layer(i, x)
        return x
