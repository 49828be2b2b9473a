"""Megatron-Core torch_dist checkpoints through `ptcfs import DIR --format dcp` (docs/FORMATS.md,
"Importing a directory written by stock dcp.save"): directories written by megatron-core's own
`dist_checkpointing.save` from 2 gloo processes on CPU (megatron_dist_worker) import as one whole
tensor per Megatron key, bit for bit, with common.pt and metadata.json kept; stock dcp.load reads
the step, and Megatron's own `dist_checkpointing.load` reads its export. DistributedOptimizer
state in its DP-bucket layout, and a metadata.json that lies, are refused with the store unchanged."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.dist_checkpointing")
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_dist_worker as mw  # noqa: E402

import ptcfs  # noqa: E402

WORLD = 2
OBJECTS = [f"rng_state/shard_{r}_{WORLD}" for r in range(WORLD)]  # ShardedObject unique keys


def megatron(tmp_path, mode, ckpt):
    """Runs megatron_dist_worker in WORLD gloo processes; their records."""
    out = tmp_path / f"run-{mode}-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    os.makedirs(ckpt, exist_ok=True)  # (dist_checkpointing.save wants the folder made)
    mp.spawn(mw.run, args=(WORLD, str(out / "init"), mode, str(ckpt), str(out)), nprocs=WORLD, join=True)
    return [json.load(open(out / f"r{r}.json")) for r in range(WORLD)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A directory written by megatron-core's dist_checkpointing.save (torch_dist), once per module."""
    tmp = tmp_path_factory.mktemp("megatron")
    megatron(tmp, "save", tmp / "ckpt")
    return tmp / "ckpt"


