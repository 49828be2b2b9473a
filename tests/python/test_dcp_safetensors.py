"""DCP directories whose items are safetensors files (ptcfs.dcp_safetensors; docs/FORMATS.md
"Distributed Checkpoint"): what torch's HuggingFaceStorageWriter writes from 1 and 2 gloo processes
(no .metadata) and what a FileSystemWriter with serialization_format=SAFETENSORS writes (.metadata)
import into a step whole, bit for bit, and stock dcp.load reads the step back; crafted files are
refused naming the file and tensor, and leave no step."""

import json
import os
import struct
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_dcp import cli, import_dcp  # noqa: E402


def expected():
    """The saved values, whole: w is saved as a DTensor Shard(0) (7 rows: uneven on 2 ranks)."""
    g = torch.Generator().manual_seed(7)
    return {"model.w": torch.randn(7, 5, generator=g), "model.h": torch.randn(3, 4, generator=g).to(torch.bfloat16),
            "model.b": torch.arange(6, dtype=torch.int64)}


def hf_save(rank, world, init, out):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        sd = expected()
        sd["model.w"] = distribute_tensor(sd["model.w"], mesh, [Shard(0)])
        # One process: rank-0 style (one file and model.safetensors.index.json); two: every rank its own file.
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(out, save_distributed=world > 1))
    finally:
        dist.destroy_process_group()


def saved_by_hf_writer(tmp_path, world):
    out = tmp_path / f"hf{world}"
    mp.spawn(hf_save, args=(world, str(tmp_path / f"init{world}"), str(out)), nprocs=world, join=True)
    return out


def check_step(daemon, job_step):
    step = os.path.join(daemon.mnt, job_step)
    assert daemon.cli_json("ls", job_step, "--json")["state"] == "committed"
    want = expected()
    for name, t in want.items():
        got = np.load(os.path.join(step, "full", name + ".npy"))
        bits = t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
        assert got.dtype == bits.dtype and np.array_equal(got, bits), name
    import torch.distributed.checkpoint as dcp
    sd = {n: torch.zeros_like(t) for n, t in want.items()}
    dcp.load(sd, checkpoint_id=os.path.join(step, "dcp"), no_dist=True)  # torch's FileSystemReader
    for name, t in want.items():
        assert torch.equal(sd[name], t), name


@pytest.mark.parametrize("world, files", [
    (1, ["model-00001-of-00001.safetensors", "model.safetensors.index.json"]),
    (2, ["shard-00001-model-00001-of-00001.safetensors", "shard-00002-model-00001-of-00001.safetensors"]),
])
def test_import_what_torch_hf_storage_writer_saves(tmp_path, daemon, world, files):
    src = saved_by_hf_writer(tmp_path, world)
    assert sorted(os.listdir(src)) == files
    r = cli(daemon, "import", src, "--format", "dcp", "--job", "hf", "--step", "1", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["tensors"], got["items"], got["bytes"]) == (3, 0, 7 * 5 * 4 + 3 * 4 * 2 + 6 * 8)
    check_step(daemon, "hf/1")


def metadata_dir(tmp_path):
    """FileSystemWriter(serialization_format=SAFETENSORS): .metadata beside safetensors __0_0.distcp."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    d = tmp_path / "with-metadata"
    writer = dcp.FileSystemWriter(str(d), serialization_format=SerializationFormat.SAFETENSORS)
    dcp.save(expected(), storage_writer=writer, no_dist=True)
    return d


def test_import_safetensors_items_with_a_metadata_file(tmp_path, daemon):
    src = metadata_dir(tmp_path)
    assert sorted(os.listdir(src)) == [".metadata", "__0_0.distcp"]
    r = cli(daemon, "import", src, "--format", "dcp", "--job", "hf", "--step", "2", "--json")
    assert r.returncode == 0, r.stderr
    check_step(daemon, "hf/2")


# --- crafted directories: refused naming the file and tensor, the store unchanged

def write_shard(path, tensors, offsets, info=None):
    """A file as torch's HF writer writes it (safetensors.torch.save with DCP_SHARDING_INFO)."""
    from safetensors.torch import save_file
    info = json.dumps({n: {"saved_offsets": o} for n, o in offsets.items()}) if info is None else info
    save_file(tensors, str(path), metadata={"DCP_SHARDING_INFO": info, "DCP_VERSION": "1.0", "format": "pt"})


