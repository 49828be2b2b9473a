"""One rank of a replica group that publishes (send) or heals (recv) through PtcfsTransport's DCP
mode with DTensors (tests/integration/test_torchft.py): the sender group shards every matrix by
rows (Shard(0), as FSDP2), the receiving group by columns (Shard(1)), on gloo. Values depend on the
names alone (expected()); a receiver checks its own shards against them, bit for bit, and prints
{"rank", "bytes", "wrong"}.

    python torchft_layout_worker.py send|recv RANK WORLD STORE_PORT MNT JOB DAEMON SECRET_FILE
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from ptcfs.torchft import PtcfsTransport

SHAPES = {"layers.0.w": (8, 6), "layers.1.w": (6, 10), "norm": (6,)}


def expected():
    out = {}
    for i, (name, shape) in enumerate(sorted(SHAPES.items())):
        g = torch.Generator().manual_seed(1000 + i)
        out[name] = torch.randn(*shape, generator=g)
    return out


def state(mesh, dim):
    """torchft's shape of a state: the model's matrices sharded along `dim` (the norm replicated
    as a plain tensor), a step count."""
    full = expected()
    model = {n: (distribute_tensor(t, mesh, [Shard(dim)]) if t.dim() == 2 else t.clone()) for n, t in full.items()}
    return {"user": {"default": {"model": model, "epoch": 3}}, "torchft": {"step": 12, "batches_committed": 24}}


def main() -> int:
    role, rank, world, port, mnt, job, daemon, secret = sys.argv[1:9]
    rank, world = int(rank), int(world)
    store = dist.TCPStore("127.0.0.1", int(port), world, is_master=rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    try:
        if role == "send":
            t = PtcfsTransport(mnt, job, daemon=daemon, secret_file=secret, rank=rank, template=lambda: state(mesh, 0))
            t.send_checkpoint([1], 12, state(mesh, 0), timedelta(seconds=120))
            print(json.dumps({"rank": rank, "bytes": t.last_send["bytes"]}), flush=True)
        else:
            def template():  # the receiver's own layout, its values zero until loaded
                s = state(mesh, 1)
                for n, v in s["user"]["default"]["model"].items():
                    (v.to_local() if hasattr(v, "to_local") else v).zero_()
                s["user"]["default"]["epoch"] = 0
                s["torchft"] = {"step": 0, "batches_committed": 0}
                return s
            t = PtcfsTransport(mnt, job, daemon=daemon, secret_file=secret, rank=rank, template=template)
            meta = json.dumps({"job": job, "prefix": "torchft-", "rank": rank, "dcp": True})
            got = t.recv_checkpoint(0, meta, 12, timedelta(seconds=120))
            want = state(mesh, 1)
            wrong = [n for n, v in got["user"]["default"]["model"].items()
                     if not torch.equal(v.to_local() if hasattr(v, "to_local") else v,
                                        (lambda w: w.to_local() if hasattr(w, "to_local") else w)(
                                            want["user"]["default"]["model"][n]))]
            if got["user"]["default"]["epoch"] != 3 or got["torchft"] != {"step": 12, "batches_committed": 24}:
                wrong.append("objects")
            print(json.dumps({"rank": rank, "bytes": t.last_recv["bytes"], "wrong": wrong,
                              "placements": str(got["user"]["default"]["model"]["layers.0.w"].placements)}), flush=True)
        dist.barrier()  # the store's host (rank 0) leaves last
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    # Out without the interpreter's teardown: gloo's and the store's threads at exit once aborted a
    # finished rank ("terminate called without an active exception") under load.
    os._exit(rc)
