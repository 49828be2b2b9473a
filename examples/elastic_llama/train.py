#!/usr/bin/env python3
"""One run of the elastic llama job: WORLD gloo processes on this machine train through a list
of segments, each on its own mesh, and move between them live (ptcfs.live.reshard_dtensors,
with no checkpoint); the run may start from a DCP checkpoint in the mount and end by saving one.

    train.py --world 4 --segments dp2xtp2:3,dp3:3 --start 0 --save MNT/llama/6 \
             --job llama --dataset train --daemon HOST:PORT --mount MNT --out run.json

A segment "MESH:N" trains N iterations on MESH (dpD or dpDxtpT, over the first D*T ranks; the
other ranks wait). Each iteration takes one global batch from the ptcfs dataset through
ptcfs.data.Loader (its state, saved with the model, resumes at any dp). The checkpoint holds the
model, AdamW, the loader and the iteration, written with torch.distributed.checkpoint through
ptcfs.dcp.StorageWriter and read back through ptcfs.dcp.StorageReader. Rank 0 writes, per
iteration, the loss and the sample ids of the global batch (in dp order) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402

import ptcfs  # noqa: E402
import ptcfs.dcp  # noqa: E402
from ptcfs.data import Loader  # noqa: E402
from ptcfs.live import reshard_dtensors  # noqa: E402

from model import Config  # noqa: E402
from parallel import Place, build  # noqa: E402

GLOBAL_BATCH = 12


class Iteration:
    """The iteration counter as a DCP Stateful (saved as a bytes item)."""

    def __init__(self, value: int = 0):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, sd):
        self.value = int(sd["value"])


def make_loader(a, place: Place) -> Loader:
    return Loader(a.job, a.dataset, place.dp_rank, place.dp, GLOBAL_BATCH, daemon=a.daemon, mount=a.mount,
                  leader=dist.get_rank() == 0, barrier=place.barrier)


def train_step(model, opt, batch) -> float:
    tokens = torch.tensor([s["tokens"] for s in batch], dtype=torch.long)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def run(rank: int, a) -> None:
    dist.init_process_group("gloo", init_method="file://" + a.init, rank=rank, world_size=a.world)
    c = Config()
    records, moves = [], []
    it = Iteration(a.start)
    model = opt = loader = None
    place = None
    for si, (mesh_name, iters) in enumerate(a.segments):
        new_place = Place(mesh_name)
        new_model, new_opt = build(c, new_place)
        if si == 0:
            if a.load:  # the job restarted at this mesh: DCP's load of the step in the mount
                if new_place.member:
                    msd, osd = get_state_dict(new_model, new_opt)
                    loader = make_loader(a, new_place)
                    state = {"model": msd, "optim": osd, "data": loader, "iteration": it}
                    dcp.load(state, storage_reader=ptcfs.dcp.StorageReader(a.load), process_group=new_place.group)
                    set_state_dict(new_model, new_opt, model_state_dict=state["model"],
                                   optim_state_dict=state["optim"])
                    if it.value != a.start:
                        raise RuntimeError(f"{a.load} holds iteration {it.value}, this run starts at {a.start}")
            elif new_place.member:
                loader = make_loader(a, new_place)
        else:  # a live change: every rank's shards move to the new mesh, then the loader re-splits
            state, target = {}, {}
            if model is not None:
                msd, osd = get_state_dict(model, opt)
                state = {"model": msd, "optim": osd}
            if new_model is not None:
                tm, to = get_state_dict(new_model, new_opt)
                target = {"model": tm, "optim": to}
            t0 = time.monotonic()
            target, stats = reshard_dtensors(state, target)
            stats["seconds"] = time.monotonic() - t0
            box = [loader.state_dict() if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            if loader is not None:
                loader.close()
            loader = None
            if new_model is not None:
                set_state_dict(new_model, new_opt, model_state_dict=target["model"], optim_state_dict=target["optim"])
                loader = make_loader(a, new_place)
                loader.load_state_dict(box[0])
            every = [None] * a.world
            dist.all_gather_object(every, stats)
            moves.append({"from": place.name, "to": mesh_name, "at": it.value, "ranks": every})
        model, opt, place = new_model, new_opt, new_place
        for _ in range(iters):
            ids, loss = None, None
            if model is not None:
                batch = next(loader)
                loss = train_step(model, opt, batch)
                ids = [s["id"] for s in batch]
            every = [None] * a.world
            dist.all_gather_object(every, (place.dp_rank if place.member else None, ids, loss))
            if rank == 0:
                # The global batch: dp rank 0's part, then 1's, ... (each part once: tp ranks share it).
                parts = {d: (i, l) for d, i, l in every if d is not None}
                # Each dp rank's loss is the mean over its equal part: their mean is the batch's.
                records.append({"iteration": it.value, "mesh": mesh_name,
                                "loss": sum(parts[d][1] for d in parts) / len(parts),
                                "ids": [x for d in sorted(parts) for x in parts[d][0]]})
            it.value += 1
    if a.save and place.member:
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd, "data": loader, "iteration": it},
                 storage_writer=ptcfs.dcp.StorageWriter(a.save), process_group=place.group)
    dist.barrier()
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"iterations": records, "moves": moves}, f)
    if loader is not None:
        loader.close()
    dist.destroy_process_group()


def parse_segments(text: str):
    out = []
    for part in text.split(","):
        mesh, _, n = part.partition(":")
        out.append((mesh, int(n)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, required=True, help="processes of this run")
    p.add_argument("--segments", type=parse_segments, required=True, help="MESH:N,MESH:N,...")
    p.add_argument("--start", type=int, default=0, help="the first iteration (the loaded step's)")
    p.add_argument("--load", help="a step in the mount to start from (DCP)")
    p.add_argument("--save", help="a step in the mount to save at the end (DCP)")
    p.add_argument("--job", required=True)
    p.add_argument("--dataset", default="train")
    p.add_argument("--daemon", default=os.environ.get("PTCFS_DAEMON"))
    p.add_argument("--mount", default=os.environ.get("PTCFS_MOUNT"))
    p.add_argument("--out", required=True, help="where rank 0 writes the run's records (JSON)")
    a = p.parse_args(argv)
    a.init = a.out + ".init"
    if os.path.exists(a.init):
        os.remove(a.init)
    mp.spawn(run, args=(a,), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
