"""One rank of a DCP test run (test_dcp.py): joins a gloo group of `world` processes, builds the
state dict of a mesh (plain tensors, DTensors sharded and replicated on 1-D and 2-D meshes, with
uneven last chunks, a nested optimizer state and non-tensor entries) from values that depend only
on the names (`expected()`), and saves it with stock dcp.save/async_save through
ptcfs.dcp.StorageWriter, or loads it with stock dcp.load through ptcfs.dcp.StorageReader into
another mesh and placements, recording the names whose loaded values differ from expected(),
bit for bit."""

import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import ptcfs
import ptcfs.dcp

# name: (global shape, dtype)
TENSORS = {
    "model.embed.weight": ((10, 6), torch.float32),      # dim 0 over 3 or 4 ranks: uneven last chunks
    "model.layers.0.attn.wqkv": ((8, 6), torch.bfloat16),
    "model.layers.0.mlp.w1": ((6, 9), torch.float16),
    "model.norm.weight": ((6,), torch.float32),
    "model.pos": ((5, 3), torch.int64),
    "model.mask": ((4,), torch.bool),
    "model.fp8": ((4, 4), torch.float8_e4m3fn),
    "model.u32": ((3,), torch.uint32),
    "optim.state.model.embed.weight.exp_avg": ((10, 6), torch.float32),
    "optim.state.model.embed.weight.step": ((), torch.float32),
}
OBJECTS = {"step": 7, "optim.param_groups.0.lr": 3e-4, "optim.param_groups.0.betas": (0.9, 0.95),
           "optim.param_groups.0.params": ["model.embed.weight"]}


def expected():
    """{name: global tensor}: values from a generator seeded by the name alone."""
    out = {}
    for i, (name, (shape, dtype)) in enumerate(sorted(TENSORS.items())):
        g = torch.Generator().manual_seed(1000 + i)
        if dtype.is_floating_point:
            out[name] = (torch.randn(shape, generator=g) * 4).to(dtype)
        elif dtype == torch.bool:
            out[name] = torch.randint(0, 2, shape, generator=g).bool()
        else:
            out[name] = torch.randint(0, 2**31 - 1, shape, generator=g, dtype=torch.int64).to(dtype)
    return out


def objects():
    """The non-tensor entries, and an RNG state (a uint8 tensor, so DCP stores it as a tensor)."""
    return {**OBJECTS, "rng": torch.Generator().manual_seed(5).get_state()}


def placements_of(name, layout, mesh):
    """The DTensor placements of `name` in `layout` (None: a plain tensor)."""
    if layout == "plain" or TENSORS[name][0] == ():
        return None
    ndim = len(TENSORS[name][0])
    if layout == "mesh2x2":  # 4 ranks: (dp_shard, tp)
        if name.endswith("wqkv"):
            return (Shard(0), Shard(1))
        if name.endswith("w1"):
            return (Replicate(), Shard(1))
        if name == "model.norm.weight":
            return (Replicate(), Replicate())
        return (Shard(0), Replicate())
    if layout == "shard1":  # 1-D mesh: the last dimension split where it can be
        return (Shard(ndim - 1),)
    if layout == "shard0":
        return (Shard(0),)
    raise ValueError(layout)


def nest(flat):
    """The nested state dict DCP flattens back to `flat`'s names (model.* and optim.* as dicts)."""
    out = {"model": {}, "optim": {"state": {"model.embed.weight": {}}, "param_groups": [{}]}}
    for name, v in flat.items():
        if name.startswith("model."):
            out["model"][name[len("model."):]] = v
        elif name.startswith("optim.state.model.embed.weight."):
            out["optim"]["state"]["model.embed.weight"][name.rsplit(".", 1)[1]] = v
        elif name.startswith("optim.param_groups.0."):
            out["optim"]["param_groups"][0][name.rsplit(".", 1)[1]] = v
        else:
            out[name] = v
    return out


