"""A ZeRO-style distributed optimizer (Megatron's --use-distributed-optimizer, in miniature).

Each DP rank of a (t, p) shard owns one contiguous flat range of every parameter (elements
[lo, hi) in C order, `dp_range`) and keeps Adam's exp_avg and exp_avg_sq for that range only:
1/dp of the optimizer memory. An iteration updates only the owned range of each parameter,
then all-gathers the updated ranges over DP so every replica holds the whole parameter again.

The gradients are still all-reduced (pipeline.average_gradients): a rank then reads only its
range of the average, which is exactly what Megatron's reduce-scatter would hand it; gloo in
torch 1.13 has no reduce_scatter. The update is Adam's elementwise formula on the same
numbers, so the losses equal those of the plain optimizer (optim.Adam) to float tolerance.

On save, each DP rank writes its ranges of the moments into tp{t}-pp{p}/<name>.npy
(ptcfs.save_tensor_range); on resume at any dp it reads its new ranges back (ckpt.py)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from optim import adam_update
from parallel import Grid


def dp_range(numel: int, dp: int, d: int) -> Tuple[int, int]:
    """DP rank d's elements [lo, hi) of a tensor of `numel` elements: dp contiguous ranges,
    as even as possible (sizes differ by at most one), in rank order."""
    return numel * d // dp, numel * (d + 1) // dp


class DistributedAdam:
    def __init__(self, params: Dict[str, torch.nn.Parameter], lr: float, beta1: float, beta2: float,
                 eps: float, grid: Grid):
        self.params, self.grid = params, grid
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        # Every rank's ranges, not only its own: the all-gather unpacks them all.
        self.all_ranges: List[Dict[str, Tuple[int, int]]] = [
            {n: dp_range(p.numel(), grid.dp, d) for n, p in params.items()} for d in range(grid.dp)]
        self.ranges = self.all_ranges[grid.d]
        self.exp_avg = {n: p.new_zeros(hi - lo) for n, p in params.items() for lo, hi in [self.ranges[n]]}
        self.exp_avg_sq = {n: p.new_zeros(hi - lo) for n, p in params.items() for lo, hi in [self.ranges[n]]}
        self.step_count = 0

    @torch.no_grad()
    def step(self) -> None:
        """Adam on the owned range of every parameter, then the all-gather of the ranges."""
        self.step_count += 1
        for n, p in self.params.items():
            lo, hi = self.ranges[n]
            if lo == hi:
                continue
            w = p.data.view(-1)[lo:hi]  # a view: the update lands in the parameter itself
            adam_update(w, p.grad.reshape(-1)[lo:hi], self.exp_avg[n], self.exp_avg_sq[n], self.step_count, self.lr,
                        self.beta1, self.beta2, self.eps)
        self._all_gather()

    def _all_gather(self) -> None:
        """One all-gather per iteration: each rank packs its ranges of every parameter into
        one buffer (all_gather needs equal sizes: padded to the largest rank's total), and
        every rank copies every other rank's ranges into its parameters."""
        g = self.grid
        if g.dp == 1:
            return
        names = list(self.params)
        totals = [sum(hi - lo for lo, hi in r.values()) for r in self.all_ranges]
        size = max(totals)
        first = next(iter(self.params.values()))
        mine = first.new_zeros(size)
        off = 0
        for n in names:
            lo, hi = self.ranges[n]
            mine[off:off + hi - lo] = self.params[n].data.view(-1)[lo:hi]
            off += hi - lo
        bufs = [first.new_empty(size) for _ in range(g.dp)]
        dist.all_gather(bufs, mine, group=g.dp_group)
        for d, buf in enumerate(bufs):
            if d == g.d:
                continue
            off = 0
            for n in names:
                lo, hi = self.all_ranges[d][n]
                self.params[n].data.view(-1)[lo:hi] = buf[off:off + hi - lo]
                off += hi - lo

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None
