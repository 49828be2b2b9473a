#!/usr/bin/env python3
"""A live mesh change of DTensor state against checkpoint round trips, on CPU processes (gloo), in
the same run: about SIZE GB of DTensors on a dp2 x tp2 mesh of 4 processes ((Shard(0), Shard(1)),
as FSDP2 + TP lay out a weight) move to a dp3 mesh of 3 processes (Shard(0), uneven: a node lost).

- live: ptcfs.live.reshard_dtensors, rank to rank (docs/PYTHON.md "Live mesh change for DTensors");
- DCP through the mount: dcp.save into MNT/job/step with ptcfs.dcp.StorageWriter on the old mesh,
  dcp.load with ptcfs.dcp.StorageReader on the new one;
- torch's own best: dcp.save to a folder on the local disk, dcp.load from it at the new mesh (stock
  FileSystemWriter and FileSystemReader), what a job does today without ptcfs;
- stock DCP into the mount: the same stock calls with checkpoint_id=MNT/job/step (torch's own writer
  and reader against the mount: the .distcp files staged, the save converted into a step at the
  rename of .metadata, the load through the DCP view at the step's top; docs/FORMATS.md).

All four start from the same state in the same processes, and the four new states must agree bit
for bit (checked). Also: the bytes the live path moved against the minimum (each new rank's boxes
less what it held), counted apart from the plan.

    $PTCFS_PYTHON bench/bench_live_dtensor.py [--size 2] [--json FILE]     (root: it mounts FUSE)
"""

import json
import os
import shutil
import socket
import sys
import time

from bench_lib import Daemon, row, secs, standalone

SECTION = "live_dtensor"
JOB = "meshbench"
TENSORS = 4


