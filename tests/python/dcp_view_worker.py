"""One rank of test_dcp_view.py: loads the DCP view of a step with stock dcp.load into DTensors
sharded along dimension 0 (dimension 1 for the fused and row-parallel tensors) over `world` gloo
ranks, and records the tensors whose shard differs from the oracle's (ptcgen), bit for bit."""

import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

import ptcgen


def as_torch(a, dtype):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.view(torch.bfloat16) if dtype == "BF16" else (t.view(torch.uint16) if dtype == "U16" else t)


def run(rank, world, init_file, view, ptc, out_dir):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    full = ptcgen.full_tensors(ptc, 3)
    sd, want = {}, {}
    for n, s in ptc["tensors"].items():
        w = as_torch(full[n], s["dtype"])
        dim = 1 if n.startswith("layers.1.") else 0
        want[n] = distribute_tensor(w, mesh, [Shard(dim)], src_data_rank=None).to_local() if w.dim() else w
        if w.dim():
            sd[n] = DTensor.from_local(torch.zeros_like(want[n]), mesh, [Shard(dim)], run_check=False,
                                       shape=w.shape, stride=w.stride())
        else:
            sd[n] = torch.zeros_like(w)
    dcp.load(sd, checkpoint_id=view)
    bad = []
    for n in sd:
        got = sd[n].to_local() if isinstance(sd[n], DTensor) else sd[n]
        if not torch.equal(got.contiguous().view(torch.uint8), want[n].contiguous().view(torch.uint8)):
            bad.append(n)
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(bad, f)
    dist.destroy_process_group()
