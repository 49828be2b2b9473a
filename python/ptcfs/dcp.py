"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint, "DCP") through ptcfs.

``StorageWriter(step)`` and ``StorageReader(step)`` are DCP storage objects over a step folder of the
mount (``MNT/<job>/<step>``): stock ``dcp.save``, ``dcp.async_save`` and ``dcp.load`` take them and run
unchanged, from any number of processes, with any placements on either side::

    import torch.distributed.checkpoint as dcp
    import ptcfs.dcp
    dcp.save(state_dict, storage_writer=ptcfs.dcp.StorageWriter(f"{MNT}/{job}/{step}"))
    dcp.load(state_dict, storage_reader=ptcfs.dcp.StorageReader(f"{MNT}/{job}/{step}"))

How a DCP save becomes a ptcfs step (docs/FORMATS.md, "Distributed Checkpoint"):

* every tensor of the flattened state dict (DCP's own names: ``model.layers.0.w``,
  ``optim.state.model.layers.0.w.exp_avg``, ...) is one PTC tensor of its global shape and dtype,
  stored whole at tp 1, with the dimension its chunks split it along recorded as its ``tp_dim``
  (``pad_to`` 1; ``split_dim``), so that ``ptcfs repartition`` and ``prepare`` can split it
  later: each rank writes each chunk it owns (a DTensor's local shard,
  a replicated tensor once, as DCP's planner deduplicates them) with ``pwrite`` into
  ``tp0-pp0/<name>.npy``, a box as runs of contiguous elements, straight into the daemon's blobs;
* every non-tensor entry (DCP's bytes items: a step counter, an RNG state, hyperparameters) is the
  U8 tensor ``__dcp__/bytes/<name>`` holding the ``torch.save`` bytes DCP makes of it, and DCP's
  ``planner_data`` (how flat names map back to nested keys) the U8 tensor ``__dcp__/planner_data``
  (JSON); the coordinator writes them once every rank has written its chunks;
* the coordinator writes ``ptc.json`` last: the step commits, as one version, when its bytes are
  all there, as every save into the mount does. Until then readers of other steps see nothing.

The reader serves the step's current layout: each tensor is one chunk, read from the mount's
``full/<name>.npy`` view (a mapping: a rank reads the pages of its own boxes only), so a load works
at any world size and placements, before and after ``ptcfs repartition``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Any, Dict, Optional

import numpy as np

from . import checkpoint as _ckpt
from . import dtypes as _dt
from . import ptc as _ptc
from .dcp_prepare import boxes_of, prepare
from .errors import Error, invalid

__all__ = ["StorageWriter", "StorageReader", "import_dir", "prepare", "boxes_of", "RESERVED", "BYTES_PREFIX",
           "PLANNER_DATA"]

RESERVED = "__dcp__/"  # ptcfs's own names in a DCP step (a DCP save's own names may not start so)
BYTES_PREFIX = RESERVED + "bytes/"
PLANNER_DATA = RESERVED + "planner_data"
_SHARD = (0, 0)  # every tensor whole on every shard: tp0-pp0 holds them all


def _dist():
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import metadata, planner, storage
    return dcp, metadata, planner, storage


def _dtype_name(dtype, where: str) -> str:
    import torch
    for name, attr in _dt._TORCH.items():
        if getattr(torch, attr, None) == dtype:
            return name
    raise invalid(f"{where}: dtype {dtype} has no safetensors type (ptcfs stores {' '.join(_dt.NUMPY)})")


def _npy_path(step: str, name: str) -> str:
    return os.path.join(step, f"tp{_SHARD[0]}-pp{_SHARD[1]}", name + ".npy")


def _done(value=None):
    """A completed torch.futures.Future (what DCP waits on)."""
    import torch
    f = torch.futures.Future()
    f.set_result(value)
    return f


def _jsonable_path(path) -> list:
    """planner_data's tuple of str and int keys, as a JSON list (ints stay ints)."""
    return [k if isinstance(k, (str, int)) else str(k) for k in path]


class StorageWriter:
    """A DCP storage writer into a ptcfs step folder (``MNT/<job>/<step>``, made if missing). Each
    rank writes the chunks DCP's planner gives it; the coordinator commits the step by writing
    ptc.json last. Errors are ptcfs.Error naming the tensor (a dtype ptcfs cannot store, a name the
    PTC refuses), raised on the coordinator's global plan, before any rank writes a byte. Ranks that
    write through several nodes' mounts write torch's own DCP files instead (as FileSystemWriter
    does), which the nodes convert together at the commit, each keeping the shards its ranks wrote."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self.is_coordinator = False
        self._setup = ((), {})
        self._stock = None  # torch's FileSystemWriter, when the ranks write through several mounts

    # -- torch.distributed.checkpoint.StorageWriter

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._stock = None

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        self.is_coordinator = is_coordinator
        self._setup = (args, kwargs)

    def _stock_writer(self):
        """torch's own FileSystemWriter on the same folder: a save whose ranks write through several
        nodes' mounts is written as stock DCP files, which the nodes convert together at the
        .metadata rename, each keeping the shards its ranks wrote (docs/FORMATS.md)."""
        if self._stock is None:
            from torch.distributed.checkpoint import FileSystemWriter
            w = FileSystemWriter(self.path)
            args, kwargs = self._setup
            w.set_up_storage_writer(self.is_coordinator, *args, **kwargs)
            self._stock = w
        return self._stock

    def storage_meta(self):
        return None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def prepare_local_plan(self, plan):
        import socket
        parent = os.path.dirname(os.path.abspath(self.path))
        for d in (parent, self.path):  # every rank at once: EEXIST is fine (the mount's mkdir contract)
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
        # Which mount this rank writes through: its host and the mount's device.
        return dataclasses.replace(plan, storage_data=(socket.gethostname(), os.stat(self.path).st_dev))

    def prepare_global_plan(self, plans):
        _, _, planner, _ = _dist()
        mounts = {p.storage_data for p in plans if isinstance(p.storage_data, tuple)}
        if len(mounts) > 1:
            # Each node keeps what its own ranks write, and no node would hold a whole tensor file:
            # the ranks write stock DCP files instead (each rank's own), converted at the rename.
            return self._stock_writer().prepare_global_plan(
                [dataclasses.replace(p, storage_data=None) for p in plans])
        for plan in plans:
            for item in plan.items:
                name = item.index.fqn
                _check_names([name], self.path)
                if item.type == planner.WriteItemType.BYTE_IO:
                    _ptc.check_tensor_name(BYTES_PREFIX + name, f"{self.path}: DCP entry '{name}'")
                else:
                    _dtype_name(item.tensor_data.properties.dtype, f"{self.path}: DCP tensor '{name}'")
        return plans

    def write_data(self, plan, planner):
        """Each tensor chunk into its tensor file at its place; each bytes item back to the
        coordinator in the write results (it writes them, with their sizes, in finish)."""
        _, _, planner_mod, storage = _dist()
        if not isinstance(plan.storage_data, tuple):  # the global plan chose stock files
            return self._stock_writer().write_data(plan, planner)
        results = []
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == planner_mod.WriteItemType.BYTE_IO:
                payload = data.getvalue()
                results.append(storage.WriteResult(index=item.index, size_in_bytes=len(payload),
                                                   storage_data=payload))
                continue
            td = item.tensor_data
            name = item.index.fqn
            where = f"{self.path}: DCP tensor '{name}'"
            dtype = _dtype_name(td.properties.dtype, where)
            t = data.detach()
            if list(t.shape) != list(td.chunk.sizes):
                raise invalid(f"{where}: a chunk of shape {list(t.shape)} where the plan says {list(td.chunk.sizes)}")
            n = write_chunk(self.path, name, dtype, td.size, td.chunk.offsets, t.cpu())
            results.append(storage.WriteResult(index=item.index, size_in_bytes=n, storage_data=None))
        return _done(results)

    def finish(self, metadata, results) -> None:
        """The coordinator: the bytes items and planner_data as U8 tensors, then ptc.json (the commit)."""
        if self._stock is not None:  # stock files: .metadata.tmp, renamed (the commit)
            self._stock.finish(metadata, results)
            return
        _, md, _, _ = _dist()
        payloads = {r.index.fqn: r.storage_data for rs in results for r in rs if r.storage_data is not None}
        tensors: Dict[str, tuple] = {}
        splits: Dict[str, Optional[int]] = {}
        for name, m in metadata.state_dict_metadata.items():
            if isinstance(m, md.TensorStorageMetadata):
                tensors[name] = (_dtype_name(m.properties.dtype, f"{self.path}: DCP tensor '{name}'"), list(m.size))
                splits[name] = split_dim(m.size, [(c.offsets, c.sizes) for c in m.chunks])
            elif name not in payloads:
                raise invalid(f"{self.path}: DCP entry '{name}': no rank wrote it")
        planner_data = {k: _jsonable_path(v) for k, v in (metadata.planner_data or {}).items()}
        commit(self.path, tensors, payloads, planner_data, splits=splits)


def plain_item(payload: bytes, where: str) -> io.BytesIO:
    """A bytes item's torch.save bytes, for DCP's planner, whose load_bytes unpickles them with
    torch.load(weights_only=False): they are first loaded with weights_only=True (plain data, tensors
    and containers; no code runs), and that object saved again, so that nothing a file carries other
    than plain data reaches the unrestricted loader. An item of any other object is refused."""
    import pickle

    import torch
    try:
        obj = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError) as e:
        first = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
        raise invalid(f"{where}: holds more than plain data, which ptcfs does not unpickle ({first})") from None
    out = io.BytesIO()
    torch.save(obj, out)
    out.seek(0)
    return out


def _check_names(names, where: str) -> None:
    for name in names:
        _ptc.check_tensor_name(name, f"{where}: DCP entry '{name}'")
        if name.startswith(RESERVED):
            raise invalid(f"{where}: DCP entry '{name}': names under __dcp__/ are ptcfs's own")


def split_dim(shape, chunks) -> Optional[int]:
    """The dimension a tensor's chunks ((offsets, sizes) pairs) split it along, as a stock save
    into the mount records it (docs/FORMATS.md "Layouts from chunks"): None when one chunk is the
    whole tensor (or there is none); else the dimension where the non-empty chunks start at the most
    places, the lowest on a tie."""
    shape = list(shape)
    boxes = [(list(o), list(z)) for o, z in chunks if all(int(x) > 0 for x in z)]
    if not shape or not boxes or any(o == [0] * len(shape) and z == shape for o, z in boxes):
        return None
    best, most = None, 1
    for d in range(len(shape)):
        starts = len({o[d] for o, _ in boxes})
        if starts > most:
            best, most = d, starts
    return best


def commit(step: str, tensors: Dict[str, tuple], payloads: Dict[str, bytes], planner_data: Optional[dict],
           files: Optional[Dict[str, bytes]] = None, splits: Optional[Dict[str, int]] = None) -> dict:
    """Writes what makes a step of a DCP save complete, once every tensor's bytes are written into
    STEP/tp0-pp0/<name>.npy: the bytes items, planner_data and `files` ({name under __dcp__/:
    bytes}, a Megatron-Core checkpoint's own files) as U8 tensors, then ptc.json (in the mount: the
    commit). `tensors` is {name: (safetensors dtype, global shape)}; `splits` {name: the dimension
    its chunks split it along} (split_dim), recorded as `tp_dim` with `pad_to` 1, so that a later
    layout (ptcfs.dcp.prepare) can split it; at tp 1 every tensor is still stored whole. Returns the
    PTC."""
    spec = {name: {"dtype": dt, "shape": list(shape), "stage": "first"} for name, (dt, shape) in tensors.items()}
    for name, d in (splits or {}).items():
        if d is not None and name in spec:
            spec[name].update({"tp_dim": d, "pad_to": 1})
    extra = {BYTES_PREFIX + k: v for k, v in payloads.items()}
    extra[PLANNER_DATA] = json.dumps(planner_data or {}, sort_keys=True).encode()
    extra.update(files or {})
    for name, payload in extra.items():
        spec[name] = {"dtype": "U8", "shape": [len(payload)], "stage": "first"}
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0, "tensors": spec}
    _ptc.check_layout(ptc, where=f"{step}: the PTC of a DCP checkpoint")
    for name, payload in sorted(extra.items()):
        _ckpt.write_npy_runs(_npy_path(step, name), "U8", [len(payload)],
                             [(0, np.frombuffer(payload, dtype=np.uint8))] if payload else [])
    _ckpt.save_ptc(step, ptc)
    _wait_committed(step)
    return ptc


def _wait_committed(step: str, timeout: float = 600.0) -> None:
    """Returns once the step reads as committed: the daemon commits a save just after its last file
    closes, and a pending step's files are EACCES to readers. So dcp.save returns, on every rank,
    only when a load of the step can start. (A plain folder reads at once.)"""
    import errno
    import time
    path = os.path.join(step, "ptc.json")
    deadline, pause = time.monotonic() + timeout, 0.01
    while True:
        try:
            with open(path, "rb") as f:
                f.read(1)
            return
        except OSError as e:
            if e.errno != errno.EACCES:
                raise
        if time.monotonic() > deadline:
            raise Error("deadline_exceeded", f"{step}: written in full but not committed after {timeout:g} s "
                                             "(`ptcfs ls` says why)")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def write_chunk(step: str, name: str, dtype: str, shape, offsets, values) -> int:
    """Writes one chunk (a box of the global tensor at `offsets`) into STEP/tp0-pp0/<name>.npy as
    runs of contiguous elements; returns its bytes."""
    arr = _dt.as_storage(values, dtype, f"{step}: tensor '{name}'")[0].reshape(-1)
    runs = []
    if arr.size:
        run, _, starts = _ckpt.box_runs(list(shape), list(offsets), list(np.shape(values)))
        runs = [(s, arr[i * run:(i + 1) * run]) for i, s in enumerate(starts)]
    _ckpt.write_npy_runs(_npy_path(step, name), dtype, list(shape), runs)
    return arr.nbytes


def import_dir(src: str, step: str, progress=None, remove=None) -> dict:
    """A DCP directory written elsewhere (stock dcp.save to a plain folder) as the step folder `step`
    of the mount (made here; an existing step is refused by the mount): every tensor's chunks,
    loaded code-free and checked (ptcfs.dcp_files), written into its tensor file, then the bytes
    items (each checked to be plain data, plain_item) and ptc.json. Nothing is written before the
    whole .metadata and every bytes item are checked. When a chunk is refused after the step folder
    was made, `remove()` (when given) is called to remove the pending step; FileExistsError when the
    step exists already (nothing is written into it).

    A Megatron-Core torch_dist directory (metadata.json, common.pt beside the DCP files;
    ptcfs.dcp_megatron) keeps those two files as U8 tensors under __dcp__/megatron/, checked first;
    DistributedOptimizer state in its DP-bucket layout is refused. A directory of safetensors items
    (torch's HuggingFaceStorageWriter, with or without .metadata; ptcfs.dcp_safetensors) is read the
    same way, each chunk from its file's byte range."""
    from . import dcp_files, dcp_megatron
    files = dcp_megatron.read_files(src)
    ck = dcp_files.read(src)
    if files:
        dcp_megatron.check_keys(src, [*ck.tensors, *ck.items])
    _check_names(ck.tensors, src)
    _check_names(ck.items, src)
    for name in ck.items:
        _ptc.check_tensor_name(BYTES_PREFIX + name, f"{src}: DCP entry '{name}'")
    payloads = {}
    for name in sorted(ck.items):
        payloads[name] = ck.read_item(name)
        plain_item(payloads[name], f"{src}: DCP entry '{name}'")  # refused here, not at a later load
    os.mkdir(step)
    try:
        return _import_into(ck, payloads, files, step, progress)
    except BaseException:
        if remove is not None:  # the pending step this import made goes: the store is as it was
            remove()
        raise


def _import_into(ck, payloads: Dict[str, bytes], files: Dict[str, bytes], step: str, progress) -> dict:
    total = 0
    for i, (name, t) in enumerate(sorted(ck.tensors.items())):
        nonempty = [c for c in t.chunks if all(c.sizes)]  # (a 0-d tensor's one chunk has sizes ())
        for c in nonempty:
            total += write_chunk(step, name, t.dtype, t.shape, c.offsets, ck.load_chunk(t, c))
        if not nonempty:  # a tensor of no elements: its header alone
            _ckpt.write_npy_runs(_npy_path(step, name), t.dtype, t.shape, [])
        if progress:
            progress(f"{i + 1}/{len(ck.tensors)} tensors, {total} bytes")
    splits = {n: split_dim(t.shape, [(c.offsets, c.sizes) for c in t.chunks]) for n, t in ck.tensors.items()}
    ptc = commit(step, {n: (t.dtype, t.shape) for n, t in ck.tensors.items()}, payloads, ck.planner_data, files,
                 splits=splits)
    return {"tensors": len(ck.tensors), "items": len(ck.items), "bytes": total,
            "parallelism": ptc["parallelism"], "megatron": bool(files)}


class StorageReader:
    """A DCP storage reader of a committed ptcfs step (``MNT/<job>/<step>``, whatever wrote it: a
    DCP save through StorageWriter, or any step whose tensors have safetensors dtypes). Tensors come
    from the mount's full/<name>.npy views, mapped; only the boxes a rank asks for are read.

    With ``prepare=True`` the coordinator's global plan first lays the step out for the boxes every
    rank's load plan asks for, as ``ptcfs.dcp.prepare`` does (docs/FORMATS.md "Layouts from chunks"):
    on a cluster each rank's tensors then lie on its node. Off by default: it changes the step's
    layout for every reader of it (``daemon``, ``secret_file``: as ptcfs.Client's)."""

    def __init__(self, path: str, prepare: bool = False, daemon: Optional[str] = None,
                 secret_file: Optional[str] = None):
        self.path = os.fspath(path)
        self.prepare, self.daemon, self.secret_file = prepare, daemon, secret_file
        self.prepared: Optional[dict] = None  # the repartition's result, on the coordinator
        self._ptc: Optional[dict] = None
        self._arrays: Dict[str, np.ndarray] = {}

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._ptc, self._arrays = None, {}

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def _full(self, name: str) -> np.ndarray:
        a = self._arrays.get(name)
        if a is None:
            a = self._arrays[name] = _ckpt.load_full(self.path, name, self._ptc)
        return a

    def read_metadata(self, *args, **kwargs):
        import torch
        _, md, _, _ = _dist()
        if not os.path.isfile(os.path.join(self.path, "ptc.json")):
            raise Error("not_found", f"{self.path}: no committed step here (no ptc.json)")
        self._ptc = _ckpt.load_ptc(self.path)
        sd_md: Dict[str, Any] = {}
        for name, spec in self._ptc["tensors"].items():
            if name.startswith(BYTES_PREFIX):
                sd_md[name[len(BYTES_PREFIX):]] = md.BytesStorageMetadata()
                continue
            if name.startswith(RESERVED):  # planner_data, a Megatron checkpoint's files: not DCP entries
                continue
            shape = torch.Size(spec["shape"])
            props = md.TensorProperties(dtype=_dt.torch_dtype(spec["dtype"]))
            chunk = md.ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=shape)
            sd_md[name] = md.TensorStorageMetadata(properties=props, size=shape, chunks=[chunk])
        planner_data = None
        if PLANNER_DATA in self._ptc["tensors"]:
            raw = json.loads(bytes(np.asarray(self._full(PLANNER_DATA))).decode())
            planner_data = {k: tuple(v) for k, v in raw.items()}
        return md.Metadata(state_dict_metadata=sd_md, planner_data=planner_data, storage_data={})

    def set_up_storage_reader(self, metadata, is_coordinator: bool, *args, **kwargs) -> None:
        if self._ptc is None:
            self._ptc = _ckpt.load_ptc(self.path)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        if not self.prepare:
            return plans
        from .dcp_prepare import job_step_of, merge_boxes, request_layout
        _, _, planner_mod, _ = _dist()

        def boxes():  # each rank's destination boxes, as its state dict's chunks
            for plan in plans:
                for item in plan.items:
                    if item.type == planner_mod.LoadItemType.BYTE_IO:
                        continue
                    lo = [int(a) + int(b) for a, b in zip(item.dest_index.offset, item.dest_offsets)]
                    yield item.storage_index.fqn, lo, [a + int(n) for a, n in zip(lo, item.lengths)]
        job, step = job_step_of(self.path)
        try:
            self.prepared = request_layout(self.daemon, self.secret_file, job, step, merge_boxes(boxes()))
        except Error as e:  # the load is right at any layout: it goes on, only its reads are not laid out
            import warnings
            self.prepared = {"error": str(e)}
            warnings.warn(f"ptcfs.dcp.StorageReader: the step was not laid out for this load ({e})")
        return plans

    def read_data(self, plan, planner):
        _, _, planner_mod, _ = _dist()
        for item in plan.items:
            name = item.storage_index.fqn
            if item.type == planner_mod.LoadItemType.BYTE_IO:
                planner.load_bytes(item, plain_item(bytes(np.asarray(self._full(BYTES_PREFIX + name))),
                                                    f"{self.path}: DCP entry '{name}'"))
                continue
            spec = self._ptc["tensors"][name]
            box = tuple(slice(o, o + n) for o, n in zip(item.storage_offsets, item.lengths))
            full = self._full(name)
            src = _dt.to_torch(full[box] if box else full, spec["dtype"])  # (a 0-d array stays an array)
            target = planner.resolve_tensor(item).detach()
            if target.shape != src.shape:
                raise invalid(f"{self.path}: tensor '{name}': DCP asks a box of {list(src.shape)} "
                              f"into a tensor of {list(target.shape)}")
            target.copy_(src)
            planner.commit_tensor(item, target)
        return _done()


class _RawItem:
    """A bytes item kept as the torch.save bytes it was saved as (exported verbatim, not re-pickled)."""

    def __init__(self, payload: bytes):
        self.payload = payload


def export_dir(step: str, out: str) -> dict:
    """Writes the committed step `step` as a DCP directory `out` with torch's own FileSystemWriter,
    in one process: each tensor whole (mapped from the mount's full/ view), each bytes item verbatim.
    Stock dcp.load reads it from any filesystem, at any world size. A step imported from a
    Megatron-Core torch_dist directory gets its common.pt and metadata.json back (written after
    the DCP files, metadata.json last), so Megatron's dist_checkpointing.load reads it too."""
    import torch
    from . import dcp_megatron
    dcp, _, _, _ = _dist()
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    class _Planner(DefaultSavePlanner):
        def create_global_plan(self, all_plans):  # the flat names' nested keys, as the source saved them
            plans, metadata = super().create_global_plan(all_plans)
            if planner_data:
                metadata = dataclasses.replace(metadata, planner_data=planner_data)
            return plans, metadata

        def transform_object(self, write_item, object):
            if isinstance(object, _RawItem):
                return io.BytesIO(object.payload)
            return super().transform_object(write_item, object)

    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise Error("already_exists", f"{out}: exists and is not an empty directory")
    reader = StorageReader(step)
    md = reader.read_metadata()
    planner_data = md.planner_data
    sd: Dict[str, Any] = {}
    for name, m in md.state_dict_metadata.items():
        if hasattr(m, "chunks"):  # a TensorStorageMetadata
            spec = reader._ptc["tensors"][name]
            sd[name] = _dt.to_torch(reader._full(name), spec["dtype"])
        else:
            sd[name] = _RawItem(bytes(np.asarray(reader._full(BYTES_PREFIX + name))))
    os.makedirs(out, exist_ok=True)
    # flatten_state_dict=False: the names are DCP's flat names already; planner_data carries their keys.
    dcp.save(sd, checkpoint_id=out, planner=_Planner(flatten_state_dict=False), no_dist=True)
    files = {name: bytes(np.asarray(reader._full(name))) for name in dcp_megatron.FILES.values()
             if name in reader._ptc["tensors"]}
    dcp_megatron.write_files(files, out)
    tensors = sum(1 for v in sd.values() if isinstance(v, torch.Tensor))
    return {"tensors": tensors, "items": len(sd) - tensors, "megatron": bool(files)}
