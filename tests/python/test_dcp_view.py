"""The DCP view of every step (MNT/<job>/<step>/dcp/, docs/FORMATS.md "The DCP view"): stock
torch.distributed.checkpoint loads a step imported as rank files, with fused, padded and
row-parallel tensors, at 1 and 2 gloo ranks in other placements, before and after a repartition,
bit for bit against the oracle's tensors (ptcgen); and the files are what the format says."""

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import ptcgen  # noqa: E402
import dcp_view_worker  # noqa: E402


def make_ptc(tp, pp):
    t = ptcgen._t
    return {"parallelism": {"tp": tp, "pp": pp, "dp": 1}, "num_layers": 2, "tensors": {
        "embed": t("F32", [10, 4], tp_dim=0, pad_to=4, stage="first"),          # padded rows
        "layers.0.qkv": t("BF16", [12, 4], tp_dim=0, parts=3, layer=0),         # fused along dim 0
        "layers.1.gate_up": t("F16", [4, 8], tp_dim=1, parts=2, layer=1),       # fused along dim 1: full.distcp
        "layers.1.proj": t("F32", [4, 6], tp_dim=1, layer=1),                  # row-parallel
        "norm": t("F32", [4], stage="last"),                                    # replicated
        "steps": t("I64", [3, 2], stage="all"),
        "mask": t("I16", [5], stage="last"),
    }}


@pytest.fixture
def imported(daemon, tmp_path):
    ptc = make_ptc(2, 2)
    full = ptcgen.full_tensors(ptc, 3)
    ptcgen.write_checkpoint(str(tmp_path / "ck"), ptc, full)
    with daemon.client() as c:
        c.import_dir(str(tmp_path / "ck"), "j", 1)
    return ptc, full, os.path.join(daemon.mnt, "j", "1", "dcp")


def torch_of(a, dtype):
    t = torch.from_numpy(np.ascontiguousarray(a))
    if dtype == "BF16":
        return t.view(torch.bfloat16)
    return t.view(torch.uint16) if dtype == "U16" else t


def test_stock_load_of_every_tensor_in_one_process(imported):
    ptc, full, view = imported
    assert sorted(os.listdir(view)) == [".metadata", "full.distcp", "tp0-pp0.distcp", "tp0-pp1.distcp",
                                        "tp1-pp0.distcp", "tp1-pp1.distcp"]
    md = dcp.FileSystemReader(view).read_metadata()
    assert sorted(md.state_dict_metadata) == sorted(ptc["tensors"])
    # Chunks: the slices (each padded slice only its real rows; fused parts one chunk each), or the
    # whole tensor where a piece is not whole rows of its slice.
    chunks = {n: sorted((tuple(c.offsets), tuple(c.sizes)) for c in m.chunks) for n, m in md.state_dict_metadata.items()}
    assert chunks["embed"] == [((0, 0), (8, 4)), ((8, 0), (2, 4))]
    assert chunks["layers.0.qkv"] == [((i * 4 + t * 2, 0), (2, 4)) for i in range(3) for t in range(2)]
    assert chunks["layers.1.gate_up"] == [((0, 0), (4, 8))]
    assert chunks["layers.1.proj"] == [((0, 0), (4, 3)), ((0, 3), (4, 3))]
    assert chunks["norm"] == [((0,), (4,))]
    sd = {n: torch.zeros(s["shape"], dtype=torch_of(full[n][:0], s["dtype"]).dtype) for n, s in ptc["tensors"].items()}
    dcp.load(sd, checkpoint_id=view)
    for n, s in ptc["tensors"].items():
        assert torch.equal(sd[n].view(torch.uint8) if sd[n].dtype == torch.bfloat16 else sd[n],
                           torch_of(full[n], s["dtype"]).view(torch.uint8) if s["dtype"] == "BF16"
                           else torch_of(full[n], s["dtype"])), n


def test_each_item_is_a_torch_save_archive_torch_loads_alone(imported):
    ptc, full, view = imported
    md = dcp.FileSystemReader(view).read_metadata()
    for index, info in md.storage_data.items():
        with open(os.path.join(view, info.relative_path), "rb") as f:
            f.seek(info.offset)
            item = f.read(info.length)
        z = zipfile.ZipFile(io.BytesIO(item))
        assert [i.filename for i in z.infolist()] == ["archive/data.pkl", "archive/byteorder", "archive/version",
                                                     "archive/data/0"]
        assert z.read("archive/version") == b"3\n" and z.read("archive/byteorder") == b"little"
        # The data record's bytes start 64-byte aligned from the archive's start, and are the tensor's.
        info0 = z.getinfo("archive/data/0")
        lh = info0.header_offset
        start = lh + 30 + int.from_bytes(item[lh + 26:lh + 28], "little") + int.from_bytes(item[lh + 28:lh + 30], "little")
        assert start % 64 == 0 and start + info0.file_size < len(item)
        # zipfile checks the CRC-32 of what it reads (the small records above); the data record's is 0.
        assert info0.CRC == 0
        t = torch.load(io.BytesIO(item), weights_only=True)
        spec = ptc["tensors"][index.fqn]
        box = tuple(slice(o, o + n) for o, n in zip(index.offset, t.shape))
        assert torch.equal(t.view(torch.uint8) if t.dtype == torch.bfloat16 else t,
                           torch_of(full[index.fqn][box], spec["dtype"]).view(torch.uint8) if spec["dtype"] == "BF16"
                           else torch_of(full[index.fqn][box], spec["dtype"])), index


@pytest.mark.parametrize("world", [2])
def test_stock_load_at_other_placements_before_and_after_a_repartition(imported, daemon, tmp_path, world):
    ptc, full, view = imported
    for when in ("imported", "repartitioned"):
        if when == "repartitioned":
            daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=1")
            assert sorted(os.listdir(view)) == [".metadata", "tp0-pp0.distcp"]
        out = tmp_path / when
        out.mkdir()
        mp.spawn(dcp_view_worker.run, args=(world, str(out / "init"), view, ptc, str(out)), nprocs=world, join=True)
        for r in range(world):
            assert json.load(open(out / f"r{r}.json")) == [], (when, r)
