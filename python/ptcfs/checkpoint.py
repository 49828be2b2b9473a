"""Saving and loading a rank's tensors as a ptcfs checkpoint directory.

The same functions work on a plain directory (then `ptcfs import` it) and on the mount's
step folder ``MNT/<job>/<step>/``. Saving into the mount follows its write contract: each
file is written at its final name (the mount has no rename), front to back, by one writer;
only DP rank 0 of each (t, p) writes a shard, and the step commits when every shard of the
layout is complete and closed.
"""

from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import direct as _direct
from . import ptc as _ptc
from .formats import safetensors as _st
from .dtypes import as_storage, numpy_dtype
from .errors import Error, from_os_error, invalid


def shard_file(t: int, p: int) -> str:
    return f"tp{t}-pp{p}.safetensors"


def step_dir(root: str, job: str, step: Any, create: bool = False) -> str:
    """ROOT/<job>/<step>. With create, makes the folders; an existing one is fine (several
    ranks create it at once; in the mount mkdir of an existing job or step is EEXIST)."""
    _ptc.check_id("job", job)
    _ptc.check_id("step", str(step))
    path = os.path.join(root, job, str(step))
    if create:
        for d in (os.path.join(root, job), path):
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
    return path


def save_ptc(dir: str, ptc: Mapping) -> str:
    """Writes DIR/ptc.json (the normalized form the mount shows); returns its path. Every rank of a
    job may call it at once with the same PTC; in the mount, one that writes a different PTC gets
    ptcfs.Error (invalid_argument) and the step keeps the first."""
    _ptc.check_layout(ptc)
    path = os.path.join(dir, "ptc.json")
    text = _ptc.dumps(ptc)
    try:  # in the mount, every rank may write the same ptc.json at once; a different one fails its close
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise from_os_error(e, path) from None
    return path


def save_shard(dir: str, ptc: Mapping, t: int, p: int, tensors: Mapping[str, Any]) -> str:
    """Writes DIR/tp{t}-pp{p}.safetensors from {global name: local slice} (numpy arrays or
    torch tensors; BF16 as torch.bfloat16 or uint16 bits). The tensors must be exactly those
    the PTC places on shard (t, p), each with its slice shape and the PTC's dtype: anything
    else is an error naming the tensor, raised before a byte is written. Returns the path."""
    want = _ptc.shard_tensors(ptc, t, p)
    path = os.path.join(dir, shard_file(t, p))
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise invalid(f"{path}: shard tp{t}-pp{p} of {_ptc.parallelism(ptc)} "
                      + (f"lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}" if missing else "")
                      + ("; " if missing and extra else "")
                      + (f"has tensors the PTC does not place there: {', '.join(extra[:5])}" if extra else ""))
    for name, (dtype, shape) in want.items():
        got = list(np.shape(tensors[name]))
        if got != list(shape):
            raise invalid(f"{path}: tensor '{name}': slice shape {got}, the PTC gives {list(shape)}")
    _st.save(path, tensors, {name: dtype for name, (dtype, _) in want.items()})
    return path


def save_tensor_range(dir: str, ptc: Mapping, t: int, p: int, name: str, start: int, values: Any) -> str:
    """Writes elements [start, start + values.size) of tensor `name`'s slice on shard (t, p),
    counted flat in C order, into DIR/tp{t}-pp{p}/<name>.npy: what one DP rank of a ZeRO-style
    distributed optimizer holds. Every writer of the tensor calls it for its own range, at the
    same time or one after another; each also writes the npy header (the same bytes), so no
    writer waits for another. The file is complete when the ranges cover the slice. Returns
    the path."""
    want = _ptc.shard_tensors(ptc, t, p)
    path = os.path.join(dir, f"tp{t}-pp{p}", name + ".npy")
    if name not in want:
        raise invalid(f"{path}: the PTC does not place tensor '{name}' on shard tp{t}-pp{p}")
    dtype, shape = want[name]
    arr = np.ascontiguousarray(as_storage(values, dtype, f"{path}: tensor '{name}'")[0]).reshape(-1)
    total = int(np.prod(shape, dtype=np.int64))
    if start < 0 or start + arr.size > total:
        raise invalid(f"{path}: elements [{start}, {start + arr.size}) lie outside the slice of {total} elements")
    write_npy_runs(path, dtype, shape, [(start, arr)])
    return path


