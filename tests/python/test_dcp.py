"""PyTorch Distributed Checkpoint through the mount (ptcfs.dcp, docs/FORMATS.md "Distributed
Checkpoint"): stock dcp.save and dcp.async_save from gloo processes on one mesh, stock dcp.load at
other world sizes and placements, before and after `ptcfs repartition`, every tensor and every
non-tensor entry bit for bit; the committed step is a ptcfs step whose views hold the values."""

import dataclasses
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp_worker  # noqa: E402

import ptcfs  # noqa: E402


def run(tmp_path, world, mode, step, layout):
    out = tmp_path / f"{mode}-{layout}-{world}"
    out.mkdir()
    init = str(out / "init")
    mp.spawn(dcp_worker.run, args=(world, init, mode, step, layout, str(out)), nprocs=world, join=True)
    return [json.load(open(out / f"r{r}.json")) for r in range(world)]


def check_saved_step(daemon, job_step):
    """A DCP save of dcp_worker's state is a committed ptcfs step: one tensor per DCP tensor, whole,
    the bytes items beside them, and full views holding exactly the saved values."""
    step = os.path.join(daemon.mnt, job_step)
    info = daemon.cli_json("ls", job_step, "--json")
    assert info["state"] == "committed", info
    ptc = json.load(open(os.path.join(step, "ptc.json")))
    assert ptc["parallelism"] == {"tp": 1, "pp": 1, "dp": 1}
    assert sorted(n for n in ptc["tensors"] if not n.startswith("__dcp__/")) == sorted([*dcp_worker.TENSORS, "rng"])
    assert sorted(n for n in ptc["tensors"] if n.startswith("__dcp__/bytes/")) == sorted(
        "__dcp__/bytes/" + k for k in dcp_worker.OBJECTS)
    want = dcp_worker.expected()
    for name in ("model.embed.weight", "model.layers.0.mlp.w1", "model.pos", "optim.state.model.embed.weight.step"):
        got = np.load(os.path.join(step, "full", name + ".npy"))
        assert np.array_equal(got, want[name].numpy()), name
    bf16 = np.load(os.path.join(step, "full", "model.layers.0.attn.wqkv.npy"))
    assert np.array_equal(bf16, want["model.layers.0.attn.wqkv"].view(torch.int16).numpy().view(np.uint16))


def test_stock_dcp_saves_into_the_mount_and_loads_at_any_mesh(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "100")
    run(tmp_path, 4, "save", step, "mesh2x2")
    check_saved_step(daemon, "llama/100")

    for world, layout in ((1, "plain"), (3, "shard1"), (2, "shard0")):
        for rec in run(tmp_path, world, "load", step, layout):
            assert rec["differ"] == [], (world, layout, rec)
    # Stock dcp.load with torch's own FileSystemReader, from the step's DCP view (dcp/).
    for world, layout in ((1, "plain"), (3, "shard1")):
        for rec in run(tmp_path, world, "stock_load", os.path.join(step, "dcp"), layout):
            assert rec["differ"] == [], ("dcp view", world, layout, rec)

    daemon.cli("repartition", "--job", "llama", "--step", "100", "--to", "tp=2,pp=1,dp=2")
    assert json.load(open(os.path.join(step, "ptc.json")))["parallelism"] == {"tp": 2, "pp": 1, "dp": 2}
    for world, layout in ((4, "mesh2x2"), (3, "shard0")):
        for rec in run(tmp_path, world, "load", step, layout):
            assert rec["differ"] == [], ("after repartition", world, layout, rec)
    for rec in run(tmp_path, 4, "stock_load", os.path.join(step, "dcp"), "mesh2x2"):
        assert rec["differ"] == [], ("dcp view after repartition", rec)
    # A DCP save records how its chunks split each tensor: at tp 2 the view's chunks are the two
    # shards' slices; w1 (9 columns: 5 and 4, padded) is shown whole, from full.distcp.
    assert sorted(os.listdir(os.path.join(step, "dcp"))) == [".metadata", "full.distcp", "tp0-pp0.distcp",
                                                             "tp1-pp0.distcp"]
    tensors = json.load(open(os.path.join(step, "ptc.json")))["tensors"]
    assert (tensors["model.embed.weight"]["tp_dim"], tensors["model.embed.weight"]["pad_to"]) == (0, 1)
    assert tensors["model.layers.0.mlp.w1"]["tp_dim"] == 1 and "tp_dim" not in tensors["model.norm.weight"]


