"""Helpers for the dataset tests: sample files, the oracle of what each rank view holds."""

import json
import os
import random
from typing import List

import ptcds


def write_jsonl(path: str, n: int, seed: int = 0, blank_every: int = 0, final_newline: bool = True) -> List[bytes]:
    """Writes n JSON lines of varied lengths (blank lines every `blank_every` lines when > 0);
    returns the samples' bytes (without their newline), in file order."""
    rnd = random.Random(seed)
    samples, out = [], []
    for i in range(n):
        text = "".join(rnd.choice("abcdefgh ijk\u00e9\u4e2d") for _ in range(rnd.randint(0, 300)))
        line = json.dumps({"id": i, "text": text}, ensure_ascii=False).encode()
        samples.append(line)
        out.append(line + b"\n")
        if blank_every and i % blank_every == blank_every - 1:
            out.append(b"  \n")
    data = b"".join(out)
    if not final_newline:
        data = data[:-1]
    with open(path, "wb") as f:
        f.write(data)
    return samples


def jsonl_lines(path: str) -> List[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), f"{path} does not end with a newline"
    return data.split(b"\n")[:-1]


def interleave(ranks: List[list], batch: int) -> list:
    """The global sequence from per-rank sequences: batch by batch, rank by rank."""
    dp = len(ranks)
    chunk = batch // dp
    assert all(len(r) == len(ranks[0]) for r in ranks)
    out = []
    for b in range(len(ranks[0]) // chunk):
        for r in ranks:
            out.extend(r[b * chunk:(b + 1) * chunk])
    return out


def state(d, job: str, name: str) -> dict:
    with open(os.path.join(d.mnt, job, "data", name, "state.json")) as f:
        return json.load(f)


def check_jsonl_views(d, job: str, name: str, samples: List[bytes], seed: int, batch: int, dp: int,
                      epoch: int, consumed: int, batch_offset: int = 0) -> List[bytes]:
    """Every dp{r}.jsonl holds exactly what rank r reads, by the independent oracle; returns
    the remaining global sequence (the ranks interleaved). `batch_offset`: where the batches
    of `batch` start in the epoch (a global batch changed there)."""
    folder = os.path.join(d.mnt, job, "data", name)
    want_files = {"state.json"} | {f"dp{r}.jsonl" for r in range(dp)}
    assert set(os.listdir(folder)) == want_files
    order = ptcds.epoch_order(seed, epoch, len(samples))
    ranks = []
    for r in range(dp):
        got = jsonl_lines(os.path.join(folder, f"dp{r}.jsonl"))
        want = [samples[i] for i in ptcds.rank_samples(order, batch, dp, r, consumed, batch_offset)]
        assert got == want, f"{name} dp{r}.jsonl differs from the oracle"
        assert os.path.getsize(os.path.join(folder, f"dp{r}.jsonl")) == sum(len(s) + 1 for s in want)
        ranks.append(got)
    merged = interleave(ranks, batch)
    per_epoch = batch_offset + (len(samples) - batch_offset) // batch * batch
    assert merged == [samples[i] for i in order[consumed:per_epoch]]
    return merged