def cli(daemon, *args):
    env = {**os.environ, "PTCFS_PYTHON": sys.executable, "PYTHONPATH": os.path.dirname(ptcfs.__path__[0])}
    return subprocess.run([daemon.ptcfs, "--daemon", daemon.addr, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def import_dcp(daemon, src, job, step):
    return cli(daemon, "import", src, "--format", "dcp", "--job", job, "--step", step, "--json")


def bits(t):
    """A tensor's bytes as a numpy array (bf16 has no numpy dtype)."""
    return t.contiguous().view(torch.uint8).numpy()


def npy_bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def same(got, want):
    return isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape and \
        np.array_equal(bits(got), bits(want))


def test_a_megatron_torch_dist_checkpoint_imports_whole_tensors_and_exports_for_megatron_load(tmp_path, daemon,
                                                                                            saved):
    assert sorted(os.listdir(saved)) == [".metadata", "__0_0.distcp", "__0_1.distcp", "__1_0.distcp", "__1_1.distcp",
                                         "common.pt", "metadata.json"]
    r = import_dcp(daemon, saved, "mcore", "100")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = mw.expected()
    assert (got["tensors"], got["items"], got["megatron"]) == (len(mw.TENSORS), WORLD, True)
    assert got["bytes"] == sum(t.numel() * t.element_size() for t in want.values())
    assert daemon.cli_json("ls", "mcore/100", "--json")["state"] == "committed"

    step = os.path.join(daemon.mnt, "mcore", "100")
    ptc = json.load(open(os.path.join(step, "ptc.json")))
    assert ptc["parallelism"] == {"tp": 1, "pp": 1, "dp": 1}
    assert sorted(ptc["tensors"]) == sorted([*mw.TENSORS, *("__dcp__/bytes/" + o for o in OBJECTS),
                                             "__dcp__/megatron/common.pt", "__dcp__/megatron/metadata.json",
                                             "__dcp__/planner_data"])
    for name, t in want.items():  # whole, at the global shape (the layer axis prepended), bit for bit
        full = np.load(os.path.join(step, "full", name + ".npy"))
        assert list(full.shape) == list(t.shape) and np.array_equal(npy_bits(full), bits(t)), name
    for f in ("common.pt", "metadata.json"):  # kept verbatim
        kept = np.load(os.path.join(step, "full", "__dcp__", "megatron", f + ".npy"))
        assert kept.dtype == np.uint8 and kept.tobytes() == (saved / f).read_bytes(), f

    # Stock dcp.load with torch's own FileSystemReader, from the step's DCP view and from the step itself.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    for where in (os.path.join(step, "dcp"), step):
        assert set(FileSystemReader(where).read_metadata().state_dict_metadata) == {*mw.TENSORS, *OBJECTS}, where
        sd = {name: torch.zeros(t.shape, dtype=t.dtype) for name, t in want.items()}
        sd.update({o: None for o in OBJECTS})
        dcp.load(sd, checkpoint_id=where, no_dist=True)
        assert [n for n, t in want.items() if not same(sd[n], t)] == [], where
        for r, o in enumerate(OBJECTS):  # Megatron saves a ShardedObject as the list of its objects
            (obj,) = sd[o]
            assert obj["random_seed"] == mw.rng_object(r)["random_seed"]
            assert same(obj["cuda_rng_state"], mw.rng_object(r)["cuda_rng_state"]), o

    out = tmp_path / "exported"
    e = cli(daemon, "export", "mcore/100", out, "--format", "dcp", "--json")
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["megatron"] is True
    for f in ("common.pt", "metadata.json"):
        assert (out / f).read_bytes() == (saved / f).read_bytes(), f
    for rec in megatron(tmp_path, "load", out):  # Megatron's own dist_checkpointing.load, 2 ranks
        assert rec["differ"] == [], rec


def test_dp_reshardable_optimizer_state_is_refused_naming_the_key(tmp_path, module_daemon):
    src = tmp_path / "dp"
    megatron(tmp_path, "dp_reshardable", src)
    r = import_dcp(module_daemon, src, "dp", "1")
    assert r.returncode == 1, r.stderr
    assert f"{src}: Megatron key '{mw.DP_BUCKET}.exp_avg' is DistributedOptimizer state in its per-DP-rank " \
           "bucket layout (sharding_type 'dp_reshardable'" in r.stderr, r.stderr
    assert "metadata={'distrib_optim_sharding_type': 'fully_reshardable'}" in r.stderr
    assert not os.path.exists(os.path.join(module_daemon.mnt, "dp", "1"))


def write(name, data):
    def change(d):
        (d / name).write_bytes(data)
    return change


def config(**members):
    base = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
            "common_backend_version": 1}
    return write("metadata.json", json.dumps({**base, **members}).encode())


def removed(name):
    return lambda d: os.remove(d / name)


def symlinked(d):
    os.rename(d / "common.pt", d.parent / "common.pt")
    os.symlink(d.parent / "common.pt", d / "common.pt")


@pytest.mark.parametrize("change, text", [
    (config(sharded_backend="zarr"), 'metadata.json: sharded_backend "zarr": ptcfs imports Megatron-Core checkpoints '
                                     'with sharded_backend "torch_dist"'),
    (config(sharded_backend_version=2), 'sharded_backend_version 2: ptcfs imports'),
    (config(common_backend="zarr"), 'common_backend "zarr": ptcfs imports'),
    (config(extra=1), 'metadata.json: unknown member "extra"'),
    (write("metadata.json", b'{"sharded_backend": "torch_di'), "metadata.json: not JSON"),
    (write("metadata.json", b'["torch_dist"]'), "metadata.json: not Megatron-Core's checkpoint config"),
    (write("metadata.json", b" " * (65 << 10) + b"{}"), "metadata.json: 66562 bytes (at most 65536 are read)"),
    (removed("metadata.json"), "with common.pt but no metadata.json (an unfinished dist_checkpointing.save"),
    (removed(".metadata"), "metadata.json says sharded_backend torch_dist, but there is no .metadata"),
    (write("common.pt", b"not a zip archive"), "common.pt: not a torch checkpoint"),
    (symlinked, "common.pt: not a regular file"),
])
def test_megatron_files_that_lie_are_refused_and_the_store_is_unchanged(tmp_path, module_daemon, saved, change,
                                                                        text):
    d = tmp_path / "src"
    shutil.copytree(saved, d)
    change(d)
    r = import_dcp(module_daemon, d, "lie", "1")
    assert r.returncode == 1 and text in r.stderr, r.stderr
    assert str(d) in r.stderr
    assert not os.path.exists(os.path.join(module_daemon.mnt, "lie", "1"))
