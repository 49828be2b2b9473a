#!/usr/bin/env python3
"""One rank of bench_dcp_cluster.py: joins a gloo group over the namespaced fabric and saves or
loads the bench's state (every tensor Shard(0) over a 1-D mesh, values a pattern of the global
element index, so each rank builds and checks only its own rows).

    dcp_rank.py save|ptcfs|stock RANK WORLD MASTER_ADDR:PORT CHECKPOINT_DIR SPEC_JSON

save: stock dcp.save of the state to CHECKPOINT_DIR. ptcfs: ptcfs.dcp.prepare, then stock
dcp.load from CHECKPOINT_DIR (this rank's node's mount); stock: stock dcp.load from
CHECKPOINT_DIR (a copy on this rank's node). Prints one JSON line: seconds from the first
barrier to the last, the bytes of this rank's shards, and whether every loaded byte is right."""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard


def pattern(name_seed: int, lo: int, rows: int, cols: int) -> torch.Tensor:
    """Rows [lo, lo + rows) of the tensor: element i is (i mod 65521) + seed, as float32."""
    idx = torch.arange(lo * cols, (lo + rows) * cols, dtype=torch.int64)
    return ((idx % 65521) + name_seed).to(torch.float32).reshape(rows, cols)


def state(spec: dict, mesh, world: int, rank: int, fill: bool) -> dict:
    sd = {}
    for k, (name, rows, cols) in enumerate(spec["tensors"]):
        c = -(-rows // world)
        lo, hi = min(rank * c, rows), min((rank + 1) * c, rows)
        local = pattern(k, lo, hi - lo, cols) if fill else torch.empty(hi - lo, cols, dtype=torch.float32)
        sd[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=(rows, cols),
                                      stride=(cols, 1))
    return sd


def main() -> int:
    mode, rank, world, master, ckpt, spec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], \
        sys.argv[5], json.loads(sys.argv[6])
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    out = {"rank": rank}
    if mode == "save":
        dcp.save(state(spec, mesh, world, rank, True), checkpoint_id=ckpt)
    else:
        sd = state(spec, mesh, world, rank, False)
        dist.barrier()
        t0 = time.perf_counter()
        if mode == "ptcfs":
            import ptcfs.dcp
            r = ptcfs.dcp.prepare(sd, ckpt)
            out.update(prepare_s=time.perf_counter() - t0, bytes_moved=r["bytes_moved"], bytes_min=r["bytes_min"],
                       exact=r["chunks"]["exact"], tensors=r["chunks"]["tensors"], share=r["share"])
        dcp.load(sd, checkpoint_id=ckpt)
        dist.barrier()
        out["seconds"] = time.perf_counter() - t0
        ok = True
        for k, (name, rows, cols) in enumerate(spec["tensors"]):
            local = sd[name].to_local()
            c = -(-rows // world)
            ok = ok and torch.equal(local, pattern(k, min(rank * c, rows), local.shape[0], cols))
        out["bytes"] = sum(sd[n].to_local().numel() * 4 for n, _, _ in spec["tensors"])
        out["ok"] = bool(ok)
    print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
