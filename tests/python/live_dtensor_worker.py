"""One rank of the live DTensor mesh-change test (test_live_dtensor.py): a small MLP with tensor
parallelism and FSDP2 trains on a 2 x 2 (dp x tp) mesh of 4 gloo ranks, then moves, model and
AdamW state, live through three other meshes: dp 2 on ranks 0-1 (2 and 3 leave), dp 3 on ranks
0-2 (uneven shards; 2 joins), and 2 x 2 again (3 joins). After each change every rank compares
its shards with the full tensors of before, bit for bit, and counts its bytes; then one more
step runs on the new mesh and on a reference that never changed, and both losses are kept."""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from ptcfs import live

MESHES = [
    ("dp2xtp2", [[0, 1], [2, 3]]),
    ("dp2", [0, 1]),
    ("dp3", [0, 1, 2]),
    ("dp2xtp2", [[0, 1], [2, 3]]),
]


def build(ranks):
    """The model and optimizer on the mesh of `ranks` (None off it; the mesh is made on every
    rank, as DeviceMesh needs)."""
    t = torch.tensor(ranks)
    mesh = DeviceMesh("cpu", t, mesh_dim_names=("dp", "tp") if t.dim() == 2 else ("dp",))
    if mesh.get_coordinate() is None:
        return None, None
    torch.manual_seed(1)  # every rank the same initial values (overwritten by the change)
    m = nn.Sequential(nn.Linear(8, 16, bias=True), nn.ReLU(), nn.Linear(16, 8, bias=False))
    if t.dim() == 2:
        parallelize_module(m, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(m, mesh=mesh["dp"])
    else:
        fully_shard(m, mesh=mesh)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)


def step(m, opt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 8, generator=g)
    loss = m(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def full(sd):
    """Every tensor of a flattened state dict, whole (collective over its mesh)."""
    out = {}
    for k, v in sd.items():
        out[k] = v.full_tensor() if isinstance(v, DTensor) else (v.clone() if torch.is_tensor(v) else v)
    return out


def clone(tree):
    """A copy of a state dict's tensors (DTensors stay DTensors on their mesh)."""
    import copy
    if isinstance(tree, dict):
        return {k: clone(v) for k, v in tree.items()}
    return tree.detach().clone() if torch.is_tensor(tree) else copy.deepcopy(tree)


def flat(model_sd, optim_sd):
    out = {"model." + k: v for k, v in model_sd.items()}
    for fqn, st in optim_sd["state"].items():
        for k, v in st.items():
            out[f"optim.{fqn}.{k}"] = v
    out["optim.param_groups"] = optim_sd["param_groups"]
    return out


def run(rank, world, init_file, out_dir):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    records = []
    m, opt = build(MESHES[0][1])
    for s in range(3):
        step(m, opt, s)
    for i in range(1, len(MESHES)):
        old_ranks = MESHES[i - 1][1]
        state = {}
        if m is not None:
            msd, osd = get_state_dict(m, opt)
            state = clone({"model": msd, "optim": osd})
        # The reference: the whole tensors of before, from old rank 0, on every rank.
        box = [full(flat(state["model"], state["optim"])) if m is not None else None]
        dist.broadcast_object_list(box, src=0)
        ref = box[0]
        # One step of a run that never changed, on the old mesh (not part of the run: the
        # change moves the state of before).
        ref_loss = step(m, opt, 100 + i) if m is not None else None
        nm, nopt = build(MESHES[i][1])
        target = {}
        if nm is not None:
            tm, to = get_state_dict(nm, nopt)
            target = {"model": tm, "optim": to}
        target, stats = live.reshard_dtensors(state, target)
        differ = []
        if nm is not None:
            for k, v in flat(target["model"], target["optim"]).items():
                want = ref[k]
                if isinstance(v, DTensor):
                    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
                    shape, off = compute_local_shape_and_global_offset(v.shape, v.device_mesh, v.placements)
                    idx = tuple(slice(o, o + n) for o, n in zip(off, shape))
                    if not torch.equal(v.to_local(), want[idx]):
                        differ.append(k)
                elif torch.is_tensor(v):
                    if not torch.equal(v, want):
                        differ.append(k)
                elif v != want:
                    differ.append(k)
            set_state_dict(nm, nopt, model_state_dict=target["model"], optim_state_dict=target["optim"])
            kept = clone(target)
        # The same step on the new mesh, from the moved state: the losses agree.
        new_loss = step(nm, nopt, 100 + i) if nm is not None else None
        losses = [None] * world
        dist.all_gather_object(losses, (ref_loss, new_loss))
        records.append({"to": MESHES[i][0], "stats": stats, "differ": differ, "losses": losses})
        if nm is not None:  # back to the moved state, for the next change
            set_state_dict(nm, nopt, model_state_dict=kept["model"], optim_state_dict=kept["optim"])
        m, opt = nm, nopt
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)
    dist.destroy_process_group()


def run_bad(rank, world, init_file, out_dir):
    """Rank 1 wants a tensor no rank holds, rank 0 a shape other than the one held: every rank
    raises the same kind of error before a byte moves (none waits for the others)."""
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    m, opt = build([0, 1])
    state = {"w": m[0].weight} if m is not None else {}
    target = {}
    if rank == 1:
        target = {"w": torch.zeros(16, 8), "extra": torch.zeros(3)}
    errors = []
    for tgt in (target, {"w": torch.zeros(16, 9)} if rank == 0 else {}):
        try:
            live.reshard_dtensors(state, tgt)
            errors.append("")
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")
    with open(os.path.join(out_dir, f"bad{rank}.json"), "w") as f:
        json.dump(errors, f)
    dist.destroy_process_group()
