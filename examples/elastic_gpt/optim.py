"""Adam, written out so that its state is plain named tensors: exp_avg and exp_avg_sq of
each parameter have the parameter's shape, so they are saved and re-split with exactly the
parameter's partitioning, and the step count is one integer. The update is elementwise, so
a slice of a parameter evolves the same whatever the split."""

from __future__ import annotations

import math
from typing import Dict

import torch


@torch.no_grad()
def adam_update(w: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, lr: float,
                b1: float, b2: float, eps: float) -> None:
    """One Adam step of step count `step` on `w` (in place) from gradient `g`, with moments m, v
    (updated in place). Elementwise: the same on a whole parameter or on any range of it."""
    bc1 = 1 - b1 ** step
    bc2 = 1 - b2 ** step
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
    w.addcdiv_(m, denom, value=-lr / bc1)


class Adam:
    def __init__(self, params: Dict[str, torch.nn.Parameter], lr: float, beta1: float, beta2: float, eps: float):
        self.params = params
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}
        self.step_count = 0

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        for n, p in self.params.items():
            adam_update(p, p.grad, self.exp_avg[n], self.exp_avg_sq[n], self.step_count, self.lr, self.beta1,
                        self.beta2, self.eps)

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None
