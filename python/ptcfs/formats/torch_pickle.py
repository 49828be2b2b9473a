"""Loading torch checkpoint files without running code from them, in memory bounded by the file.

A Megatron-LM checkpoint is a torch pickle that holds more than tensors (the run's
``argparse.Namespace``, numpy RNG states, enums of Megatron's own modules), so torch's
``weights_only=True`` refuses it, and ``weights_only=False`` lets the file call anything. This
loader is between the two: tensors, containers, numpy arrays and ``Namespace`` are rebuilt for
real; any other class named in the file becomes an inert :class:`Opaque` placeholder that
records its name and arguments, and no function outside the allowlist is ever called.

Nothing in the file is trusted for sizes either (docs/FORMATS.md, "Megatron-LM checkpoints"):

* the archive is read by :mod:`ptcfs.torch_zip` (no compressed members, no member larger than
  the file), and a storage's member must hold exactly the bytes its record claims;
* a tensor is a view of its storage checked before a byte is used: ``offset + extent(size,
  stride)`` elements of the storage's dtype must lie inside it (torch's own loader trusts the
  claim, reads past a short member and returns whatever memory follows);
* the pickle is run by Python's own unpickler (the C one grows its memo to any index a 9-byte
  file names: 2 GB), and what its objects take is capped at :data:`MAX_OBJECT_BYTES`: each
  allowed constructor that allocates by an argument (``bytearray(n)``, numpy arrays and
  scalars) is charged before it runs, and the process's resident memory is sampled as the
  pickle runs.

A tensor that fails its check is refused naming the file and the tensor's path in the object.
"""

from __future__ import annotations

import _compat_pickle
import argparse
import collections
import importlib
import io
import math
import os
import pickle
import struct
from typing import Any, Dict, List, Optional, Tuple

from ..errors import invalid
from .torch_zip import MAX_PICKLE_BYTES, TorchZip

MAX_OBJECT_BYTES = 256 << 20  # what the pickle's objects other than storages may take
_SAMPLE_EVERY = 4096           # opcodes between two samples of resident memory (each < 1 KB)

# torch's rebuild functions, under their pickled names; the loader's own versions run instead.
_REBUILD_NAMES = ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
                  "_rebuild_parameter_with_state")


class Opaque:
    """A stand-in for a class or function the loader does not call: keeps the name, the
    arguments it was called with and the state it was given, and does nothing else."""

    __ptcfs_name__ = "?"

    def __new__(cls, *args: Any, **kwargs: Any):
        obj = object.__new__(cls)
        object.__setattr__(obj, "args", args)
        object.__setattr__(obj, "state", None)
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        object.__setattr__(self, "state", state)

    def __repr__(self) -> str:
        return f"<opaque {self.__ptcfs_name__}(...)>"


def refused(x: Any) -> bool:
    """Whether `x` is a placeholder: a global the loader did not resolve, or its call."""
    return isinstance(x, Opaque) or (isinstance(x, type) and issubclass(x, Opaque))


def describe(x: Any) -> str:
    """How an error names a loaded value: a placeholder says what the file tried to call."""
    if isinstance(x, Opaque):
        return f"{type(x).__ptcfs_name__}(...), a call the loader refused (not on its allowlist)"
    if refused(x):
        return f"{x.__ptcfs_name__}, a global the loader refused (not on its allowlist)"
    kind = type(x)
    return f"a {kind.__name__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


class _Type:
    """A class the file may name (as a tensor's, array's or storage record's type) but not call:
    its constructor allocates whatever size the file passes."""

    def __init__(self, name: str, real: type, storage_dtype: Any = None):
        self.name, self.real, self.storage_dtype = name, real, storage_dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise pickle.UnpicklingError(f"calling {self.name} is refused (it allocates what the file asks)")


class BadTensor:
    """A tensor the file describes wrongly; load() refuses it naming where it sits."""

    def __init__(self, reason: str):
        self.reason = reason

    def __setstate__(self, state: Any) -> None:
        pass


class _Storage:
    """A storage record (torch's persistent id): its member's bytes, checked against the record."""

    def __init__(self, key: str, dtype: Any, numel: int, data: Optional[bytearray], error: Optional[str]):
        self.key, self.dtype, self.numel, self.data, self.error = key, dtype, numel, data, error
        self._flat = None

    def flat(self):
        """The storage as a 1-D tensor of its dtype over the member's bytes (not resizable, so no
        later set_ can grow it); every view of the storage shares it."""
        if self._flat is None:
            import torch
            self._flat = torch.frombuffer(self.data, dtype=self.dtype) if self.data else \
                torch.empty(0, dtype=self.dtype)
        return self._flat


