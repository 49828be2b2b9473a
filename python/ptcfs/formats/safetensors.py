"""Reading and writing safetensors files.

Reading maps the file (np.frombuffer over an mmap: zero-copy, also through the FUSE mount)
and checks the header as strictly as ptcfs import does. Writing produces the canonical form
of docs/FORMATS.md, the bytes the mount's views serve: the header is compact JSON with
sorted keys, no __metadata__, padded with spaces to a multiple of 8; the data holds the
tensors in name order, packed. It streams tensor by tensor, front to back, with no
whole-file buffer: that is what the mount's write path accepts (one writer, in order).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from .. import dtypes as _dt
from .._json import no_duplicates
from ..errors import Error, invalid

MAX_HEADER = 100_000_000  # the reference implementation's limit
WRITE_BUFFER = 1 << 20    # large writes: fewer FUSE round trips


# --------------------------------------------------------------------------------------
# header

def encode_header(entries: Mapping[str, Tuple[str, Tuple[int, ...]]]) -> Tuple[bytes, Dict[str, Tuple[int, int]]]:
    """The canonical header (8-byte length included) for {name: (dtype, shape)}, and each
    tensor's [begin, end) in the data area (tensors packed in name order)."""
    h, offsets, pos = {}, {}, 0
    for name in sorted(entries):
        dtype, shape = entries[name]
        n = _dt.itemsize(dtype) * math.prod(int(s) for s in shape)
        h[name] = {"data_offsets": [pos, pos + n], "dtype": dtype, "shape": [int(s) for s in shape]}
        offsets[name] = (pos, pos + n)
        pos += n
    js = json.dumps(h, separators=(",", ":"), sort_keys=True).encode("utf-8")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js, offsets


