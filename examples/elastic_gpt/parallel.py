"""Megatron's rank grid and the tensor-parallel communication with its gradients.

Global rank order is Megatron's: rank = t + tp * (d + dp * p) (TP fastest, then DP, then PP).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.distributed as dist


@dataclasses.dataclass
class Grid:
    tp: int
    pp: int
    dp: int
    rank: int
    tp_group: Optional[object] = None
    dp_group: Optional[object] = None

    @property
    def t(self) -> int:
        return self.rank % self.tp

    @property
    def d(self) -> int:
        return (self.rank // self.tp) % self.dp

    @property
    def p(self) -> int:
        return self.rank // (self.tp * self.dp)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def rank_of(self, t: int, d: int, p: int) -> int:
        return t + self.tp * (d + self.dp * p)

    @property
    def first_stage(self) -> bool:
        return self.p == 0

    @property
    def last_stage(self) -> bool:
        return self.p == self.pp - 1

    def make_groups(self) -> None:
        """Every rank creates every group, in the same order (torch.distributed requires it),
        and keeps its own TP group (same d, p) and DP group (same t, p)."""
        for p in range(self.pp):
            for d in range(self.dp):
                g = dist.new_group([self.rank_of(t, d, p) for t in range(self.tp)])
                if (d, p) == (self.d, self.p):
                    self.tp_group = g
        for p in range(self.pp):
            for t in range(self.tp):
                g = dist.new_group([self.rank_of(t, d, p) for d in range(self.dp)])
                if (t, p) == (self.t, self.p):
                    self.dp_group = g


class _CopyToTP(torch.autograd.Function):
    """Entering a TP region: identity forward; the input's gradient is the sum of every TP
    rank's (each used the input for its own columns)."""

    @staticmethod
    def forward(ctx, x, grid):
        ctx.grid = grid
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=ctx.grid.tp_group)
        return g, None


class _ReduceFromTP(torch.autograd.Function):
    """Leaving a row-parallel layer: sum the partial outputs; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x, grid):
        x = x.clone()
        dist.all_reduce(x, group=grid.tp_group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherFromTP(torch.autograd.Function):
    """Concatenate the TP ranks' last dimension (the vocabulary-parallel logits); each rank's
    gradient is its own columns of the (replicated) loss's gradient."""

    @staticmethod
    def forward(ctx, x, grid):
        ctx.grid = grid
        parts = [torch.empty_like(x) for _ in range(grid.tp)]
        dist.all_gather(parts, x.contiguous(), group=grid.tp_group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, g):
        return g.chunk(ctx.grid.tp, dim=-1)[ctx.grid.t].contiguous(), None


def copy_to_tp(x, grid: Grid):
    return x if grid.tp == 1 else _CopyToTP.apply(x, grid)


def reduce_from_tp(x, grid: Grid):
    return x if grid.tp == 1 else _ReduceFromTP.apply(x, grid)


def gather_from_tp(x, grid: Grid):
    return x if grid.tp == 1 else _GatherFromTP.apply(x, grid)