def test_stock_dcp_async_save_into_the_mount(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "200")
    run(tmp_path, 2, "async_save", step, "shard0")
    assert daemon.cli_json("ls", "llama/200", "--json")["state"] == "committed"
    for rec in run(tmp_path, 1, "load", step, "plain"):
        assert rec["differ"] == [], rec


def test_a_dtype_ptcfs_cannot_store_fails_the_save_before_a_byte_is_written(tmp_path, daemon):
    import torch.distributed.checkpoint as dcp
    import ptcfs.dcp
    step = os.path.join(daemon.mnt, "bad", "1")
    from torch.distributed.checkpoint.api import CheckpointException  # (a BaseException)
    with pytest.raises(CheckpointException, match="DCP tensor 'model.c': dtype torch.complex64 has no safetensors type"):
        dcp.save({"model.c": torch.zeros(2, dtype=torch.complex64)}, storage_writer=ptcfs.dcp.StorageWriter(step),
                 no_dist=True)
    assert not os.path.exists(os.path.join(step, "tp0-pp0"))
    assert not os.path.exists(os.path.join(step, "ptc.json"))


def import_dcp(daemon, src, job, step):
    return subprocess.run([sys.executable, "-m", "ptcfs", "import-dcp", str(src), "--job", job, "--step", step,
                           "--daemon", daemon.addr, "--json"], capture_output=True, text=True, timeout=300)