def _ints(x: Any) -> Optional[List[int]]:
    if not isinstance(x, (tuple, list)) or not all(type(v) is int and v >= 0 for v in x):
        return None
    return list(x)


def _itemsize(dtype: Any) -> int:
    import torch
    return torch.empty((), dtype=dtype).element_size()


def _view(storage: Any, offset: Any, size: Any, stride: Any, dtype: Any = None) -> Any:
    """The tensor `size`/`stride` at element `offset` of `storage`, or a BadTensor saying why not."""
    import torch
    if isinstance(storage, BadTensor):
        return storage
    if not isinstance(storage, _Storage):
        return BadTensor(f"its storage is {describe(storage)}, not a storage record")
    if storage.error:
        return BadTensor(storage.error)
    shape, strides = _ints(size), _ints(stride)
    if shape is None or strides is None or len(shape) != len(strides) or type(offset) is not int or offset < 0:
        return BadTensor(f"its view of storage '{storage.key}' is malformed (offset {str(offset)[:40]}, "
                         f"size {str(size)[:80]}, stride {str(stride)[:80]})")
    dtype = storage.dtype if dtype is None else dtype  # (_rebuild_tensor_v3 views bytes as `dtype`)
    nbytes = len(storage.data)
    if not isinstance(dtype, torch.dtype) or nbytes % _itemsize(dtype):
        return BadTensor(f"storage '{storage.key}' ({nbytes} bytes) cannot be viewed as {str(dtype)[:40]}")
    extent = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    need = (offset + extent) * _itemsize(dtype)
    if need > nbytes:
        return BadTensor(f"its view (offset {offset}, size {shape}, stride {strides}, {_itemsize(dtype)}-byte "
                         f"elements) needs {need} bytes of storage '{storage.key}', which holds {nbytes}")
    flat = storage.flat()
    return (flat if dtype == storage.dtype else flat.view(dtype)).as_strided(shape, strides, offset)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _view(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    # requires_grad, hooks and metadata are training state; a checkpoint import needs the values.
    return _view(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       dtype=None, metadata=None):
    return _view(storage, storage_offset, size, stride, dtype)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    return data if is_tensor(data) or isinstance(data, BadTensor) else \
        BadTensor(f"a parameter of {describe(data)}")


_rebuild_parameter_with_state = _rebuild_parameter


def _rebuild_from_type_v2(func, new_type, args, state):
    # torch pickles a tensor with attributes (Megatron's tensor_model_parallel, ...) this way;
    # the attributes are dropped and the tensor stays a plain one.
    if func not in _REBUILDERS.values() or not isinstance(args, tuple):
        return BadTensor(f"rebuilt by {describe(func)}")
    return func(*args)


_REBUILDERS = {name: globals()[name] for name in _REBUILD_NAMES}


def is_tensor(x: Any) -> bool:
    import torch
    return isinstance(x, torch.Tensor)


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    # copyreg's helper for objects pickled with protocol < 2: only for classes we build.
    if base is object and isinstance(cls, type) and (issubclass(cls, Opaque) or cls is argparse.Namespace):
        return cls.__new__(cls)
    raise pickle.UnpicklingError(f"refusing to reconstruct {cls!r}")


def _codecs_encode(text: str, encoding: str = "latin1") -> bytes:
    # How protocol-2 pickles written by Python 3 store bytes; only the latin1 form occurs.
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"codecs.encode({type(text).__name__}, {encoding!r}) is not a bytes literal")
    return text.encode("latin1")


class _Budget:
    """What the objects of one file other than tensors may still take."""

    def __init__(self, path: str):
        self.path, self.charged = path, 0

    def charge(self, nbytes: int, what: str) -> None:
        self.charged += nbytes
        if self.charged > MAX_OBJECT_BYTES:
            raise invalid(f"{self.path}: {what} would take {nbytes} bytes; the objects of a checkpoint "
                          f"other than tensors may take at most {MAX_OBJECT_BYTES}")