def two_shards(d, second_at, second_rows, info=None):
    """w (7x5 float32) as two files: rows [0, 4) and `second_rows` rows at row `second_at`."""
    d.mkdir()
    w = expected()["model.w"]
    write_shard(d / "shard-00001.safetensors", {"w": w[:4]}, {"w": [0, 0]})
    write_shard(d / "shard-00002.safetensors", {"w": w[second_at:second_at + second_rows]}, {"w": [second_at, 0]},
                info)
    return d


def patch_header(path, change):
    """Rewrites a safetensors file's header JSON through `change`, data unchanged."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    change(h)
    js = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(js)) + js + raw[8 + n:])


def lying_data_offsets(d):
    two_shards(d, 4, 3)
    patch_header(d / "shard-00002.safetensors", lambda h: h["w"].update(data_offsets=[0, 40]))


def outside_the_tensor(d):
    """.metadata says w is 7x5; the file's chunk of 7 rows claims to start at row 1."""
    import shutil
    shutil.copytree(metadata_dir(d.parent / "tmp"), d)
    patch_header(d / "__0_0.distcp", lambda h: h["__metadata__"].update(
        DCP_SHARDING_INFO=json.dumps({"model.w": {"saved_offsets": [1, 0]}, "model.h": {"saved_offsets": [0, 0]},
                                      "model.b": {"saved_offsets": [0]}})))


@pytest.mark.parametrize("craft, text", [
    (lambda d: two_shards(d, 3, 4), "tensor 'w': chunks at [0, 0] and [3, 0] overlap"),
    (lambda d: two_shards(d, 5, 2), "tensor 'w' [7, 5]: its chunks hold 30 of its 35 elements"),
    (outside_the_tensor, "tensor 'model.w' [7, 5]: chunk at [1, 0] of [7, 5] lies outside it"),
    (lying_data_offsets,
     "shard-00002.safetensors: tensor 'w': data_offsets [0, 40] hold 40 bytes, F32 [3, 5] needs 60"),
    (lambda d: two_shards(d, 4, 3, info='{"w": {"saved_offsets": [4, 0]'),
     "shard-00002.safetensors: DCP_SHARDING_INFO: not valid JSON"),
    (lambda d: two_shards(d, 4, 3, info='{"w": {"saved_offsets": [4]}}'),
     "shard-00002.safetensors: DCP_SHARDING_INFO: tensor 'w': {\"saved_offsets\": [4]} is not"),
    (lambda d: two_shards(d, 4, 3, info='{"w": {"saved_offsets": [4, 0]}, "v": {"saved_offsets": [0]}}'),
     "shard-00002.safetensors: DCP_SHARDING_INFO: names tensors ['v']"),
])
def test_crafted_safetensors_items_are_refused_and_the_store_is_unchanged(tmp_path, daemon, craft, text):
    d = tmp_path / "src"
    craft(d)
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and text in r.stderr, r.stderr
    assert str(d) in r.stderr
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "1"))


def test_a_missing_file_named_by_the_index_is_refused(tmp_path, daemon):
    src = saved_by_hf_writer(tmp_path, 1)
    idx = json.load(open(src / "model.safetensors.index.json"))
    idx["weight_map"]["model.x"] = "model-00002-of-00002.safetensors"
    json.dump(idx, open(src / "model.safetensors.index.json", "w"))
    r = import_dcp(daemon, src, "bad", "2")
    assert r.returncode == 1 and "tensor 'model.x' is mapped to \"model-00002-of-00002.safetensors\"" in r.stderr, \
        r.stderr
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "2"))


def test_a_bytes_item_beside_safetensors_items_is_refused(tmp_path, daemon):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    d = tmp_path / "mixed"  # torch writes the int's torch.save archive, then the safetensors file, into one file
    dcp.save({"w": torch.ones(2, 3), "step": 3}, no_dist=True,
             storage_writer=dcp.FileSystemWriter(str(d), serialization_format=SerializationFormat.SAFETENSORS))
    r = import_dcp(daemon, d, "bad", "3")
    assert r.returncode == 1 and "entry 'step' is a bytes item; a safetensors DCP checkpoint holds tensors only" \
        in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "3"))
