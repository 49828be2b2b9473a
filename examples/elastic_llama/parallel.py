"""Meshes and parallelism for the example: a mesh named like "dp2xtp2" (dp x tp) or "dp3"
over the first dp * tp global ranks; tensor parallelism through
torch.distributed.tensor.parallel (attention and SwiGLU projections column-wise in, row-wise
out, as TorchTitan does without sequence parallelism), then FSDP2 fully_shard of every block and
of the model over the dp dimension; AdamW over the resulting DTensors."""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from model import Config, Llama

LR, WEIGHT_DECAY = 3e-3, 0.1


def parse_mesh(name: str) -> Tuple[int, int]:
    """(dp, tp) of "dp2xtp2" or "dp3"."""
    m = re.fullmatch(r"dp(\d+)(?:xtp(\d+))?", name)
    if not m:
        raise ValueError(f"a mesh is dpD or dpDxtpT, not {name!r}")
    return int(m.group(1)), int(m.group(2) or 1)


class Place:
    """This process's place in a mesh: the mesh (made on every rank: DeviceMesh and new_group are
    collective), a group of its ranks, and whether this rank is in it (its dp rank)."""

    def __init__(self, name: str):
        self.name = name
        self.dp, self.tp = parse_mesh(name)
        self.ranks: List[int] = list(range(self.dp * self.tp))
        if self.dp * self.tp > dist.get_world_size():
            raise ValueError(f"mesh {name} needs {self.dp * self.tp} ranks, the job has {dist.get_world_size()}")
        grid = torch.tensor(self.ranks).reshape(self.dp, self.tp)
        self.mesh = DeviceMesh("cpu", grid, mesh_dim_names=("dp", "tp"))
        self.group = dist.new_group(self.ranks)
        coord = self.mesh.get_coordinate()
        self.member = coord is not None
        self.dp_rank: Optional[int] = coord[0] if coord is not None else None

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def build(c: Config, place: Place, seed: int = 0):
    """The model and AdamW on the place's mesh (None, None off it). Every rank starts from the
    same initial values (a fresh job; a resumed or moved one overwrites them)."""
    if not place.member:
        return None, None
    torch.manual_seed(seed)
    model = Llama(c)
    if place.tp > 1:
        tp_mesh = place.mesh["tp"]
        for block in model.layers:
            parallelize_module(block, tp_mesh, {
                "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(),
            })
    dp_mesh = place.mesh["dp"]
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=False)
    return model, opt