class _Unpickler(pickle._Unpickler):
    """Python's unpickler with find_class limited to the allowlist and every allocation that an
    argument sizes charged to `MAX_OBJECT_BYTES`."""

    _opaque: Dict[Tuple[str, str], type] = {}

    def __init__(self, data: bytes, archive: TorchZip):
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.archive = archive
        self.storages: Dict[str, _Storage] = {}
        self.storage_bytes = 0
        self.ops = 0
        # The allowlist's constructors hold the budget, not the unpickler: no cycle keeps the unpickler
        # (its memo, every storage) alive after load() returns.
        self.budget = _Budget(archive.path)
        self.allowed = _allowed(self.budget)  # (imports numpy and torch: before the memory baseline)
        self.rss0 = _rss()

    # -- memory

    def sample(self) -> None:
        grown = _rss() - self.rss0 - self.storage_bytes
        if grown > MAX_OBJECT_BYTES + self.budget.charged:
            raise invalid(f"{self.archive.path}: the pickle's objects take more than {MAX_OBJECT_BYTES} bytes "
                          f"(after {self.ops} opcodes); a checkpoint's objects other than tensors take far less")

    # -- names and storages

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:  # Python 2's names, as Python's own unpickler maps them (so errors say subprocess.Popen)
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        key = (module, name)
        if key in self.allowed:
            return self.allowed[key]
        if key not in self._opaque:
            self._opaque[key] = type(name, (Opaque,), {"__ptcfs_name__": f"{module}.{name}",
                                                       "__module__": "ptcfs.torch_pickle.opaque"})
        return self._opaque[key]

    def persistent_load(self, pid: Any) -> Any:
        import torch
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] in ("storage", b"storage")):
            raise pickle.UnpicklingError(f"unknown persistent id {str(pid)[:80]}")
        _, kind, key, _location, numel = pid
        key = key.decode("ascii", "replace") if isinstance(key, bytes) else key
        dtype = getattr(kind, "storage_dtype", None)
        if not isinstance(key, str) or not isinstance(dtype, torch.dtype) or type(numel) is not int or numel < 0:
            raise pickle.UnpicklingError(f"malformed storage record {str(pid)[:120]}")
        if key in self.storages:
            return self.storages[key]
        nbytes = numel * _itemsize(dtype)
        info = self.archive.storage_member(key)
        data, error = None, None
        if info is None:
            error = f"its storage '{key[:80]}' has no member data/{key[:80]} in the zip"
        elif info.file_size != nbytes:
            error = (f"its storage '{key}' claims {numel} elements of {dtype} ({nbytes} bytes); "
                     f"member data/{key} holds {info.file_size} bytes")
        else:
            data = self.archive.read(info)  # (the members together hold at most the file's size)
            self.storage_bytes += len(data)
        self.storages[key] = _Storage(key, dtype, numel, data, error)
        return self.storages[key]


def _sampled(op):
    def run(self: _Unpickler) -> None:
        self.ops += 1
        if self.ops % _SAMPLE_EVERY == 0:
            self.sample()
        op(self)
    return run


def _load_bytearray8(self: _Unpickler) -> None:
    # Python's own BYTEARRAY8 zero-fills the length the file states before reading a byte: 6 GB for a
    # 14-byte pickle. Here the length is charged first and only the bytes present are read.
    n = struct.unpack("<Q", self.read(8))[0]
    self.budget.charge(n, f"a bytearray of {n} bytes (BYTEARRAY8)")
    data = self.read(n)
    if len(data) != n:
        raise pickle.UnpicklingError(f"BYTEARRAY8 of {n} bytes: the pickle holds {len(data)}")
    self.append(bytearray(data))