def cli(daemon, *args):
    """The ptcfs CLI, which runs the Python package's command with $PTCFS_PYTHON."""
    env = {**os.environ, "PTCFS_PYTHON": sys.executable, "PYTHONPATH": os.path.dirname(ptcfs.__path__[0])}
    return subprocess.run([daemon.ptcfs, "--daemon", daemon.addr, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_import_a_stock_dcp_directory_and_export_one_stock_dcp_loads(tmp_path, daemon):
    src = tmp_path / "stock"
    run(tmp_path, 4, "stock_save", str(src), "mesh2x2")  # torch's FileSystemWriter, 4 ranks, 2-D mesh
    r = cli(daemon, "import", src, "--format", "dcp", "--job", "imp", "--step", "5", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["tensors"], got["items"]) == (len(dcp_worker.TENSORS) + 1, len(dcp_worker.OBJECTS))
    assert got["bytes"] == sum(t.numel() * t.element_size() for t in dcp_worker.expected().values()) + \
        dcp_worker.objects()["rng"].numel()
    assert daemon.cli_json("ls", "imp/5", "--json")["state"] == "committed"
    step = os.path.join(daemon.mnt, "imp", "5")
    for world, layout in ((3, "shard1"), (1, "plain")):
        for rec in run(tmp_path, world, "load", step, layout):
            assert rec["differ"] == [], (world, layout, rec)

    out = tmp_path / "exported"
    e = cli(daemon, "export", "imp/5", out, "--format", "dcp", "--json")
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["tensors"] == len(dcp_worker.TENSORS) + 1
    for world, layout in ((2, "shard0"), (4, "mesh2x2")):  # torch's FileSystemReader of the export
        for rec in run(tmp_path, world, "stock_load", str(out), layout):
            assert rec["differ"] == [], ("export", world, layout, rec)
    from torch.distributed.checkpoint import FileSystemReader
    theirs, ours = FileSystemReader(str(src)).read_metadata(), FileSystemReader(str(out)).read_metadata()
    assert ours.planner_data == theirs.planner_data and len(ours.planner_data) == 15


# --- hostile DCP directories: refused with a clear error, nothing run, the store unchanged

def stock_dir(tmp_path, name="src"):
    import torch.distributed.checkpoint as dcp
    d = tmp_path / name
    dcp.save({"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 3}, checkpoint_id=str(d), no_dist=True)
    return d


def rewrite_metadata(d, change):
    """Loads the test's own .metadata with pickle (it wrote it), changes it, writes it back."""
    with open(d / ".metadata", "rb") as f:
        md = pickle.load(f)
    change(md)
    with open(d / ".metadata", "wb") as f:
        pickle.dump(md, f)


def info_of(md, fqn):
    (key,) = [k for k in md.storage_data if k.fqn == fqn]
    return key


def lying_length(md):
    k = info_of(md, "w")
    md.storage_data[k] = dataclasses.replace(md.storage_data[k], length=md.storage_data[k].length + 10 ** 6)


def overlapping(md):
    m = md.state_dict_metadata["w"]
    c = m.chunks[0]
    m.chunks[:] = [dataclasses.replace(c, sizes=torch.Size([2, 4])),
                   dataclasses.replace(c, offsets=torch.Size([1, 0]), sizes=torch.Size([2, 4]))]
    md.storage_data[dataclasses.replace(info_of(md, "w"), offset=torch.Size([1, 0]))] = md.storage_data[info_of(md, "w")]


def missing(md):
    m = md.state_dict_metadata["w"]
    m.chunks[0] = dataclasses.replace(m.chunks[0], sizes=torch.Size([2, 4]))


def huge(md):
    m = md.state_dict_metadata["w"]
    md.state_dict_metadata["w"] = dataclasses.replace(m, size=torch.Size([1 << 40, 1 << 30]))


def transformed(md):
    k = info_of(md, "w")
    md.storage_data[k] = dataclasses.replace(md.storage_data[k], transform_descriptors=["stream.zstd/1"])


def escaping(md):
    k = info_of(md, "step")
    md.storage_data[k] = dataclasses.replace(md.storage_data[k], relative_path="../../etc/passwd")


@pytest.mark.parametrize("change, text", [
    (lying_length, "lie past its end"),
    (overlapping, "overlap"),
    (missing, "its chunks hold 8 of its 12 elements"),
    (huge, "its chunks hold 12 of its 1180591620717411303424 elements"),
    (transformed, "stored through transforms ['stream.zstd/1']"),
    (escaping, "is not a file name of this folder"),
])
def test_crafted_metadata_is_refused_and_the_store_is_unchanged(tmp_path, daemon, change, text):
    d = stock_dir(tmp_path)
    rewrite_metadata(d, change)
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and text in r.stderr, r.stderr
    assert str(d) in r.stderr
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "1"))


def test_code_in_the_metadata_pickle_is_never_run(tmp_path, daemon):
    d = stock_dir(tmp_path)
    mark = tmp_path / "ran"
    (d / ".metadata").write_bytes(b"cos\nsystem\n(S'touch " + str(mark).encode() + b"'\ntR.")
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and "holds os.system(...), a call the loader refused (not on its allowlist), not DCP's Metadata" in r.stderr, r.stderr
    assert not mark.exists()
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "1"))


