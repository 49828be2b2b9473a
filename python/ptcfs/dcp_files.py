"""A DCP checkpoint directory as stock ``dcp.save`` writes it (``.metadata`` and ``__<rank>_<i>.distcp``
files), read without running code from it and checked before a byte is used (docs/FORMATS.md,
"Distributed Checkpoint").

* ``.metadata`` is a pickle. It is run by Python's own unpickler with ``find_class`` limited to the
  DCP classes, which become plain records of this module; ``torch.Size``, torch's dtypes and
  layout, and ``pathlib`` paths become values; any other class (Megatron-Core's extra
  ``all_local_plans``, a class of Python 3.13's ``pathlib._local``) an inert placeholder; no
  function outside the allowlist is ever called. The file may hold at most MAX_METADATA_BYTES.
* Every storage reference is checked against its file: a plain name of this folder, offset and
  length inside it, no stream transform (compression) ptcfs does not read; every chunk inside its
  tensor, the chunks of a tensor disjoint and covering it exactly once, each with its reference.
* Each item is a ``torch.save`` archive inside a ``.distcp`` file; a tensor's is loaded by
  ptcfs.torch_pickle over exactly its byte range (no compressed member, sizes checked, CRC-32
  checked) and must have the dtype and shape of its chunk. A bytes item is kept as its archive's
  bytes, checked to be an archive and not unpickled.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import stat
from typing import Any, Dict, List, Optional, Tuple

from . import dtypes as _dt
from .errors import Error, invalid
from .formats.torch_pickle import Opaque, _rss, describe
from .formats.torch_zip import TorchZip

MAX_METADATA_BYTES = 256 << 20
MAX_OBJECT_BYTES = 2 << 30  # what the unpickled objects may take (a 256 MiB .metadata of DCP's takes ~2 GB)
MAX_CHUNKS = 4096  # per tensor: one per rank that saved a shard of it (the overlap check is pairwise)

_MD = "torch.distributed.checkpoint.metadata"
_FS = "torch.distributed.checkpoint.filesystem"


class _Record:
    """A DCP dataclass as the pickle builds it: NEWOBJ, then BUILD with its fields (a dict; a
    tuple for TensorProperties, in its __getstate__ order). Only the class's own fields are taken,
    kept in `fields` (never as attributes: a state cannot replace a method)."""

    FIELDS: Tuple[str, ...] = ()

    def __new__(cls, *args: Any, **kwargs: Any):
        obj = object.__new__(cls)
        object.__setattr__(obj, "fields", {})
        return obj

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (dict, slots)
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, tuple):
            state = dict(zip(self.FIELDS, state))
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"{type(self).__name__}: a state of type {type(state).__name__}")
        for k, v in state.items():
            if k not in self.FIELDS:
                raise pickle.UnpicklingError(f"{type(self).__name__}: unknown field {_brief(k)}")
            self.fields[k] = v

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


def _record(name: str, fields: Tuple[str, ...]) -> type:
    return type(name, (_Record,), {"FIELDS": fields, "__module__": __name__})


Metadata = _record("Metadata", ("state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version",
                                "all_local_plans"))
TensorStorageMetadata = _record("TensorStorageMetadata", ("properties", "size", "chunks"))
BytesStorageMetadata = _record("BytesStorageMetadata", ())
ChunkStorageMetadata = _record("ChunkStorageMetadata", ("offsets", "sizes"))
TensorProperties = _record("TensorProperties", ("dtype", "layout", "requires_grad", "memory_format",
                                                "pin_memory", "strides"))
MetadataIndex = _record("MetadataIndex", ("fqn", "offset", "index"))
StorageMeta = _record("StorageMeta", ("checkpoint_id", "save_id", "load_id", "modules"))
StorageInfo = _record("_StorageInfo", ("relative_path", "offset", "length", "transform_descriptors"))


def _brief(x: Any) -> str:
    """How an error shows a value from the file: ints, short strings and tuples of ints as they are,
    anything else by its type (str() of a crafted object graph can be exponentially long)."""
    if type(x) is int:
        return str(x) if abs(x) < 10 ** 30 else "a huge int"
    if type(x) is str:
        return repr(x[:80])
    if type(x) is tuple and len(x) <= 8 and all(type(v) is int and abs(v) < 10 ** 30 for v in x):
        return str(x)
    return f"a {type(x).__name__}"


class _Dtype(str):
    """torch.<name> of a dtype, kept as its name."""


class _MemFormat:
    pass


def _size(*args: Any) -> Tuple[int, ...]:
    if len(args) != 1 or not isinstance(args[0], (tuple, list)) or len(args[0]) > 64 or \
            not all(type(x) is int for x in args[0]):
        raise pickle.UnpicklingError("torch.Size of something other than up to 64 integers")
    return tuple(args[0])


def _layout(name: Any) -> str:
    if type(name) is not str or len(name) > 64:
        raise pickle.UnpicklingError("torch.serialization._get_layout of something other than a short name")
    return name


def _getattr(obj: Any, name: Any) -> Any:
    """getattr as a pickle calls it for an enum member: of DCP's memory-format enum, its name; of a
    placeholder class (Megatron's all_local_plans hold torch's WriteItemType.SHARD), a placeholder."""
    if type(name) is str and len(name) <= 256:
        if obj is _MemFormat:
            return "memory_format." + name
        if isinstance(obj, type) and issubclass(obj, Opaque):
            return obj(name)  # inert: keeps the name, no attribute of anything is read
    raise pickle.UnpicklingError("getattr is allowed only on DCP's memory-format enum and on placeholders")


def _path(*parts: Any) -> str:
    if len(parts) > 4096 or not all(type(p) is str for p in parts):
        raise pickle.UnpicklingError("a pathlib path of something other than strings")
    return "/".join(parts)


_TORCH_DTYPES = {attr: name for name, attr in _dt._TORCH.items()}

_ALLOWED: Dict[Tuple[str, str], Any] = {
    (_MD, "Metadata"): Metadata, (_MD, "TensorStorageMetadata"): TensorStorageMetadata,
    (_MD, "BytesStorageMetadata"): BytesStorageMetadata, (_MD, "ChunkStorageMetadata"): ChunkStorageMetadata,
    (_MD, "TensorProperties"): TensorProperties, (_MD, "MetadataIndex"): MetadataIndex,
    (_MD, "StorageMeta"): StorageMeta, (_MD, "_MEM_FORMAT_ENCODING"): _MemFormat,
    (_FS, "_StorageInfo"): StorageInfo,
    ("torch", "Size"): _size, ("torch.serialization", "_get_layout"): _layout,
    ("builtins", "getattr"): _getattr, ("collections", "OrderedDict"): dict,
    ("pathlib", "PosixPath"): _path, ("pathlib", "PurePosixPath"): _path,
    ("pathlib._local", "PosixPath"): _path, ("pathlib._local", "PurePosixPath"): _path,
}


class _Unpickler(pickle._Unpickler):
    """Python's own unpickler (its memo is a dict: no huge allocation from a crafted index), with
    find_class limited to _ALLOWED; other classes become placeholders that are never called. What
    the objects take is bounded: resident memory is sampled as the opcodes run (as ptcfs.torch_pickle
    does) and may grow by at most MAX_OBJECT_BYTES."""

    def __init__(self, data: bytes, where: str):
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self._opaque: Dict[Tuple[str, str], type] = {}
        self.where, self.ops, self.rss0 = where, 0, _rss()

    def sample(self) -> None:
        if _rss() - self.rss0 > MAX_OBJECT_BYTES:
            raise pickle.UnpicklingError(f"its objects take more than {MAX_OBJECT_BYTES} bytes (after {self.ops} "
                                         "opcodes); a DCP .metadata takes far less")

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in _ALLOWED:
            return _ALLOWED[key]
        if module == "torch" and name in _TORCH_DTYPES:
            return _Dtype(name)
        if key not in self._opaque:
            self._opaque[key] = type(name, (Opaque,), {"__ptcfs_name__": f"{module}.{name}",
                                                       "__module__": "ptcfs.dcp_files.opaque"})
        return self._opaque[key]


def _sampled(op):
    def run(self: _Unpickler) -> None:
        self.ops += 1
        if self.ops % 4096 == 0:
            self.sample()
        op(self)
    return run


_Unpickler.dispatch = {code: _sampled(op) for code, op in pickle._Unpickler.dispatch.items()}


class Chunk:
    __slots__ = ("offsets", "sizes", "file", "offset", "length")

    def __init__(self, offsets, sizes, file, offset, length):
        self.offsets, self.sizes, self.file, self.offset, self.length = offsets, sizes, file, offset, length


class Tensor:
    def __init__(self, name: str, dtype: str, shape: List[int], chunks: List[Chunk]):
        self.name, self.dtype, self.shape, self.chunks = name, dtype, shape, chunks


class Checkpoint:
    """A checked DCP directory: tensors {fqn: Tensor}, bytes items {fqn: (file, offset, length)},
    planner_data {flat name: [keys]} (None when the planner kept none)."""

    def __init__(self, path: str):
        self.path = path
        self.tensors: Dict[str, Tensor] = {}
        self.items: Dict[str, Tuple[str, int, int]] = {}
        self.planner_data: Optional[Dict[str, list]] = None

    def load_chunk(self, t: Tensor, c: Chunk):
        """The chunk's tensor, loaded code-free from its byte range and checked against the chunk."""
        import torch

        from .formats import torch_pickle
        x = torch_pickle.load(c.file, c.offset, c.length)
        where = f"{c.file}[{c.offset}:{c.offset + c.length}]: tensor '{t.name}' chunk at {list(c.offsets)}"
        if not isinstance(x, torch.Tensor):
            raise invalid(f"{where}: holds {type(x).__name__}, not a tensor")
        if list(x.shape) != list(c.sizes) or x.dtype != _dt.torch_dtype(t.dtype):
            raise invalid(f"{where}: a {x.dtype} tensor of shape {list(x.shape)}; .metadata says "
                          f"{t.dtype} {list(c.sizes)}")
        return x

    def read_item(self, name: str) -> bytes:
        """A bytes item's torch.save archive, checked to be one (its members are not unpickled)."""
        file, offset, length = self.items[name]
        TorchZip(file, offset, length).close()
        with open(file, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise invalid(f"{file}: item '{name}' is truncated ({len(data)} of {length} bytes)")
        return data


def _ints(x: Any, n: Optional[int], where: str) -> List[int]:
    if type(x) is not tuple or len(x) > 64 or not all(type(v) is int and 0 <= v < 1 << 62 for v in x) or \
            (n is not None and len(x) != n):
        raise invalid(f"{where}: {_brief(x)} is not {'a tuple of' if n is None else n} non-negative integer(s)")
    return list(x)


def _ref(path: str, info: Any, sizes: Dict[str, int], where: str) -> Tuple[str, int, int]:
    if not isinstance(info, StorageInfo):
        raise invalid(f"{where}: its storage record is {type(info).__name__}, not a _StorageInfo")
    rel, off, length = info.get("relative_path"), info.get("offset"), info.get("length")
    if info.get("transform_descriptors"):
        td = info.get("transform_descriptors")
        shown = [_brief(t) for t in td[:4]] if type(td) is list else [_brief(td)]
        raise invalid(f"{where}: stored through transforms [{', '.join(shown)}] (compression); ptcfs reads only "
                      "plain torch.save items")
    if not isinstance(rel, str) or not rel or "/" in rel or rel in (".", "..") or "\0" in rel:
        raise invalid(f"{where}: storage file {_brief(rel)} is not a file name of this folder")
    if type(off) is not int or type(length) is not int or off < 0 or length <= 0:
        raise invalid(f"{where}: storage range offset {_brief(off)}, length {_brief(length)}")
    if rel not in sizes:
        full = os.path.join(path, rel)
        try:
            st = os.lstat(full)  # a symlink could lead out of the folder
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise invalid(f"{where}: storage file {rel} is not a regular file of {path}")
        sizes[rel] = st.st_size
    if off + length > sizes[rel]:
        raise invalid(f"{where}: bytes [{off}, {off + length}) of {rel} lie past its end ({sizes[rel]} bytes)")
    return os.path.join(path, rel), off, length


def _check_cover(meta: str, name: str, shape: List[int], chunks: List[Chunk]) -> None:
    total = math.prod(shape)
    vol = 0
    for c in chunks:
        for d, (o, s) in enumerate(zip(c.offsets, c.sizes)):
            if o + s > shape[d] or (s == 0 and o > shape[d]):
                raise invalid(f"{meta}: tensor '{name}' {shape}: chunk at {c.offsets} of {c.sizes} lies outside it")
        vol += math.prod(c.sizes)
    nonempty = [c for c in chunks if math.prod(c.sizes)]
    for i, a in enumerate(nonempty):
        for b in nonempty[i + 1:]:
            if all(ao < bo + bs and bo < ao + as_ for ao, as_, bo, bs in zip(a.offsets, a.sizes, b.offsets, b.sizes)):
                raise invalid(f"{meta}: tensor '{name}': chunks at {a.offsets} and {b.offsets} overlap")
    if vol != total:
        raise invalid(f"{meta}: tensor '{name}' {shape}: its chunks hold {vol} of its {total} elements")


def read(path: str) -> Checkpoint:
    """The checked contents of DCP directory `path` (ptcfs.Error invalid_argument naming the file and
    what is wrong otherwise). A directory of safetensors items (torch's HF storage writer, with or
    without .metadata) is read by ptcfs.dcp_safetensors."""
    from . import dcp_safetensors
    meta = os.path.join(path, ".metadata")
    if not os.path.isfile(meta):
        if os.path.isdir(path) and dcp_safetensors.storage_files(path):  # the HF writer writes no .metadata
            return dcp_safetensors.read(path)
        raise invalid(f"{path}: not a DCP checkpoint (no .metadata)")
    ck = _read_metadata(path, meta)
    if any(dcp_safetensors.is_safetensors(c) for t in ck.tensors.values() for c in t.chunks[:1]):
        return dcp_safetensors.with_metadata(ck, meta)  # FileSystemWriter(serialization_format=SAFETENSORS)
    return ck


def _read_metadata(path: str, meta: str) -> Checkpoint:
    size = os.path.getsize(meta)
    if size > MAX_METADATA_BYTES:
        raise invalid(f"{meta}: {size} bytes (at most {MAX_METADATA_BYTES} are read)")
    with open(meta, "rb") as f:
        data = f.read()
    try:
        md = _Unpickler(data, meta).load()
    except RecursionError:
        raise invalid(f"{meta}: the pickle nests too deeply") from None
    except MemoryError:
        raise invalid(f"{meta}: its objects do not fit in memory") from None
    except Exception as e:  # noqa: BLE001 (any failure of a crafted pickle is the file's fault)
        raise invalid(f"{meta}: not a DCP .metadata pickle ({type(e).__name__}: {str(e)[:200]})") from None
    finally:
        del data
    try:
        return _checked(path, meta, md)
    except RecursionError:
        raise invalid(f"{meta}: its objects nest too deeply") from None
    except Error:
        raise
    except Exception as e:  # noqa: BLE001
        raise invalid(f"{meta}: malformed ({type(e).__name__})") from None


def _checked(path: str, meta: str, md: Any) -> "Checkpoint":
    if not isinstance(md, Metadata) or not isinstance(md.get("state_dict_metadata"), dict):
        raise invalid(f"{meta}: holds {describe(md)}, not DCP's Metadata")
    storage = md.get("storage_data")
    if not isinstance(storage, dict):
        raise invalid(f"{meta}: no storage_data (not written by a FileSystemWriter)")
    refs: Dict[Tuple[str, Optional[Tuple[int, ...]]], Any] = {}
    for idx, info in storage.items():
        if not isinstance(idx, MetadataIndex) or type(idx.get("fqn")) is not str:
            raise invalid(f"{meta}: a storage_data key of type {type(idx).__name__}")
        off = idx.get("offset")
        if off is not None:  # checked before it is hashed: a crafted nested tuple hashes in exponential time
            off = tuple(_ints(off, None, f"{meta}: storage_data offset of '{idx.get('fqn')[:200]}'"))
        refs[(idx.get("fqn"), off)] = info
    ck = Checkpoint(path)
    sizes: Dict[str, int] = {}
    for name, m in md.get("state_dict_metadata").items():
        if type(name) is not str:
            raise invalid(f"{meta}: a state_dict_metadata key of type {type(name).__name__}")
        where = f"{meta}: entry '{name[:200]}'"
        if isinstance(m, BytesStorageMetadata):
            if (name, None) not in refs:
                raise invalid(f"{where}: no storage record")
            ck.items[name] = _ref(path, refs[(name, None)], sizes, where)
            continue
        if not isinstance(m, TensorStorageMetadata):
            raise invalid(f"{where}: of type {type(m).__name__}")
        props = m.get("properties")
        dtype = props.get("dtype") if isinstance(props, TensorProperties) else None
        if not isinstance(dtype, _Dtype):
            shown = getattr(dtype, "__ptcfs_name__", None) or _brief(dtype)  # torch.complex64: a placeholder
            raise invalid(f"{where}: dtype {shown} (ptcfs stores {' '.join(_dt.NUMPY)})")
        shape = _ints(m.get("size"), None, f"{where}: size")
        chunks_md = m.get("chunks")
        if not isinstance(chunks_md, list) or len(chunks_md) > MAX_CHUNKS:
            raise invalid(f"{where}: chunks of type {type(chunks_md).__name__} or more than {MAX_CHUNKS}")
        chunks = []
        for c in chunks_md:
            if not isinstance(c, ChunkStorageMetadata):
                raise invalid(f"{where}: a chunk of type {type(c).__name__}")
            off = _ints(c.get("offsets"), len(shape), f"{where}: chunk offsets")
            sz = _ints(c.get("sizes"), len(shape), f"{where}: chunk sizes")
            key = (name, tuple(off))
            if key not in refs:
                raise invalid(f"{where}: chunk at {off} has no storage record")
            file, o, n = _ref(path, refs[key], sizes, f"{where} chunk at {off}")
            chunks.append(Chunk(off, sz, file, o, n))
        _check_cover(meta, name, shape, chunks)
        ck.tensors[name] = Tensor(name, _TORCH_DTYPES[str(dtype)], shape, chunks)
    pd = md.get("planner_data")
    if type(pd) is dict and all(type(k) is str and type(v) is tuple and len(v) <= 256 and
                                all(type(x) in (str, int) for x in v) for k, v in pd.items()):
        ck.planner_data = {k: list(v) for k, v in pd.items()}
    return ck
