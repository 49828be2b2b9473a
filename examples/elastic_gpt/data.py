"""A DP rank's samples, from its view in the mount.

MNT/<job>/data/<name>/dp{d}.jsonl holds, in order, the samples rank d reads from the
dataset's `consumed` position to the end of the epoch: of every global batch, the d-th
chunk of global_batch / dp samples (docs/FORMATS.md "Datasets"). So iteration i of a run
that starts at iteration `start` takes lines [(i - start) * B/dp, (i - start + 1) * B/dp).
After a change of the global batch in this epoch (docs/FORMATS.md "A new global batch") the
batches of the new B start at `batch_offset`, and the view still starts at `consumed`."""

from __future__ import annotations

import json
import os
from typing import List, Optional, Tuple

import torch


def read_state(mount: str, job: str, name: str) -> dict:
    with open(os.path.join(mount, job, "data", name, "state.json")) as f:
        return json.load(f)


def load_rank_samples(mount: str, job: str, name: str, dp: int, d: int, global_batch: int,
                      start_iter: int, iters: int, seq: int
                      ) -> Tuple[List[torch.Tensor], List[List[Optional[int]]], int]:
    """The rank's token tensors, one [B/dp, seq + 1] per iteration start_iter.. start_iter +
    iters - 1, the samples' ids (their "id" field, None without one), per iteration: what
    shows that the global sample order survives a change of dp or of B, and the dataset's
    `consumed` where the run starts (progress after iteration i is that plus (i + 1 -
    start_iter) * B: `batch_offset` plus a multiple of B, as `dataset progress` requires).
    Everything is read up front: recording progress later re-cuts the view.

    Without a change of B in this epoch (batch_offset 0) the run must start at sample
    start_iter * B; after one, the iterations before it had another B, so the view's
    position is where the run starts (the save of step start_iter recorded it)."""
    st = read_state(mount, job, name)
    where = f"{mount}/{job}/data/{name}"
    if st["dp"] != dp:
        raise RuntimeError(f"{where} is split for dp={st['dp']}, this run has dp={dp} (repartition first)")
    if st["global_batch"] != global_batch:
        raise RuntimeError(f"{where} has global batch {st['global_batch']}, this run {global_batch} "
                           f"(repartition with --global-batch first)")
    offset, consumed = st.get("batch_offset", 0), st["consumed"]
    if st["epoch"] != 0 or (offset == 0 and consumed != start_iter * global_batch):
        raise RuntimeError(f"{where} starts at sample {consumed} of epoch {st['epoch']}, but this run "
                           f"starts at iteration {start_iter} (sample {start_iter * global_batch} of epoch 0)")
    if consumed + iters * global_batch > st["samples_per_epoch"]:
        raise RuntimeError(f"{where}: {st['samples_per_epoch']} samples per epoch are too few for "
                           f"{iters} more iterations of {global_batch} from sample {consumed}")
    chunk = global_batch // dp
    out, ids = [], []
    with open(os.path.join(mount, job, "data", name, f"dp{d}.jsonl")) as f:
        for _ in range(iters):
            lines = [json.loads(f.readline()) for _ in range(chunk)]
            rows = [x["tokens"] for x in lines]
            for r in rows:
                if len(r) != seq + 1:
                    raise RuntimeError(f"{where}/dp{d}.jsonl: a sample of {len(r)} tokens, want {seq + 1}")
            out.append(torch.tensor(rows, dtype=torch.long))
            ids.append([x.get("id") for x in lines])
    return out, ids, consumed