def test_without_the_python_package_the_cli_says_what_to_install(tmp_path, daemon):
    env = {**os.environ, "PTCFS_PYTHON": str(tmp_path / "no-python")}
    r = subprocess.run([daemon.ptcfs, "--daemon", daemon.addr, "import", str(tmp_path), "--format", "dcp", "--job", "j",
                        "--step", "1"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1
    assert r.stderr.startswith(f"ptcfs: error: cannot run {tmp_path}/no-python (No such file or directory): this "
                               "command needs the ptcfs Python package with torch 2.x"), r.stderr


def test_a_compressed_item_a_zip_bomb_is_refused_before_inflating(tmp_path, daemon):
    d = stock_dir(tmp_path)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    payload = bomb.getvalue()
    assert len(payload) < 1 << 20
    (d / "__9_0.distcp").write_bytes(payload)
    rewrite_metadata(d, lambda md: md.storage_data.__setitem__(
        info_of(md, "w"), dataclasses.replace(md.storage_data[info_of(md, "w")], relative_path="__9_0.distcp",
                                               offset=0, length=len(payload))))
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and "is compressed" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "1"))  # the pending step was removed


class Evil:
    """A non-tensor entry whose pickle calls os.system: what a hostile bytes item holds."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


def test_a_bytes_item_that_is_not_plain_data_is_refused_at_import_and_never_run(tmp_path, daemon):
    import torch.distributed.checkpoint as dcp
    mark = tmp_path / "ran"
    d = tmp_path / "src"
    dcp.save({"w": torch.ones(2), "evil": Evil(mark)}, checkpoint_id=str(d), no_dist=True)
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and f"{d}: DCP entry 'evil': holds more than plain data" in r.stderr, r.stderr
    assert not mark.exists()
    assert not os.path.exists(os.path.join(daemon.mnt, "bad", "1"))


def test_the_reader_never_unpickles_more_than_plain_data(tmp_path, daemon):
    """A step whose bytes item holds a call (the job's own save through StorageWriter, or any step
    with such a U8 tensor): loading it is refused, and nothing runs."""
    import torch.distributed.checkpoint as dcp
    import ptcfs.dcp
    mark = tmp_path / "ran"
    step = os.path.join(daemon.mnt, "ev", "1")
    dcp.save({"w": torch.ones(2), "evil": Evil(mark)}, storage_writer=ptcfs.dcp.StorageWriter(step), no_dist=True)
    assert daemon.cli_json("ls", "ev/1", "--json")["state"] == "committed"
    from torch.distributed.checkpoint.api import CheckpointException
    with pytest.raises(CheckpointException, match="DCP entry 'evil': holds more than plain data"):
        dcp.load({"w": torch.zeros(2), "evil": None}, storage_reader=ptcfs.dcp.StorageReader(step), no_dist=True)
    assert not mark.exists()


def symlinked(tmp_path, d):
    """The tensor item's file replaced by a symlink to a file outside the folder."""
    outside = tmp_path / "outside.distcp"
    os.rename(d / "__0_0.distcp", outside)
    os.symlink(outside, d / "__0_0.distcp")


def unknown_field(md):
    md.state_dict_metadata["w"].__dict__["get"] = 1  # a state key that would shadow a method


def nested_offset(md):
    k = info_of(md, "w")
    info = md.storage_data.pop(k)
    deep = (0,)
    for _ in range(20):  # 2^20 leaves, a few hundred bytes pickled: str() or hash() of it is slow
        deep = (deep, deep)
    object.__setattr__(k, "offset", deep)  # (a frozen dataclass: set as a crafted file would hold it)
    md.storage_data[k] = info


@pytest.mark.parametrize("change, text", [
    (unknown_field, "TensorStorageMetadata: unknown field 'get'"),
    (nested_offset, "storage_data offset of 'w': a tuple is not a tuple of non-negative integer(s)"),
])
def test_crafted_objects_in_the_metadata_are_refused_quickly(tmp_path, daemon, change, text):
    import time
    d = stock_dir(tmp_path)
    rewrite_metadata(d, change)
    t0 = time.monotonic()
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and text in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_a_storage_file_that_is_a_symlink_is_refused(tmp_path, daemon):
    d = stock_dir(tmp_path)
    symlinked(tmp_path, d)
    r = import_dcp(daemon, d, "bad", "1")
    assert r.returncode == 1 and "storage file __0_0.distcp is not a regular file of" in r.stderr, r.stderr
