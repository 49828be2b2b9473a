"""A ZeRO-style distributed optimizer (Megatron's --use-distributed-optimizer, in miniature).

Each DP rank of a (t, p) shard owns one contiguous flat range of every parameter (elements
[lo, hi) in C order, `dp_range`) and keeps Adam's exp_avg and exp_avg_sq for that range only:
1/dp of the optimizer memory. An iteration reduce-scatters the gradients over DP, so that each
rank receives the DP sum of its own ranges only (as Megatron does; the plain optimizer's
pipeline.average_gradients all-reduces them instead: train_iteration(reduce=False) leaves them
to this class), updates only the owned range of each parameter, then all-gathers the updated
ranges so every replica holds the whole parameter again. The update is Adam's elementwise
formula on the same numbers, so the losses equal those of the plain optimizer (optim.Adam) to
float tolerance (the sums of a reduce-scatter and an all-reduce may round in another order).

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
        """The reduce-scatter of the gradients, Adam on the owned range of every parameter, then
        the all-gather of the ranges."""
        self.step_count += 1
        grads = self._reduce_scatter()
        for n, p in self.params.items():
            lo, hi = self.ranges[n]
            if lo == hi:
                continue
            w = p.data.view(-1)[lo:hi]  # a view: the update lands in the parameter itself
            adam_update(w, grads[n], self.exp_avg[n], self.exp_avg_sq[n], self.step_count, self.lr,
                        self.beta1, self.beta2, self.eps)
        self._all_gather()

    def _chunk_size(self) -> int:
        """Both collectives need equal chunks: every rank's ranges, packed, padded to the largest total."""
        return max(sum(hi - lo for lo, hi in r.values()) for r in self.all_ranges)

    def _pack(self, values: Dict[str, torch.Tensor], d: int, out: torch.Tensor) -> None:
        off = 0
        for n, (lo, hi) in self.all_ranges[d].items():
            out[off:off + hi - lo] = values[n].reshape(-1)[lo:hi]
            off += hi - lo

    def _reduce_scatter(self) -> Dict[str, torch.Tensor]:
        """{name: this rank's range of the DP-averaged gradient}: one reduce_scatter_tensor of
        every rank's ranges of every gradient, packed rank after rank."""
        g = self.grid
        grads = {n: p.grad for n, p in self.params.items()}
        if g.dp == 1:
            return {n: grads[n].reshape(-1)[lo:hi] for n, (lo, hi) in self.ranges.items()}
        size = self._chunk_size()
        first = next(iter(grads.values()))
        flat = first.new_zeros(size * g.dp)
        for d in range(g.dp):
            self._pack(grads, d, flat[d * size:(d + 1) * size])
        mine = first.new_empty(size)
        dist.reduce_scatter_tensor(mine, flat, group=g.dp_group)
        mine /= g.dp
        out, off = {}, 0
        for n, (lo, hi) in self.ranges.items():
            out[n] = mine[off:off + hi - lo]
            off += hi - lo
        return out

    def _all_gather(self) -> None:
        """One all_gather_into_tensor per iteration: each rank packs its ranges of every
        parameter into one chunk, and every rank copies every other rank's ranges into its
        parameters."""
        g = self.grid
        if g.dp == 1:
            return
        size = self._chunk_size()
        data = {n: p.data for n, p in self.params.items()}
        first = next(iter(data.values()))
        mine = first.new_zeros(size)
        self._pack(data, g.d, mine)
        flat = first.new_empty(size * g.dp)
        dist.all_gather_into_tensor(flat, mine, group=g.dp_group)
        for d in range(g.dp):
            if d == g.d:
                continue
            off = 0
            for n, (lo, hi) in self.all_ranges[d].items():
                self.params[n].data.view(-1)[lo:hi] = flat[d * size + off:d * size + off + hi - lo]
                off += hi - lo

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None
