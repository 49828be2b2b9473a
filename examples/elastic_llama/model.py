"""A small llama-style decoder (RMSNorm, rotary position embeddings, SwiGLU, grouped-query
attention), written so that tensor parallelism can cut its heads and its hidden layer: the
attention infers its local head counts from the projections it is given (parallel.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 96
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2  # tp must divide it
    hidden: int = 128
    seq: int = 16
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(seq: int, head_dim: int, theta: float):
    """cos and sin of the rotary angles, [seq, head_dim / 2]."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    """x: [batch, seq, heads, head_dim], rotated in pairs of its last dimension."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.head_dim = c.head_dim
        self.wq = nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.heads * c.head_dim, c.dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)  # the local heads (tp cuts them)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        rep = q.shape[2] // k.shape[2]  # grouped-query attention: each kv head serves `rep` q heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.hidden, bias=False)
        self.w2 = nn.Linear(c.hidden, c.dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.eps)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.feed_forward = FeedForward(c)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.eps)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, tokens):
        cos, sin = rotary(tokens.shape[1], self.c.head_dim, self.c.rope_theta)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))
