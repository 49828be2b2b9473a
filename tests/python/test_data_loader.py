"""ptcfs.data.Loader against a real daemon: its state resumes at any dp and any global batch,
every sample of an epoch read once in the documented order (tests/tools/ptcds.py, an
independent implementation), and the daemon's recorded progress is the saved state's.

The ranks of a job are Loader objects in this one process, the leader (rank 0) taking each
batch first; the barrier is then a no-op."""

import json

import numpy as np
import pytest

import ptcds
import ptcfs
from ptcfs.data import Loader

N, SEED = 103, 11


def make_dataset(daemon, tmp_path, fmt="jsonl", global_batch=12, dp=4):
    if fmt == "jsonl":
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps({"id": i, "tokens": [i, i + 1]}) + "\n" for i in range(N)))
        files = [str(path)]
    else:
        prefix = str(tmp_path / "m")
        ptcds.write_megatron(prefix, [np.arange(i, i + 1 + i % 5, dtype=np.int32) for i in range(N)], 4)
        files = [prefix]
    with daemon.client() as c:
        c.dataset_add("job", "train", fmt, seed=SEED, global_batch=global_batch, files=files, dp=dp)


def loaders(daemon, dp, global_batch=None, state=None):
    out = []
    for d in range(dp):
        ld = Loader("job", "train", d, dp, global_batch, client=daemon.client(), mount=daemon.mnt, leader=d == 0,
                    barrier=lambda: None)
        if state is not None:
            ld.load_state_dict(state)
        out.append(ld)
    return out


def take(lds, iters, key=lambda s: s["id"]):
    """`iters` global batches: each the ranks' parts in dp order (the leader first)."""
    got = []
    for _ in range(iters):
        got.append([key(s) for ld in lds for s in next(ld)])
    return got


def expected(epoch, start, batch, count, offset=0):
    """The `count` global batches of `batch` from sample `start` of the epoch's order."""
    order = ptcds.epoch_order(SEED, epoch, N)
    return [order[start + k * batch:start + (k + 1) * batch] for k in range(count)] if offset <= start else None


def test_resumes_across_dp_and_batch_changes_in_the_documented_order(daemon, tmp_path):
    make_dataset(daemon, tmp_path)
    seen = []
    # dp 4, batch 12: 3 batches, then the state (same on every rank) is saved.
    lds = loaders(daemon, 4)
    seen += take(lds, 3)
    states = [ld.state_dict() for ld in lds]
    assert all(s == states[0] for s in states)
    assert {k: states[0][k] for k in ("epoch", "consumed", "batch_offset", "global_batch")} == \
        {"epoch": 0, "consumed": 36, "batch_offset": 0, "global_batch": 12}
    with daemon.client() as c:  # the leader recorded it
        st = c.dataset_ls("job")["datasets"][0]
    assert (st["consumed"], st["dp"]) == (36, 4)
    # Two more batches are read but never saved: the resume goes back to sample 36.
    take(lds, 2)
    # dp 2, same batch.
    lds = loaders(daemon, 2, 12, states[0])
    seen += take(lds, 2)
    state = lds[0].state_dict()
    assert state["consumed"] == 60
    # dp 3, batch 6: batches of 6 start at sample 60.
    lds = loaders(daemon, 3, 6, state)
    seen += take(lds, 3)
    state = lds[1].state_dict()
    assert (state["consumed"], state["batch_offset"], state["global_batch"]) == (78, 60, 6)
    # dp 2, batch 8 from 78: (103 - 78) div 8 = 3 batches left, then the next epoch in batches of 8.
    lds = loaders(daemon, 2, 8, state)
    seen += take(lds, 5)
    order0 = ptcds.epoch_order(SEED, 0, N)
    want = [order0[k * 12:(k + 1) * 12] for k in range(5)]
    want += [order0[60 + k * 6:60 + (k + 1) * 6] for k in range(3)]
    want += [order0[78 + k * 8:78 + (k + 1) * 8] for k in range(3)]
    order1 = ptcds.epoch_order(SEED, 1, N)
    want += [order1[0:8], order1[8:16]]
    assert seen == want
    # Every sample of epoch 0 up to the last whole batch was read exactly once.
    firsts = [i for b in seen[:11] for i in b]
    assert sorted(firsts) == sorted(order0[:102]) and len(set(firsts)) == 102
    state = lds[0].state_dict()
    assert (state["epoch"], state["consumed"], state["batch_offset"]) == (1, 16, 0)
    with daemon.client() as c:
        st = c.dataset_ls("job")["datasets"][0]
    assert (st["epoch"], st["consumed"], st["dp"], st["global_batch"]) == (1, 16, 2, 8)


