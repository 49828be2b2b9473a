"""One training iteration: GPipe over micro-batches (every forward, then every backward in
reverse order), activations and their gradients sent between the same TP rank of adjacent
stages, then the DP all-reduce (average) of the gradients, unless the optimizer reduces them
itself (the distributed optimizer's reduce-scatter, zero.py)."""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.distributed as dist

from model import Stage


def train_iteration(stage: Stage, tokens: torch.Tensor, reduce: bool = True) -> Optional[float]:
    """Forward and backward of one iteration over this DP rank's samples [B/dp, seq + 1];
    leaves the DP-averaged gradients in the parameters (with reduce=False, this rank's own sums,
    for an optimizer that reduces them itself). Returns, on the last stage, the
    iteration's loss (the mean over the whole global batch), else None."""
    cfg, g = stage.cfg, stage.grid
    n_mb = tokens.shape[0] // cfg.micro_batch
    if n_mb < 1 or tokens.shape[0] % cfg.micro_batch:
        raise RuntimeError(f"{tokens.shape[0]} samples per DP rank do not split into micro-batches of {cfg.micro_batch}")
    prev = g.rank_of(g.t, g.d, g.p - 1) if not g.first_stage else None
    nxt = g.rank_of(g.t, g.d, g.p + 1) if not g.last_stage else None
    act_shape = (cfg.micro_batch, cfg.seq, cfg.hidden)
    inputs: List[torch.Tensor] = []
    outputs: List[torch.Tensor] = []
    loss_sum = torch.zeros((), dtype=torch.float64, device=stage.device)  # NCCL reduces device tensors
    for mb in tokens.split(cfg.micro_batch):
        mb = mb.to(stage.device)
        if g.first_stage:
            x = stage.embed(mb[:, :-1])
        else:
            x = torch.empty(act_shape, device=stage.device)
            dist.recv(x, src=prev)
            x.requires_grad_()
        inputs.append(x)
        y = stage.forward(x)
        if g.last_stage:
            loss = stage.head_loss(y, mb[:, 1:]) / n_mb  # each micro-batch weighs the same
            loss_sum += loss.detach().double()
            outputs.append(loss)
        else:
            dist.send(y.detach().contiguous(), dst=nxt)
            outputs.append(y)
    for i in reversed(range(n_mb)):
        if g.last_stage:
            outputs[i].backward()
        else:
            grad = torch.empty(act_shape, device=stage.device)
            dist.recv(grad, src=nxt)
            outputs[i].backward(grad)
        if not g.first_stage:
            dist.send(inputs[i].grad.contiguous(), dst=prev)
    if reduce:
        average_gradients(stage)
    if not g.last_stage:
        return None
    if g.dp > 1:  # every DP rank saw B/dp samples: the global mean is the mean of theirs
        dist.all_reduce(loss_sum, group=g.dp_group)
        loss_sum /= g.dp
    return float(loss_sum)


def average_gradients(stage: Stage) -> None:
    """DP all-reduce of every gradient in one flat buffer, divided by dp."""
    g = stage.grid
    if g.dp == 1:
        return
    grads = [p.grad for p in stage.params.values()]
    flat = torch.cat([x.reshape(-1) for x in grads])
    dist.all_reduce(flat, group=g.dp_group)
    flat /= g.dp
    off = 0
    for x in grads:
        x.copy_(flat[off:off + x.numel()].view_as(x))
        off += x.numel()