def worker(rank: int, world: int, port: int, rows_: int, cols: int, mount: str, disk: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    import ptcfs.dcp
    from ptcfs.live import reshard_dtensors

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    old = DeviceMesh("cpu", torch.tensor([[0, 1], [2, 3]]), mesh_dim_names=("dp", "tp"))
    new = DeviceMesh("cpu", torch.tensor([0, 1, 2]), mesh_dim_names=("dp",))
    new_group = dist.new_group([0, 1, 2])
    shape = (rows_, cols)

    def local(mesh, placements, fill):
        size, off = compute_local_shape_and_global_offset(shape, mesh, placements)
        if mesh.get_coordinate() is None:
            return None
        if fill:  # element (i, j) of tensor k holds k * 1e6 + i * cols + j, as float32 bits allow
            i = torch.arange(off[0], off[0] + size[0], dtype=torch.float64)[:, None]
            j = torch.arange(off[1], off[1] + size[1], dtype=torch.float64)[None, :]
            t = (fill * 1e6 + i * cols + j).to(torch.float32)
        else:
            t = torch.zeros(size, dtype=torch.float32)
        return DTensor.from_local(t, mesh, placements, run_check=False, shape=torch.Size(shape),
                                  stride=(cols, 1))

    def new_target():
        if new.get_coordinate() is None:
            return {}
        return {f"w{k}": local(new, [Shard(0)], 0) for k in range(TENSORS)}

    state = {f"w{k}": local(old, [Shard(0), Shard(1)], k + 1) for k in range(TENSORS)}
    times = {}
    dist.barrier()
    t0 = time.perf_counter()
    live_new, stats = reshard_dtensors(state, new_target())
    dist.barrier()
    times["live"] = time.perf_counter() - t0

    def round_trip(name, save, load):
        """One checkpoint round trip: save on the old mesh, load on the new one; its new state."""
        t0 = time.perf_counter()
        save()
        dist.barrier()
        times[f"{name}_save"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        got = new_target()
        if got:
            load(got)
        dist.barrier()
        times[f"{name}_load"] = time.perf_counter() - t1
        times[name] = time.perf_counter() - t0
        return got

    step, stock = os.path.join(mount, JOB, "1"), os.path.join(mount, JOB, "2")
    mount_new = round_trip("mount", lambda: dcp.save(state, storage_writer=ptcfs.dcp.StorageWriter(step)),
                           lambda sd: dcp.load(sd, storage_reader=ptcfs.dcp.StorageReader(step), process_group=new_group))
    disk_new = round_trip("disk", lambda: dcp.save(state, checkpoint_id=disk),
                          lambda sd: dcp.load(sd, checkpoint_id=disk, process_group=new_group))
    stock_new = round_trip("stock_mount", lambda: dcp.save(state, checkpoint_id=stock),
                           lambda sd: dcp.load(sd, checkpoint_id=stock, process_group=new_group))

    # The minimum, apart from the plan: this rank's new box less what its old box holds of it.
    lack = 0
    if new.get_coordinate() is not None:
        nsize, noff = compute_local_shape_and_global_offset(shape, new, [Shard(0)])
        osize, ooff = compute_local_shape_and_global_offset(shape, old, [Shard(0), Shard(1)])
        rows_in = max(0, min(noff[0] + nsize[0], ooff[0] + osize[0]) - max(noff[0], ooff[0]))
        cols_in = max(0, min(noff[1] + nsize[1], ooff[1] + osize[1]) - max(noff[1], ooff[1]))
        lack = TENSORS * 4 * (nsize[0] * nsize[1] - rows_in * cols_in)
    differ = []
    for k in live_new:
        a = live_new[k].to_local()
        if not (torch.equal(a, mount_new[k].to_local()) and torch.equal(a, disk_new[k].to_local())
                and torch.equal(a, stock_new[k].to_local())):
            differ.append(k)
    with open(os.path.join(out, f"r{rank}.json"), "w") as f:
        json.dump({"times": times, "stats": stats, "lack": lack, "differ": differ}, f)
    dist.destroy_process_group()


def run(gb: float, root: str) -> tuple:
    import torch.multiprocessing as mp

    cols = 4096
    rows_ = max(12, int(gb * 1e9 / (TENSORS * 4 * cols)) // 12 * 12)
    total = TENSORS * rows_ * cols * 4
    out, disk = os.path.join(root, "out"), os.path.join(root, "disk")
    os.makedirs(out)
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(worker, args=(4, port, rows_, cols, d.mnt, disk, out), nprocs=4, join=True)
    finally:
        d.stop()
        shutil.rmtree(disk, ignore_errors=True)
    ranks = [json.load(open(os.path.join(out, f"r{r}.json"))) for r in range(4)]
    bad = {r: x["differ"] for r, x in enumerate(ranks) if x["differ"]}
    if bad:
        raise SystemExit(f"bench_live_dtensor: the live, mount, disk and stock-mount new states differ: {bad}")
    received = sum(x["stats"]["received"] for x in ranks)
    lack = sum(x["lack"] for x in ranks)
    t = ranks[0]["times"]
    size = f"{total / 1e9:.2f} GB"
    change = "dp2xtp2 (4 processes) -> dp3 (3)"
    print(f"  {size} {change}: live {t['live']:.2f} s ({received / 1e9:.3f} GB received, minimum "
          f"{lack / 1e9:.3f} GB); DCP via the mount: save {t['mount_save']:.2f} s + load {t['mount_load']:.2f} s "
          f"= {t['mount']:.2f} s; DCP on the local disk: save {t['disk_save']:.2f} s + load "
          f"{t['disk_load']:.2f} s = {t['disk']:.2f} s; stock DCP via the mount: save {t['stock_mount_save']:.2f} s "
          f"+ load {t['stock_mount_load']:.2f} s = {t['stock_mount']:.2f} s", flush=True)
    rows = [row(SECTION, f"live DTensor mesh change {size}, {change}, vs dcp.save + dcp.load through the mount",
                secs(t["live"]), secs(t["mount"]), t["mount"] / t["live"], "> 1", t["mount"] > t["live"]),
            row(SECTION, f"live DTensor mesh change {size} vs dcp.save + dcp.load on the local disk (torch's own)",
                secs(t["live"]), secs(t["disk"]), t["disk"] / t["live"], "> 1", t["disk"] > t["live"]),
            row(SECTION, f"stock dcp.save + dcp.load {size} through the mount (torch's own writer and reader) vs "
                         "the same on the local disk", secs(t["stock_mount"]), secs(t["disk"]),
                t["disk"] / t["stock_mount"], ">= 0.5", t["disk"] / t["stock_mount"] >= 0.5),
            row(SECTION, "live DTensor mesh change: bytes received / the minimum", f"{received / 1e9:.3f} GB",
                f"{lack / 1e9:.3f} GB", received / lack if lack else 1.0, "= 1", received == lack)]
    raw = {"bytes": total, "min": lack, "received": received, "times": t, "per_rank": [x["stats"] for x in ranks]}
    return rows, raw


def main() -> int:
    def configure(ap):
        ap.add_argument("--size", type=float, default=2.0, help="state size in GB")
    return standalone(__doc__, configure, lambda a, root: run(a.size, root))


if __name__ == "__main__":
    sys.exit(main())