def state(layout, mesh, fill):
    """The state dict of this rank: expected() values (or zeros, to load into), placed per layout."""
    sd = {}
    for name, t in expected().items():
        t = t if fill else torch.zeros_like(t)
        p = placements_of(name, layout, mesh)
        # src_data_rank=None: each rank cuts its own shard of the same values (gloo cannot scatter every dtype)
        sd[name] = t if p is None else distribute_tensor(t, mesh, list(p), src_data_rank=None)
    objs = objects() if fill else {**{k: None for k in OBJECTS}, "rng": torch.zeros_like(objects()["rng"])}
    return nest({**sd, **objs})


def mesh_of(layout, world):
    if layout == "mesh2x2":
        return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
    return init_device_mesh("cpu", (world,))


def differ(sd):
    """Names whose loaded value is not expected()'s, bit for bit (dtype, shape and bytes)."""
    want = expected()
    flat = {}
    for k, v in sd["model"].items():
        flat["model." + k] = v
    for k, v in sd["optim"]["state"]["model.embed.weight"].items():
        flat["optim.state.model.embed.weight." + k] = v
    bad = []
    for name, w in want.items():
        got = flat[name]
        if isinstance(got, DTensor):  # this rank's shard against the shard it must hold (no collective:
            w = distribute_tensor(w, got.device_mesh, got.placements, src_data_rank=None).to_local()
            got = got.to_local()      # gloo cannot gather every dtype)
        if got.dtype != w.dtype or got.shape != w.shape or not torch.equal(
                got.contiguous().reshape(-1).view(torch.uint8), w.contiguous().reshape(-1).view(torch.uint8)):
            bad.append(name)
    objs = {"step": sd["step"], "rng": sd["rng"],
            **{f"optim.param_groups.0.{k}": v for k, v in sd["optim"]["param_groups"][0].items()}}
    for k, v in objects().items():
        if (not torch.equal(objs[k], v)) if isinstance(v, torch.Tensor) else objs[k] != v:
            bad.append(k)
    return bad


def leave():
    """The record is written: leave without the interpreter's teardown, in which a C++ thread that
    async_save or gloo left joinable can abort the process under load ("terminate called without an
    active exception": seen once in a full run, after a complete record)."""
    os._exit(0)


def run(rank, world, init_file, mode, step, layout, out_dir):
    """`step` may hold "{rank}": each rank's own path (its node's mount, on a cluster)."""
    step = step.replace("{rank}", str(rank))
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    mesh = mesh_of(layout, world)
    if mode in ("save", "async_save"):
        sd = state(layout, mesh, fill=True)
        writer = ptcfs.dcp.StorageWriter(step)
        if mode == "save":
            dcp.save(sd, storage_writer=writer)
        else:
            dcp.async_save(sd, storage_writer=writer).result()
        record = {"rank": rank}
    elif mode == "stock_save":  # torch's own FileSystemWriter (a plain folder, or the mount)
        dcp.save(state(layout, mesh, fill=True), checkpoint_id=step)
        record = {"rank": rank}
    elif mode == "stock_async_save":
        dcp.async_save(state(layout, mesh, fill=True), checkpoint_id=step).result()
        record = {"rank": rank}
    else:
        sd = state(layout, mesh, fill=False)
        record = {"rank": rank}
        if mode == "prepare_load":  # ptcfs.dcp.prepare for this mesh, then torch's own reader
            record["prepare"] = ptcfs.dcp.prepare(sd, step)
            record["boxes"] = ptcfs.dcp.boxes_of(sd)
        if mode in ("stock_load", "prepare_load"):  # torch's own FileSystemReader (a plain folder, or the mount)
            dcp.load(sd, checkpoint_id=step)
        else:  # "load", or "prepared_load": the reader lays the step out for the load plan first
            reader = ptcfs.dcp.StorageReader(step, prepare=mode == "prepared_load")
            dcp.load(sd, storage_reader=reader)
            if reader.prepared is not None:
                record["prepare"] = reader.prepared
        record["differ"] = differ(sd)
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()
    leave()