def test_a_state_from_before_a_later_batch_change_is_set_exactly(daemon, tmp_path):
    make_dataset(daemon, tmp_path)
    lds = loaders(daemon, 4)
    take(lds, 2)
    old = lds[0].state_dict()  # consumed 24 at batch 12
    lds = loaders(daemon, 2, 6, old)
    take(lds, 3)
    lds[0].state_dict()  # the daemon: batch 6 from 24, at 42
    # Back to the older checkpoint, at dp 3 and batch 12 again: the order goes on at 24.
    lds = loaders(daemon, 3, 12, old)
    order0 = ptcds.epoch_order(SEED, 0, N)
    assert take(lds, 2) == [order0[24:36], order0[36:48]]
    s = lds[2].state_dict()
    assert (s["consumed"], s["batch_offset"], s["global_batch"]) == (48, 0, 12)


def test_megatron_views_give_the_sequences(daemon, tmp_path):
    make_dataset(daemon, tmp_path, "megatron", global_batch=4, dp=2)
    lds = loaders(daemon, 2)
    got = take(lds, 2, key=lambda a: a.tolist())
    order0 = ptcds.epoch_order(SEED, 0, N)
    assert got == [[list(range(i, i + 1 + i % 5)) for i in order0[k * 4:(k + 1) * 4]] for k in range(2)]


def test_bad_states_are_refused_and_change_nothing(daemon, tmp_path):
    make_dataset(daemon, tmp_path)
    ld = loaders(daemon, 4)[0]
    good = ld.state_dict()
    with pytest.raises(ptcfs.Error, match="lacks consumed"):
        ld.load_state_dict({k: v for k, v in good.items() if k != "consumed"})
    with pytest.raises(ptcfs.Error, match="of dataset job/train \\(seed 12"):
        ld.load_state_dict({**good, "seed": 12})
    with pytest.raises(ptcfs.Error, match="consumed 5 is not batch_offset 0 plus a multiple of 12"):
        ld.load_state_dict({**good, "consumed": 5})
    with pytest.raises(ptcfs.Error, match="dp 5 does not divide the global batch 12"):
        Loader("job", "train", 0, 5, client=daemon.client(), mount=daemon.mnt)
    assert ld.state_dict() == good
    with daemon.client() as c:
        st = c.dataset_ls("job")["datasets"][0]
    assert (st["consumed"], st["dp"], st["version"]) == (0, 4, 1)


def test_stock_dcp_keeps_the_loader_as_bytes_items_and_resumes_it_at_another_dp(daemon, tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp

    make_dataset(daemon, tmp_path)
    lds = loaders(daemon, 4)
    take(lds, 2)
    w = torch.arange(6.0)
    ck = str(tmp_path / "ck")  # a plain folder: torch's own FileSystemWriter and FileSystemReader
    dcp.save({"w": w, "data": lds[0]}, checkpoint_id=ck)
    meta = dcp.FileSystemReader(ck).read_metadata()
    assert sorted(k for k in meta.state_dict_metadata if k.startswith("data.")) == \
        sorted("data." + k for k in ("version", "dataset", "seed", "num_samples", "epoch", "consumed",
                                     "batch_offset", "global_batch"))
    new = loaders(daemon, 3)
    sd = {"w": torch.zeros(6), "data": new[0]}
    dcp.load(sd, checkpoint_id=ck)
    assert torch.equal(sd["w"], w)
    for ld in new[1:]:
        ld.load_state_dict(new[0].state_dict())
    order0 = ptcds.epoch_order(SEED, 0, N)
    assert take(new, 1) == [order0[24:36]]
