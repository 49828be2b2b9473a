"""Layouts from chunks and ptcfs.dcp.prepare (docs/FORMATS.md "Layouts from chunks"): a stock
dcp.save into the mount records how its chunks split each tensor, and is stored at the tp whose
slices are its chunks; ptcfs.dcp.prepare, called by every rank of a job at a new mesh before stock
dcp.load, repartitions the step to the tp whose slices are that mesh's boxes, so that the step's
DCP view holds each rank's box as one chunk and torch's own reader reads each rank's share and
little more. Every load is compared bit for bit."""

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp_worker  # noqa: E402
from test_dcp import run  # noqa: E402


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    """A daemon serving its metrics (this module's own), whose address the workers' prepare asks."""
    from ptcfs_daemon import Daemon, free_port
    d = Daemon(str(tmp_path / "daemon"), extra=["--metrics", f"127.0.0.1:{free_port()}"])
    d.metrics = d.extra[1]
    monkeypatch.setenv("PTCFS_DAEMON", d.addr)
    try:
        yield d.start()
    finally:
        d.stop()


def dcp_read_bytes(daemon):
    """{file: bytes} of ptcfs_dcp_read_bytes_total, scraped."""
    import re
    import urllib.request
    with urllib.request.urlopen(f"http://{daemon.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^ptcfs_dcp_read_bytes_total\{file="([^"]+)"\} (\S+)$', text, re.M)}


def run_plain(tmp_path, world, mode, step):
    out = tmp_path / f"plain-{mode}-{world}"
    out.mkdir()
    mp.spawn(dcp_worker.run_plain, args=(world, str(out / "init"), mode, step, str(out)), nprocs=world, join=True)
    return [json.load(open(out / f"r{r}.json")) for r in range(world)]


def view_chunks(step):
    """{fqn: sorted [(offsets, sizes)]} of the step's DCP view, as torch's own reader reads it."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = FileSystemReader(step).read_metadata()
    return {k: sorted((list(c.offsets), list(c.sizes)) for c in v.chunks)
            for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}


def rank_boxes(recs, name):
    """The distinct boxes the ranks hold of `name`, as (offsets, sizes), sorted."""
    out = {(tuple(lo), tuple(h - l for l, h in zip(lo, hi))) for r in recs for lo, hi in [r["boxes"][name]]}
    return sorted(([*o], [*s]) for o, s in out if all(s))


def share(rec):
    """Bytes of run_plain's state that a rank holds: its rows of w, b and emb, the norm and count."""
    return sum((hi[0] - lo[0]) * row for n, row in (("w", 48 * 4), ("b", 4), ("emb", 16 * 2))
               for lo, hi in [rec["boxes"][n]]) + 48 * 4 + 8


def distcp_read(rec):
    return sum(n for f, n in rec["read"].items() if f.endswith(".distcp"))


def test_a_stock_save_is_stored_at_the_tp_of_its_chunks_and_prepare_lays_it_out_for_each_new_mesh(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "fsdp", "10")
    run_plain(tmp_path, 4, "stock_save", step)
    ptc = json.load(open(os.path.join(step, "ptc.json")))
    assert ptc["parallelism"] == {"tp": 4, "pp": 1, "dp": 1}
    for name in ("w", "b", "emb"):
        assert (ptc["tensors"][name].get("tp_dim"), ptc["tensors"][name].get("pad_to")) == (0, 1), name
    assert "tp_dim" not in ptc["tensors"]["norm"] and "tp_dim" not in ptc["tensors"]["count"]
    assert sorted(os.listdir(os.path.join(step, "tp3-pp0"))) == ["__dcp__", "b.npy", "count.npy", "emb.npy", "norm.npy",
                                                                 "w.npy"]
    # The view's chunks are the saved shards: 37 rows over 4 ranks are 10, 10, 10 and 7.
    assert view_chunks(step)["b"] == [([0], [10]), ([10], [10]), ([20], [10]), ([30], [7])]

    # Without prepare, 3 ranks read chunks cut for 4: rank 1 needs rows 22-43 of w, in 3 chunks.
    plain = run_plain(tmp_path, 3, "stock_load", step)
    assert all(r["differ"] == [] for r in plain), plain

    for world in (3, 8, 1, 2):
        before = dcp_read_bytes(daemon)
        recs = run_plain(tmp_path, world, "prepare_load", step)
        after = dcp_read_bytes(daemon)
        for r in recs:
            assert r["differ"] == [], (world, r)
            res = r["prepare"]
            assert res["to"] == {"tp": world, "pp": 1, "dp": 1}, (world, res)
            assert res["chunks"]["tensors"] == 5 and res["chunks"]["exact"] == 5, (world, res["chunks"])
            assert res["chunks"]["bytes_exact"] == res["chunks"]["bytes"]
        chunks = view_chunks(step)
        for name in ("w", "b", "emb"):
            assert chunks[name] == rank_boxes(recs, name), (world, name)
        assert chunks["norm"] == [([0], [48])]
        # Torch's reader reads of the .distcp files each rank's own chunks: its share of w, b and
        # emb, the whole norm and count, and of each of those 5 chunks its archive (headers and
        # central directory, which torch.load reads more than once: under 4 KiB), nothing of
        # the others' rows.
        for r in recs:
            assert share(r) <= distcp_read(r) <= share(r) + 5 * 4096, (world, r["rank"], share(r), r["read"])
            assert r["prepare"]["share"] == share(r)
            # The daemon served of that rank's file its share and the archives' headers, each byte
            # once (the page cache answers torch's second reads of a header).
            served = after.get(f"tp{r['rank']}-pp0.distcp", 0) - before.get(f"tp{r['rank']}-pp0.distcp", 0)
            assert share(r) <= served <= share(r) + 5 * 4096, (world, r["rank"], served)
        if world == 3:
            prepared = recs
    # Without prepare, rank 1 of 3 reads chunks cut for 4 (two of w, b and emb each, rows it does
    # not need with them): more than with it.
    assert distcp_read(plain[1]) > distcp_read(prepared[1]) + 2 * 4096, (plain[1]["read"], prepared[1]["read"])


def test_prepare_after_a_save_at_a_2x2_mesh_splits_what_the_chunks_split(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "500")
    run(tmp_path, 4, "stock_save", step, "mesh2x2")
    tensors = json.load(open(os.path.join(step, "ptc.json")))["tensors"]
    assert tensors["model.embed.weight"]["tp_dim"] == 0     # Shard(0) over dp_shard
    assert tensors["model.layers.0.mlp.w1"]["tp_dim"] == 1  # Shard(1) over tp
    assert tensors["model.layers.0.attn.wqkv"]["tp_dim"] == 0  # a 2 x 2 grid: the lower dimension
    assert "tp_dim" not in tensors["model.norm.weight"]
    recs = run(tmp_path, 3, "prepare_load", step, "shard0")
    for r in recs:
        assert r["differ"] == [], r
        res = r["prepare"]
        assert res["to"]["tp"] == 3, res
        # w1 is split along columns, the norm not at all: rows of them are not slices.
        assert res["chunks"]["exact"] == res["chunks"]["tensors"] - 2, res["chunks"]
    assert view_chunks(step)["model.embed.weight"] == [([0, 0], [4, 6]), ([4, 0], [4, 6]), ([8, 0], [2, 6])]


def test_a_storage_reader_with_prepare_lays_the_step_out_for_the_load_plan(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "600")
    run(tmp_path, 4, "stock_save", step, "mesh2x2")
    recs = run(tmp_path, 3, "prepared_load", step, "shard0")
    assert all(r["differ"] == [] for r in recs), recs
    res = recs[0]["prepare"]  # the coordinator's (rank 0)
    assert res["to"]["tp"] == 3 and res["chunks"]["exact"] == res["chunks"]["tensors"] - 2, res
    assert daemon.cli_json("ls", "llama/600", "--json")["parallelism"]["tp"] == 3
    # Without prepare the reader leaves the layout as it is.
    run(tmp_path, 2, "load", step, "shard1")
    assert daemon.cli_json("ls", "llama/600", "--json")["parallelism"]["tp"] == 3


def test_prepare_names_a_step_and_a_refusal_reaches_every_rank(tmp_path, daemon):
    import ptcfs
    from ptcfs.dcp_prepare import job_step_of
    with pytest.raises(ptcfs.Error, match="does not name a step"):
        job_step_of("just-one")
    assert job_step_of(os.path.join(daemon.mnt, "j", "7", "dcp")) == ("j", "7")
    # A step that does not exist: the daemon's refusal is raised on every rank, nothing loaded.
    recs = run_plain(tmp_path, 2, "prepare_load", os.path.join(daemon.mnt, "nojob", "1"))
    for r in recs:
        assert r["error"].startswith("not_found:") and "nojob" in r["error"], r