def box_runs(shape: Sequence[int], offsets: Sequence[int], sizes: Sequence[int]) -> Tuple[int, int, List[int]]:
    """The box [offsets, offsets + sizes) of a C-order array of `shape` as runs of contiguous
    elements: (run length, number of runs, flat start of each run). A box that spans every
    dimension after its first partial one is one run."""
    n = len(shape)
    k = n - 1
    while k >= 0 and sizes[k] == shape[k] and offsets[k] == 0:
        k -= 1
    if k < 0:
        return int(np.prod(shape, dtype=np.int64)), 1, [0]
    inner = int(np.prod(shape[k + 1:], dtype=np.int64))
    run = int(sizes[k]) * inner
    strides = [int(np.prod(shape[j + 1:], dtype=np.int64)) for j in range(k)]
    starts = np.full(1, int(offsets[k]) * inner, dtype=np.int64)
    for j in range(k):  # every index of the dimensions before k, in C order
        starts = (starts[:, None] + (offsets[j] + np.arange(sizes[j], dtype=np.int64))[None, :] * strides[j]).reshape(-1)
    return run, len(starts), starts.tolist()


def write_npy_runs(path: str, dtype: str, shape: Sequence[int], runs) -> None:
    """Writes `runs` ([(flat start, 1-d array of the file's dtype)]) into the .npy file `path` of
    `shape` (created if missing), each with pwrite at its place, and the npy header (the same bytes
    from every writer, so that no writer waits for another: the mount's contract for several
    writers of one tensor file, docs/FORMATS.md)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.lib.format.dtype_to_descr(numpy_dtype(dtype)), "fortran_order": False,
                 "shape": tuple(shape)})
    head = header.getvalue()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, head, 0)
        for start, arr in runs:
            view = memoryview(arr.view(np.uint8))
            off = len(head) + start * arr.itemsize
            while view:
                n = os.pwrite(fd, view[:64 << 20], off)
                view, off = view[n:], off + n
    finally:
        os.close(fd)


def load_ptc(dir: str) -> dict:
    """DIR/ptc.json, validated."""
    return _ptc.load(os.path.join(dir, "ptc.json"))


def load_shard(dir: str, t: int, p: int, ptc: Optional[Mapping] = None, device=None) -> Dict[str, Any]:
    """{name: array} of DIR/tp{t}-pp{p}.safetensors, read-only (BF16 as uint16 bits). In a
    ptcfs mount with a direct socket, read through it (ptcfs.direct: the daemon's blobs mapped,
    zero-copy where a tensor lies in one piece, gathered where a repartition left it strided);
    elsewhere, views of a read-only mapping of the file. With `device` ("cpu", "cuda:N"), torch
    tensors on that device instead (into GPU memory through ptcfs.direct's GPU path where it
    can: ``File.torch``). With `ptc`, checks that the file holds exactly that shard."""
    path = os.path.join(dir, shard_file(t, p))
    if not os.path.exists(path):
        raise Error("not_found", f"{path}: no such shard")
    f = _direct.open(path)
    tensors = f.tensors() if device is None else f.torch(device)
    if ptc is not None:
        want = _ptc.shard_tensors(ptc, t, p)
        if set(want) != set(tensors):
            raise invalid(f"{path}: holds {len(tensors)} tensors, the PTC places {len(want)} on it "
                          f"(e.g. {sorted(set(want) ^ set(tensors))[:3]})")
        for name, (dtype, shape) in want.items():
            got = (f.dtype_of(name), list(tensors[name].shape))
            if got != (dtype, list(shape)):
                raise invalid(f"{path}: tensor '{name}' is {got[0]} {got[1]}, the PTC gives {dtype} {list(shape)}")
    return tensors


def load_full(dir: str, name: str, ptc: Optional[Mapping] = None) -> np.ndarray:
    """The whole logical tensor `name` (no padding). In the mount that is the view
    DIR/full/<name>.npy (mapped, zero-copy); in a plain directory, where there is no such
    view, it is gathered from the shards ptc.json (or `ptc`) lays out."""
    view = os.path.join(dir, "full", name + ".npy")
    if os.path.exists(view):
        try:
            return np.load(view, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return np.load(view, allow_pickle=False)
    ptc = ptc if ptc is not None else load_ptc(dir)
    if name not in ptc["tensors"]:
        raise Error("not_found", f"{dir}: no tensor '{name}' in ptc.json")
    spec = ptc["tensors"][name]
    tp, pp, _ = _ptc.parallelism(ptc)
    p = _ptc.stages_of(spec, ptc.get("num_layers", 0), pp)[0]
    ranks = tp if "tp_dim" in spec else 1
    slices = [_st.SafetensorsFile(os.path.join(dir, shard_file(t, p)))[name] for t in range(ranks)]
    return _ptc.gather(slices, spec, ranks if "tp_dim" in spec else 1)
