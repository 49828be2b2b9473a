"""Every rank's part of a live reshard in one process, for one GPU (NCCL allows one rank per GPU):
the moves between ranks go through the communicator from this process to itself, chunk by chunk and
round by round as ptcfs.live.reshard posts them on each rank (the same live.rounds), so every slice
of the plan crosses NCCL once. Used by tests/gpu/test_gpu_live.py and bench/bench_gpu.py --live."""

from typing import Any, Dict, List, Tuple

import torch

from ptcfs import dtypes, live


def reshard_all(states: List[Dict[str, Any]], ptc: dict, frm, to, comm, chunk_bytes: int = 16 << 20,
                staging_bytes: int = 64 << 20) -> Tuple[List[Dict[str, Any]], dict]:
    """states[r]: global rank r's {name: tensor} at frm (on comm.device). Returns the new states of
    every rank of the larger world at `to`, and {"moved": bytes through comm, "rounds", "plan"}."""
    p = live.reshard_plan(ptc, frm, to)
    new = []
    for r in p["ranks"]:
        new.append({n: torch.zeros(shape, dtype=dtypes.torch_dtype(ptc["tensors"][n]["dtype"]), device=comm.device)
                    for n, shape in r["new_shapes"].items()})
    for m in p["moves"]:  # within a rank: one copy
        if m["src_rank"] == m["dst_rank"]:
            new[m["dst_rank"]][m["tensor"]][live._index(m["dst"])] = states[m["src_rank"]][m["tensor"]][
                live._index(m["src"])]
    moved = 0
    rs = live.rounds(p, chunk_bytes, staging_bytes)
    for rnd in rs:
        sends, recvs, unpack = [], [], []
        for tag, c in enumerate(rnd):
            m = p["moves"][c["move"]]
            packed = states[m["src_rank"]][m["tensor"]][live._index(m["src"], c["lo"], c["hi"])].contiguous()
            buf = torch.empty_like(packed)
            sends.append((comm.rank, tag, packed))
            recvs.append((comm.rank, tag, buf))
            unpack.append((new[m["dst_rank"]][m["tensor"]], live._index(m["dst"], c["lo"], c["hi"]), buf))
            moved += c["bytes"]
        comm.exchange(sends, recvs)
        for dst, idx, buf in unpack:
            dst[idx] = buf
    return new, {"moved": moved, "rounds": len(rs), "plan": p}
