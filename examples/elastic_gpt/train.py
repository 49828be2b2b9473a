#!/usr/bin/env python3
"""Trains a small GPT with Megatron-style tensor, pipeline and data parallelism, reading its
samples from a ptcfs mount and saving into / resuming from ptcfs, at any (tp, pp, dp).

    # fresh run at tp=2,pp=2,dp=1, saving iteration 4 (read-only v1 mount: via a directory)
    train.py --job gpt --tp 2 --pp 2 --dp 1 --steps 4 --save-at 4 --save-dir /tmp/ckpt
    # resume iteration 4 at tp=1,pp=2,dp=2 (every rank calls ensure_layout: one repartition)
    train.py --job gpt --tp 1 --pp 2 --dp 2 --steps 12 --resume 4
    # the same with a ZeRO-style distributed optimizer (each DP rank saves its own ranges)
    train.py --job gpt --tp 1 --pp 2 --dp 2 --steps 12 --resume 4 --distributed-optimizer
    # after a run that saved step 8: the datasets go on at global batch 16 from the samples read
    ptcfs repartition --job gpt --step 8 --to tp=1,pp=2,dp=2 --global-batch 16
    train.py --job gpt --tp 1 --pp 2 --dp 2 --steps 16 --resume 8 --global-batch 16

Prints one JSON line per iteration on stdout: {"iter": i, "loss": x, "tp", "pp", "dp",
"optimizer", "global_batch"}, where iteration i's loss is computed with the weights after i updates. One
process per rank (tp*pp*dp of them) is spawned here; gloo on CPU, NCCL when there is a GPU for
every rank. See README.md (and scenario.py, which runs the whole elastic scenario).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import ptcfs  # noqa: E402
import ckpt  # noqa: E402
from config import ModelConfig  # noqa: E402
from data import load_rank_samples  # noqa: E402
from model import Stage  # noqa: E402
from optim import Adam  # noqa: E402
from parallel import Grid  # noqa: E402
from pipeline import train_iteration  # noqa: E402
from zero import DistributedAdam  # noqa: E402


def write_json(out: str, name: str, obj) -> None:
    with open(os.path.join(out, name), "w") as f:
        json.dump(obj, f, sort_keys=True)


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    torch.set_num_threads(1)  # many ranks on few cores: no oversubscription
    # One GPU per rank (NCCL refuses two ranks on one GPU); too few GPUs: gloo on CPU.
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= a.tp * a.pp * a.dp and not a.cpu
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks on this host
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=a.tp * a.pp * a.dp)
    grid = Grid(a.tp, a.pp, a.dp, rank)
    grid.make_groups()
    cfg = dataclasses.replace(ModelConfig(), global_batch=a.global_batch)
    stage = Stage(cfg, grid, a.seed, device)
    if a.distributed_optimizer:
        opt = DistributedAdam(stage.params, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, grid)
    else:
        opt = Adam(stage.params, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps)
    who = {"rank": rank, "t": grid.t, "p": grid.p, "d": grid.d}
    client = ptcfs.Client(a.daemon, a.secret_file, timeout=None) if rank == 0 else None
    start = 0
    if a.resume is not None:
        loaded = ckpt.resume(stage, opt, a.mount, a.job, a.resume, a.daemon, a.secret_file,
                             a.global_batch if a.batch_given else None)
        start = a.resume
        if a.out:
            write_json(a.out, f"loaded-r{rank}.json", {**who, **loaded})
    dist.barrier()  # the layout is there for everyone before anyone reads data
    batches, ids, consumed = load_rank_samples(a.mount, a.job, a.dataset, a.dp, grid.d, cfg.global_batch,
                                               start, a.steps - start, cfg.seq)
    if a.out:  # which samples this rank consumed, per iteration (every rank of a DP rank: the same)
        with open(os.path.join(a.out, f"samples-r{rank}.jsonl"), "a") as f:  # a later run appends
            for it in range(start, a.steps):
                f.write(json.dumps({"iter": it, "d": grid.d, "ids": ids[it - start]}) + "\n")
    reporter = grid.rank_of(0, 0, a.pp - 1)
    optimizer = "distributed" if a.distributed_optimizer else "adam"
    for it in range(start, a.steps):
        loss = train_iteration(stage, batches[it - start], reduce=not a.distributed_optimizer)
        opt.step()
        opt.zero_grad()
        if rank == reporter:
            line = json.dumps({"iter": it, "loss": loss, "tp": a.tp, "pp": a.pp, "dp": a.dp,
                               "optimizer": optimizer, "global_batch": cfg.global_batch})
            print(line, flush=True)
            if a.out:
                with open(os.path.join(a.out, "losses.jsonl"), "a") as f:
                    f.write(line + "\n")
        if it + 1 in a.save_at:
            # SAVE-INTO-MOUNT: with a daemon that takes writes, leave --save-dir out (root = the mount).
            written = ckpt.save(stage, opt, a.save_dir or a.mount, a.mount, a.job, it + 1, client)
            if a.out:
                write_json(a.out, f"saved-r{rank}-{it + 1}.json", {**who, "written": written})
            if rank == 0:  # the views now start after the samples this checkpoint has seen
                # Waits out a repartition that re-splits the dataset meanwhile (the autoscaler's).
                ptcfs.record_dataset_progress(client, a.job, a.dataset, consumed + (it + 1 - start) * cfg.global_batch)
            dist.barrier()
    if client:
        client.close()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Elastic GPT training on ptcfs (see README.md).")
    ap.add_argument("--job", required=True)
    ap.add_argument("--dataset", default="train", help="dataset name under MNT/<job>/data/")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--steps", type=int, required=True, help="train up to this iteration")
    ap.add_argument("--resume", type=int, metavar="K", help="resume from the saved step K")
    ap.add_argument("--save-at", type=int, action="append", default=[], metavar="K",
                    help="save after iteration K (repeatable)")
    ap.add_argument("--save-dir", help="save into this plain directory and import it (for a daemon whose "
                                       "mount takes no writes); default: straight into the mount")
    ap.add_argument("--mount", help="the ptcfs mount (default $PTCFS_MOUNT, then the daemon's)")
    ap.add_argument("--daemon", help="HOST:PORT (default $PTCFS_DAEMON, then 127.0.0.1:7070)")
    ap.add_argument("--secret-file", help="default $PTCFS_SECRET_FILE")
    ap.add_argument("--global-batch", type=int, metavar="B",
                    help="samples per iteration (default config.py's); the dataset must have this B: given with "
                         "--resume, the step resumed from is repartitioned with it when the dataset has another "
                         "(ptcfs.ensure_layout), else a repartition with --global-batch gives it a new one; the "
                         "learning rate is kept")
    ap.add_argument("--seed", type=int, default=0, help="initial weights")
    ap.add_argument("--out", help="folder for losses.jsonl and, per rank, samples-r<rank>.jsonl (the sample ids "
                                  "of each iteration; a later run appends), loaded-r<rank>.json (what a resume loaded) and "
                                  "saved-r<rank>-<k>.json (what the save of step k wrote)")
    ap.add_argument("--cpu", action="store_true", help="ignore GPUs")
    ap.add_argument("--distributed-optimizer", action="store_true",
                    help="ZeRO-style: each DP rank keeps, updates and saves only its range of Adam's state")
    a = ap.parse_args(argv)
    a.batch_given = a.global_batch is not None  # the dataset is brought to it on resume
    if a.global_batch is None:
        a.global_batch = ModelConfig().global_batch
    if a.mount is None:
        a.mount = os.environ.get("PTCFS_MOUNT")
    if a.mount is None:
        with ptcfs.Client(a.daemon, a.secret_file) as c:
            a.mount = c.status()["mount"]
    if a.global_batch < 1 or a.global_batch % (a.dp * ModelConfig().micro_batch):
        ap.error(f"--global-batch {a.global_batch} is not a multiple of dp * micro-batch "
                 f"({a.dp} * {ModelConfig().micro_batch})")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    if a.save_dir:
        os.makedirs(a.save_dir, exist_ok=True)
    t0 = time.monotonic()
    mp.spawn(worker, args=(a, free_port()), nprocs=a.tp * a.pp * a.dp, join=True)
    opt = " (distributed optimizer)" if a.distributed_optimizer else ""
    print(f"train: tp={a.tp},pp={a.pp},dp={a.dp}{opt} iterations {a.resume or 0}..{a.steps - 1} "
          f"in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
