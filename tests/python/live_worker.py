"""One rank of a live-reshard test run (test_live.py): joins a gloo group, starts from the
oracle's slices (ptcgen) of the first config, reshards through every later config with
ptcfs.live, and records, per change, its byte counts and the tensors that differ from the
oracle's slices of the new config (bit for bit)."""

import json
import os

import numpy as np
import torch
import torch.distributed as dist

import ptcgen
from ptcfs import dtypes, live


def oracle_state(ptc, full, cfg, rank):
    """{name: tensor} that global rank `rank` holds at cfg (tp, pp, dp), Megatron rank order."""
    tp, pp, dp = cfg
    if rank >= tp * pp * dp:
        return {}
    t, p = rank % tp, rank // (tp * dp)
    slices = ptcgen.shard_slices(ptc, tp, pp, tensors=full)[(t, p)]
    return {n: dtypes.to_torch(np.array(a), ptc["tensors"][n]["dtype"]) for n, a in slices.items()}


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def run(rank, world, init_file, out_dir, ptc, configs, chunk_bytes, staging_bytes):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    comm = live.TorchComm()
    full = ptcgen.full_tensors(ptc, seed=0)
    state = oracle_state(ptc, full, configs[0], rank)
    records = []
    for frm, to in zip(configs, configs[1:]):
        state, stats = live.reshard(state, ptc, frm, to, comm, chunk_bytes=chunk_bytes, staging_bytes=staging_bytes)
        want = oracle_state(ptc, full, to, rank)
        differ = sorted(set(state) ^ set(want))
        differ += sorted(n for n in set(state) & set(want)
                         if state[n].dtype != want[n].dtype or list(state[n].shape) != list(want[n].shape)
                         or not torch.equal(bits(state[n]), bits(want[n])))
        records.append({"from": list(frm), "to": list(to), "stats": stats, "differ": differ,
                        "tensors": len(state)})
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(records, f)
    dist.destroy_process_group()


def run_faulty(rank, world, init_file, out_dir, ptc, frm, to, fault):
    """One rank of a reshard where rank 1 is at fault: its BF16 query_key_value weight passed as
    float16 ("f16"), the whole tensor where its slice belongs ("whole"), or another `to` ("other_to").
    Records what reshard raised on this rank ("ok" when nothing)."""
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    comm = live.TorchComm()
    full = ptcgen.full_tensors(ptc, seed=0)
    state = oracle_state(ptc, full, frm, rank)
    name = "layers.0.self_attention.query_key_value.weight"
    target = to
    if rank == 1 and fault == "f16":
        state[name] = state[name].to(torch.float16)
    elif rank == 1 and fault == "whole":
        state[name] = dtypes.to_torch(np.array(full[name]), "BF16")
    elif rank == 1 and fault == "other_to":
        target = (1, 2, 2)
    try:
        live.reshard(state, ptc, frm, target, comm)
        outcome = "ok"
    except Exception as e:  # noqa: BLE001 (the test reads what each rank got)
        outcome = f"{type(e).__name__}: {e}"
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(outcome, f)
    dist.destroy_process_group()