_Unpickler.dispatch = {code: _sampled(op) for code, op in pickle._Unpickler.dispatch.items()}
_Unpickler.dispatch[pickle.BYTEARRAY8[0]] = _sampled(_load_bytearray8)


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _allowed(u: _Budget) -> Dict[Tuple[str, str], Any]:
    """(module, name) -> object: what a checkpoint may construct for real. Tensor rebuilders,
    containers and plain data; nothing that evaluates, imports or touches files, and nothing that
    allocates by an argument without charging `u`."""
    import numpy as np
    import torch
    # numpy 2 moved numpy.core to numpy._core (numpy.core warns); pickles name either.
    try:
        from numpy._core import multiarray as _np_multiarray
    except ImportError:
        from numpy.core import multiarray as _np_multiarray

    def bytearray_(source: Any = b"", *rest: Any) -> bytearray:
        if isinstance(source, int):
            u.charge(source, f"bytearray({source})")
        return bytearray(source, *rest)

    def reconstruct(cls: Any, shape: Any, dtype: Any) -> Any:  # numpy's array pickles: an empty array, then BUILD
        dims = [shape] if type(shape) is int else _ints(shape)
        if (cls is not ndarray and cls is not np.ndarray) or dims is None:
            raise pickle.UnpicklingError(f"numpy _reconstruct({describe(cls)}, {str(shape)[:40]}) is refused")
        u.charge(math.prod(dims) * np.dtype(dtype).itemsize, f"a numpy array of shape {dims[:8]}")
        return _np_multiarray._reconstruct(np.ndarray, tuple(dims), dtype)

    def scalar(dtype: Any, *rest: Any) -> Any:
        u.charge(getattr(dtype, "itemsize", 0), f"a numpy scalar of {str(dtype)[:40]}")
        return _np_multiarray.scalar(dtype, *rest)

    ndarray = _Type("numpy.ndarray", np.ndarray)
    out: Dict[Tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("argparse", "Namespace"): argparse.Namespace,
        ("copyreg", "_reconstructor"): _reconstructor,
        ("codecs", "encode"): _codecs_encode, ("_codecs", "encode"): _codecs_encode,
        ("numpy", "dtype"): np.dtype, ("numpy", "ndarray"): ndarray,
        ("torch", "Size"): torch.Size, ("torch", "Tensor"): _Type("torch.Tensor", torch.Tensor),
        ("torch.nn.parameter", "Parameter"): _Type("torch.nn.parameter.Parameter", torch.nn.Parameter),
        ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
        ("torch.tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    }
    for value in (set, frozenset, slice, complex):
        out[("builtins", value.__name__)] = value
    out[("builtins", "bytearray")] = bytearray_
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out[(mod, "_reconstruct")] = reconstruct
        out[(mod, "scalar")] = scalar
    for name, fn in _REBUILDERS.items():
        out[("torch._utils", name)] = fn
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype):
            out[("torch", name)] = value
        elif name.endswith("Storage") and isinstance(value, type):
            dtype = torch.uint8 if name == "UntypedStorage" else getattr(value, "dtype", None)
            if isinstance(dtype, torch.dtype):  # the type in a storage record: it gives the dtype
                for mod in ("torch", "torch.storage"):
                    out[(mod, name)] = _Type(f"{mod}.{name}", value, storage_dtype=dtype)
    return out


def _find_bad(obj: Any) -> Optional[Tuple[str, BadTensor]]:
    """(path, tensor) of the first BadTensor in `obj`, its path the keys joined with dots. A path is
    kept as linked (parent, key) pairs and joined only for the answer: a file may nest a million deep."""
    todo: List[Tuple[Any, Any]] = [(None, obj)]
    seen = set()
    while todo:
        node, x = todo.pop()
        if isinstance(x, BadTensor):
            keys = []
            while node is not None:
                node, key = node
                keys.append(key)
            path = ".".join(reversed(keys)) or "(the whole file)"
            return (path if len(path) <= 300 else path[:150] + "..." + path[-150:]), x
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, dict):
            items = list(x.items())
        elif isinstance(x, (list, tuple, set, frozenset)):
            items = list(enumerate(x))
        elif isinstance(x, (argparse.Namespace, Opaque)):
            items = list(vars(x).items())
        else:
            continue
        todo.extend(((node, str(k)), v) for k, v in reversed(items))
    return None


def load(path: str, offset: int = 0, length: Optional[int] = None) -> Any:
    """The object in a torch checkpoint file (the zip format torch writes since 1.6), tensors on
    the CPU over the file's bytes, built without calling anything the allowlist does not name.
    With `offset` and `length`, the archive is those bytes of the file (an item of a DCP .distcp).
    Refused (ptcfs.Error, invalid_argument, naming the file and what): a damaged archive, any
    member torch would not write, a tensor its storage cannot hold, objects past MAX_OBJECT_BYTES."""
    # torch's first import keeps every frame up the stack (torch.fx's wrap() takes the caller's frame),
    # so it runs here, and the frame that holds the storages is another one.
    importlib.import_module("numpy")
    importlib.import_module("torch")
    return _load(path, offset, length)


def _load(path: str, offset: int = 0, length: Optional[int] = None) -> Any:
    with TorchZip(path, offset, length) as archive:
        path = archive.path
        data = archive.read_small("data.pkl", MAX_PICKLE_BYTES)
        u = _Unpickler(data, archive)
        try:
            obj = u.load()
        except pickle.UnpicklingError as e:
            raise invalid(f"{path}: {e}") from None
        except RecursionError:
            raise invalid(f"{path}: the pickle nests too deeply") from None
        finally:
            del data
    bad = _find_bad(obj)
    if bad is not None:
        raise invalid(f"{path}: tensor '{bad[0]}': {bad[1].reason}")
    return obj