# A state of larger tensors, every one Shard(0) on a 1-D mesh (FSDP's layout) but a replicated
# norm and a scalar, with no objects (test_dcp_prepare.py).
# DCP_WORKER_ROWS scales the rows of w and emb (a test that weighs bytes moved against the shards').
_ROWS = int(os.environ.get("DCP_WORKER_ROWS", "1"))
PLAIN = {"w": ((64 * _ROWS, 48), torch.float32), "b": ((37,), torch.float32),
         "emb": ((50 * _ROWS, 16), torch.bfloat16), "norm": ((48,), torch.float32), "count": ((), torch.int64)}


def plain_expected():
    out = {}
    for i, (name, (shape, dtype)) in enumerate(sorted(PLAIN.items())):
        g = torch.Generator().manual_seed(2000 + i)
        out[name] = (torch.randn(shape, generator=g) * 4).to(dtype) if dtype.is_floating_point else \
            torch.randint(0, 2**31 - 1, shape, generator=g, dtype=torch.int64)
    return out


def plain_state(mesh, fill):
    sd = {}
    for name, t in plain_expected().items():
        t = t if fill else torch.zeros_like(t)
        if t.dim() == 0:
            sd[name] = t
        else:
            p = Replicate() if name == "norm" else Shard(0)
            sd[name] = distribute_tensor(t, mesh, [p], src_data_rank=None)
    return sd


class _Counted:
    """A stream that counts the bytes read through it into counts[name]."""

    def __init__(self, stream, counts, name):
        self._s, self._counts, self._name = stream, counts, name

    def _add(self, n):
        self._counts[self._name] = self._counts.get(self._name, 0) + n

    def read(self, *a):
        b = self._s.read(*a)
        self._add(len(b))
        return b

    def readinto(self, b):
        n = self._s.readinto(b)
        self._add(n or 0)
        return n

    def readline(self, *a):
        b = self._s.readline(*a)
        self._add(len(b))
        return b

    def __getattr__(self, name):
        return getattr(self._s, name)


def count_reads():
    """{file name: bytes} that torch's own FileSystemReader reads from each file, from now on (its
    streams wrapped; the reader itself runs unchanged)."""
    import contextlib
    from torch.distributed.checkpoint import filesystem
    counts = {}
    opened = filesystem.FileSystem.create_stream

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with opened(self, path, mode) as s:
            yield _Counted(s, counts, os.path.basename(str(path))) if "r" in mode else s
    filesystem.FileSystem.create_stream = create_stream
    return counts


def run_plain(rank, world, init_file, mode, step, out_dir):
    """`step` may hold "{rank}": each rank's own path (its node's mount, on a cluster)."""
    step = step.replace("{rank}", str(rank))
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    record = {"rank": rank}
    if mode == "stock_save":
        dcp.save(plain_state(mesh, fill=True), checkpoint_id=step)
    elif mode == "stock_async_save":
        dcp.async_save(plain_state(mesh, fill=True), checkpoint_id=step).result()
    elif mode == "writer_save":  # through ptcfs.dcp.StorageWriter; a refusal is recorded
        try:
            dcp.save(plain_state(mesh, fill=True), storage_writer=ptcfs.dcp.StorageWriter(step))
        except BaseException as e:  # noqa: BLE001 (DCP raises CheckpointException, a BaseException, with the Error)
            record["error"] = str(e)
    else:
        sd = plain_state(mesh, fill=False)
        record["boxes"] = ptcfs.dcp.boxes_of(sd)
        if mode == "prepare_load":
            try:
                record["prepare"] = ptcfs.dcp.prepare(sd, step)
            except ptcfs.Error as e:
                record["error"] = str(e)
        counts = count_reads()
        if "error" not in record:
            dcp.load(sd, checkpoint_id=step)
        record["read"] = counts
        want = plain_expected()
        record["differ"] = [] if "error" in record else [n for n, v in sd.items() if not torch.equal(
            v.to_local() if isinstance(v, DTensor) else v,
            distribute_tensor(want[n], mesh, v.placements, src_data_rank=None).to_local()
            if isinstance(v, DTensor) else want[n])]
    with open(os.path.join(out_dir, f"r{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()
    leave()