def parse_header(buf, file_size: int, where: str) -> Tuple[int, Dict[str, Tuple[str, Tuple[int, ...], int, int]], Optional[dict]]:
    """Checks a header: (data start, {name: (dtype, shape, begin, end)}, __metadata__ or None).

    `buf` holds at least the header bytes. Offsets must lie in the data area, agree with
    dtype and shape, and cover it without overlap or hole (as the reference requires)."""
    if file_size < 8:
        raise invalid(f"{where}: {file_size} bytes is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > MAX_HEADER or 8 + n > file_size:
        raise invalid(f"{where}: header length {n} does not fit the file ({file_size} bytes)")
    if bytes(buf[8:9]) != b"{":
        raise invalid(f"{where}: header does not start with '{{'")
    try:
        h = json.loads(bytes(buf[8:8 + n]).decode("utf-8"), object_pairs_hook=no_duplicates(f"{where}: header"))
    except (UnicodeDecodeError, ValueError) as e:
        raise invalid(f"{where}: header is not valid JSON: {e}") from None
    if not isinstance(h, dict):
        raise invalid(f"{where}: header is not a JSON object")
    meta = h.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise invalid(f"{where}: __metadata__ is not a map of strings")
    data_len = file_size - 8 - n
    entries = {}
    for name, e in h.items():
        at = f"{where}: tensor '{name}'"
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escaped in the JSON: no UTF-8 name (ptcfs refuses it too)
            raise invalid(f"{where}: tensor name {name!r} is not valid UTF-8") from None
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise invalid(f"{at}: entry must have exactly dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in _dt.NUMPY:
            raise invalid(f"{at}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise invalid(f"{at}: bad shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
                and 0 <= offs[0] <= offs[1]):
            raise invalid(f"{at}: bad data_offsets {offs!r}")
        want = _dt.itemsize(dtype) * math.prod(shape)  # exact: numpy's int64 product wraps around
        if offs[1] - offs[0] != want:
            raise invalid(f"{at}: data_offsets {offs} hold {offs[1] - offs[0]} bytes, {dtype} {shape} needs {want}")
        if offs[1] > data_len:
            raise invalid(f"{at}: data_offsets {offs} run past the data area ({data_len} bytes): truncated file?")
        entries[name] = (dtype, tuple(shape), offs[0], offs[1])
    pos = 0
    for name, (_, _, b, e) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if b != pos:
            raise invalid(f"{where}: tensor '{name}': data_offsets "
                          f"{'overlap another tensor' if b < pos else f'leave a hole before byte {b}'}")
        pos = e
    if pos != data_len:
        raise invalid(f"{where}: the data area is {data_len} bytes but the tensors cover {pos}")
    return 8 + n, entries, meta


# --------------------------------------------------------------------------------------
# reading

class SafetensorsFile:
    """An open safetensors file. ``tensors()`` / ``[name]`` give numpy arrays that are views
    of a read-only mapping of the file (no copy); BF16 comes as uint16 raw bits, like the
    mount's npy views (``torch(name)`` gives torch.bfloat16). The mapping lives as long as
    any array taken from it."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            try:
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            except (OSError, ValueError):
                # A file system without mmap support: read it whole instead.
                self._buf = f.read()
        if len(self._buf) != size:
            raise invalid(f"{path}: read {len(self._buf)} bytes of {size}")
        self.data_start, self.entries, self.metadata = parse_header(self._buf, size, path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return sorted(self.entries)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def dtype(self, name: str) -> str:
        return self._entry(name)[0]

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._entry(name)[1]

    def _entry(self, name: str):
        try:
            return self.entries[name]
        except KeyError:
            raise Error("not_found", f"{self.path}: no tensor '{name}'") from None

    def __getitem__(self, name: str) -> np.ndarray:
        dtype, shape, b, e = self._entry(name)
        nd = _dt.numpy_dtype(dtype)
        return np.frombuffer(self._buf, dtype=nd, count=(e - b) // nd.itemsize,
                             offset=self.data_start + b).reshape(shape)

    def tensors(self) -> Dict[str, np.ndarray]:
        """{name: array} of every tensor, in name order."""
        return {name: self[name] for name in self.keys()}

    def torch(self, name: str):
        """The tensor as torch, sharing the mapping (BF16 as torch.bfloat16)."""
        return _dt.to_torch(self[name], self.dtype(name))


def load(path: str) -> Dict[str, np.ndarray]:
    """{name: numpy array} of a safetensors file, zero-copy (views of a read-only mapping)."""
    return SafetensorsFile(path).tensors()


def load_dtypes(path: str) -> Dict[str, str]:
    """{name: safetensors dtype} of a file (tells BF16 bits from other uint16 data)."""
    return {n: e[0] for n, e in SafetensorsFile(path).entries.items()}


# --------------------------------------------------------------------------------------
# writing

def _chunks(a: np.ndarray, limit: int = 64 << 20) -> Iterator[memoryview]:
    """The bytes of a C-contiguous array in pieces of at most ~limit bytes (no copy)."""
    flat = a.reshape(-1).view(np.uint8)
    for lo in range(0, flat.size, limit):
        yield memoryview(flat[lo:lo + limit])


def save(path: str, tensors: Mapping[str, Any], dtypes: Optional[Mapping[str, str]] = None) -> int:
    """Writes `tensors` ({name: numpy array or torch tensor}) to `path` in canonical form and
    returns the bytes written. ``dtypes`` gives a tensor's safetensors dtype where the array
    does not say it (uint16 arrays are taken as BF16 bits; torch.bfloat16 is BF16).

    The file is written at its final name, header first, then each tensor in name order:
    a writer of the mount may not rename, and its shard must arrive front to back. Only one
    tensor at a time is made contiguous (when it is not already): memory stays bounded by the
    largest tensor, not the file."""
    dtypes = dtypes or {}
    for name in tensors:
        if not isinstance(name, str) or not name:
            raise invalid(f"{path}: tensor names must be non-empty strings, got {name!r}")
    # Types and shapes first, so that a bad tensor fails before a byte is written.
    checked = {name: _dt.check_storage(x, dtypes.get(name), f"{path}: tensor '{name}'")
               for name, x in tensors.items()}
    header, _ = encode_header({name: (dt, a.shape) for name, (a, dt) in checked.items()})
    total = len(header)
    with open(path, "wb", buffering=WRITE_BUFFER) as f:
        f.write(header)
        for name in sorted(checked):
            total += _write_tensor(f, *checked[name])
    return total


def _write_tensor(f, a: np.ndarray, dtype: str) -> int:
    # A function of its own, so that a contiguous copy dies before the next tensor's is made.
    a = _dt.storage_array(a, dtype)
    for piece in _chunks(a):
        f.write(piece)
    return a.nbytes


def canonical_bytes(tensors: Mapping[str, Any], dtypes: Optional[Mapping[str, str]] = None) -> bytes:
    """The canonical file as bytes (for small tensors and tests; save() streams instead)."""
    dtypes = dtypes or {}
    arrays = {n: _dt.as_storage(x, dtypes.get(n), f"tensor '{n}'") for n, x in tensors.items()}
    header, _ = encode_header({n: (dt, a.shape) for n, (a, dt) in arrays.items()})
    return header + b"".join(arrays[n][0].tobytes() for n in sorted(arrays))
