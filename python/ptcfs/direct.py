"""Reading files of a ptcfs mount without FUSE: the direct data path.

``ptcfs.direct.open(path)`` asks the node's daemon, over its direct socket, for the file's map
and the descriptors of the files that hold its bytes, and maps them (libptcfs_client through
ctypes). Arrays from ``tensors()`` are then views of memory the page cache already holds: no
copy where a tensor's bytes lie in one piece, one gather for all of those that do not. When there
is no direct socket (another node's mount, an old daemon, a container without the socket, no
libptcfs_client) or the caller runs as another uid, the same calls read through the mount,
so user code has one API (``File.direct`` says which path it took, ``File.why_not`` why).
``PTCFS_DIRECT=0`` in the environment always reads through the mount.

Lifetime: the daemon keeps the file's version, and every array that is a view keeps the mapping,
for as long as the File or any such array lives; ``close()`` lets go of the File's own reference.
The tensors gathered from strided pieces share one buffer, freed with the last of them. Arrays are
read-only, like those of a mapping of the mount (``np.array(a)`` for a copy to write).
"""

import builtins
import ctypes
import io
import mmap
import os
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import _native
from . import dtypes as _dt
from .formats import safetensors as _st
from .errors import Error, invalid

__all__ = ["open", "File", "library", "gpu_available"]

_ERRLEN = _native.ERRLEN
DeviceStats = _native.DeviceStats


def library():
    """libptcfs_client loaded with ctypes (PTCFS_CLIENT_LIB, the package's own, the build folder, or
    the system's), or None with the reason in ``library_error()`` (ptcfs._native)."""
    return _native.load()


# A bytes object of n bytes, not yet written: filled in place before anyone else sees it (as
# CPython's own os.read and file reads fill theirs), so that read_range neither zero-fills nor copies
# twice. n == 0 gives the shared empty bytes, which must not be written.
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]


def gpu_available() -> Tuple[bool, str]:
    """(True, "") when libptcfs_client can copy files into GPU memory, else (False, why not):
    no library, a library built without CUDA, no driver, or no GPU."""
    lib = library()
    if lib is None:
        return False, library_error()
    if not _native.has(lib, "ptcfs_read_device"):
        return False, "this libptcfs_client has no GPU path (rebuild it)"
    err = ctypes.create_string_buffer(_ERRLEN)
    if lib.ptcfs_gpu_available(err, _ERRLEN) != 0:
        return False, err.value.decode("utf-8", "replace")
    return True, ""


def library_error() -> str:
    return _native.load_error()


_error = _native.error


class _Handle:
    """One open file of libptcfs_client: closed (the daemon lets the version go, the mappings
    are unmapped) when the last File or array referring to it is gone."""

    def __init__(self, lib, ptr: int):
        self.lib, self.ptr = lib, ptr

    def __del__(self):
        if self.ptr:
            self.lib.ptcfs_close(self.ptr)
            self.ptr = 0


class File:
    """A file of the mount, read directly or (``direct`` False) through the mount."""

    def __init__(self, path: str, handle: Optional[_Handle], why_not: str = ""):
        self.path = path
        self._h = handle
        self.direct = handle is not None
        self.why_not = why_not
        self._mapped = None  # the mount's mapping of the file, when read through the mount
        self._maps: Optional[List[Optional[np.ndarray]]] = None  # the direct path's mappings, as arrays
        self._dtypes: Dict[str, str] = {}
        self.gpu_stats: Optional[Dict[str, int]] = None  # of the last torch(device="cuda...")
        self.gpu_why_not = ""  # why the last torch(device="cuda...") copied through the host
        self.gathered: List[str] = []  # the tensors the last tensors() copied (strided), by name
        if handle is not None:
            self.size = int(handle.lib.ptcfs_size(handle.ptr))
            self.version = int(handle.lib.ptcfs_version(handle.ptr))
        else:
            self.size = os.stat(path).st_size
            self.version = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Drops this File's hold; arrays taken from it keep theirs."""
        self._h = None
        self._mapped = None
        self._maps = None

    def _handle(self) -> _Handle:
        if self._h is None:
            raise Error("failed_precondition", f"{self.path}: the file is closed")
        return self._h

    def _mount_buffer(self):
        if self._mapped is None:
            with builtins.open(self.path, "rb") as f:
                try:
                    self._mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if self.size else b""
                except (OSError, ValueError):
                    self._mapped = f.read()
        return self._mapped

    def _view(self, off: int, n: int) -> Optional[memoryview]:
        """Bytes [off, off + n) without a copy, when they lie in one piece."""
        if n == 0:
            return memoryview(b"")
        if not self.direct:
            return memoryview(self._mount_buffer())[off:off + n]
        h = self._handle()
        ptr = h.lib.ptcfs_contiguous(h.ptr, off, n)
        if not ptr:
            return None
        buf = (ctypes.c_char * n).from_address(ptr)
        buf._ptcfs_handle = h  # the mapping lives as long as any view of it
        return memoryview(buf).cast("B")

    def read_range(self, off: int, n: int) -> bytes:
        """A copy of bytes [off, off + n)."""
        if off < 0 or n < 0 or off + n > self.size:
            raise Error("out_of_range", f"{self.path}: bytes [{off}, {off + n}) of a {self.size}-byte file")
        if not self.direct:
            return bytes(self._mount_buffer()[off:off + n])
        h = self._handle()
        if n == 0:
            return b""
        out = _new_bytes(None, n)  # uninitialised: ptcfs_read writes every byte of it
        err = ctypes.create_string_buffer(_ERRLEN)
        if h.lib.ptcfs_read(h.ptr, off, n, out, err, _ERRLEN) != 0:
            raise _error(err)
        return out

    def read(self):
        """The file's bytes: a memoryview of the mapping when the file is one piece, else bytes."""
        v = self._view(0, self.size)
        return v if v is not None else self.read_range(0, self.size)

    def _array(self, off: int, n: int, dtype: np.dtype, shape) -> np.ndarray:
        """A tensor read through the mount: a view of the mount's mapping of the file."""
        a = np.frombuffer(self._view(off, n), dtype=dtype, count=n // dtype.itemsize).reshape(shape)
        a.flags.writeable = False  # like the direct path's arrays
        return a

    def _entries(self) -> List[Tuple[str, str, np.dtype, tuple, int, int]]:
        """[(name, safetensors dtype, numpy dtype, shape, offset, bytes)] of the file's tensors, by name: every
        tensor of a safetensors file, or the one of an npy file (named after the file)."""
        if self.path.endswith(".safetensors"):
            head = self.read_range(0, min(self.size, 8))
            if len(head) < 8:
                raise invalid(f"{self.path}: {self.size} bytes is shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > _st.MAX_HEADER or 8 + n > self.size:
                raise invalid(f"{self.path}: header length {n} does not fit the file ({self.size} bytes)")
            start, entries, _ = _st.parse_header(self.read_range(0, 8 + n), self.size, self.path)
            np_dtype = _dt.NUMPY  # parse_header has checked every dtype is one of these
            return [(name, dtype, np_dtype[dtype], shape, start + b, e - b)
                    for name, (dtype, shape, b, e) in ((name, entries[name]) for name in sorted(entries))]
        if self.path.endswith(".npy"):
            fh = io.BytesIO(self.read_range(0, min(self.size, 1 << 16)))
            try:  # numpy's own reader of the header
                version = np.lib.format.read_magic(fh)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(fh)
            except ValueError as e:
                raise invalid(f"{self.path}: bad npy header: {e}") from None
            if fortran:
                raise invalid(f"{self.path}: Fortran-ordered npy files are not read here")
            start = fh.tell()
            name = os.path.basename(self.path)[:-4]
            n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if start + n != self.size:
                raise invalid(f"{self.path}: npy header gives {n} bytes of data, the file has {self.size - start}")
            return [(name, _dt.safetensors_dtype_of(np.empty(0, dtype=dtype)), dtype, tuple(shape), start, n)]
        raise invalid(f"{self.path}: not a tensor file (.safetensors or .npy)")

    def tensors(self) -> Dict[str, np.ndarray]:
        """{name: array} of a safetensors file (every tensor) or an npy file (one, named after the
        file); zero-copy where a tensor lies in one piece, the others (a repartition left them
        strided) gathered into one buffer they share (``gathered`` names them). Read-only. BF16
        comes as uint16 raw bits."""
        entries = self._entries()
        self._dtypes = {name: dtype for name, dtype, _, _, _, _ in entries if self.path.endswith(".safetensors")}
        if self.direct:
            return self._direct_arrays(entries)
        return {name: self._array(off, n, npd, shape) for name, _, npd, shape, off, n in entries}

    def _mappings(self, h: _Handle) -> List[Optional[np.ndarray]]:
        """A read-only uint8 array over each file the daemon passed, mapped whole (None: empty);
        arrays sliced from them keep the handle, and so the mappings and the version, alive. Kept
        by the File, not the handle: the handle must not keep itself alive."""
        maps = self._maps
        if maps is None:
            maps = []
            data, size = ctypes.c_void_p(), ctypes.c_uint64()
            for i in range(h.lib.ptcfs_mapping_count(h.ptr)):
                if h.lib.ptcfs_mapping(h.ptr, i, ctypes.byref(data), ctypes.byref(size)) != 0 or not data.value:
                    maps.append(None)
                    continue
                buf = (ctypes.c_char * size.value).from_address(data.value)
                buf._ptcfs_handle = h
                a = np.frombuffer(buf, dtype=np.uint8)
                a.flags.writeable = False
                maps.append(a)
            self._maps = maps
        return maps

    def _direct_arrays(self, entries) -> Dict[str, np.ndarray]:
        """The arrays of `entries` with two calls into libptcfs_client for all of them: where each
        lies (ptcfs_locate), then one gather of those that do not lie in one piece into one new
        buffer (ptcfs_read_many, which walks the map's rows in C++ and populates the buffer's pages
        a chunk at a time rather than faulting them in one by one)."""
        h = self._handle()
        k = len(entries)
        offs = np.fromiter((e[4] for e in entries), dtype=np.uint64, count=k)
        lens = np.fromiter((e[5] for e in entries), dtype=np.uint64, count=k)
        where, at = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.uint64)
        err = ctypes.create_string_buffer(_ERRLEN)
        if k and h.lib.ptcfs_locate(h.ptr, k, offs.ctypes.data, lens.ctypes.data, where.ctypes.data, at.ctypes.data,
                                    err, _ERRLEN) != 0:
            raise _error(err)
        maps = self._mappings(h)
        where_l, at_l = where.tolist(), at.tolist()
        gather = [i for i, m in enumerate(where_l) if m < 0 and entries[i][5]]
        self.gathered = [entries[i][0] for i in gather]
        block = None
        if gather:
            # One buffer for them all, each tensor at a multiple of 64 bytes: they live as long as
            # the last of them (as views of a mapping keep the whole mapping).
            idx = np.array(gather, dtype=np.intp)
            g_len = lens[idx]
            pos = np.zeros(len(gather), dtype=np.uint64)
            np.cumsum((g_len[:-1] + 63) & ~np.uint64(63), out=pos[1:])
            block = np.empty(int(pos[-1] + g_len[-1]), dtype=np.uint8)
            dst = pos + np.uint64(block.ctypes.data)
            g_off = offs[idx]  # fancy indexing: fresh and contiguous
            if h.lib.ptcfs_read_many(h.ptr, len(gather), g_off.ctypes.data, g_len.ctypes.data, dst.ctypes.data,
                                     err, _ERRLEN) != 0:
                raise _error(err)
            block.flags.writeable = False  # like a mapping of the mount, whichever way it came
            for i, p in zip(gather, pos.tolist()):
                where_l[i], at_l[i] = -2, p
        ndarray = np.ndarray
        out = {}
        for (name, _, npd, shape, _, _), m, a in zip(entries, where_l, at_l):
            if m >= 0:  # a view of the mapping, read-only as the mapping's array is
                out[name] = ndarray(shape, npd, maps[m], a)
            elif m == -2:  # gathered
                out[name] = ndarray(shape, npd, block, a)
            else:  # no bytes
                out[name] = arr = np.empty(shape, dtype=npd)
                arr.flags.writeable = False
        return out

    def dtype_of(self, name: str) -> Optional[str]:
        """The stored dtype of a tensor tensors() gave (the safetensors name: "BF16", "F32"...)."""
        return self._dtypes.get(name)

    def torch(self, device=None):
        """{name: torch tensor}. On the CPU (device None or "cpu") they share the arrays of
        tensors() (BF16 as torch.bfloat16). On a CUDA device (device="cuda:N") the bytes go from
        the daemon's blobs to device memory through pinned staging, strided tensors gathered on the
        GPU (``gpu_stats`` says how); without the direct path or a GPU-capable libptcfs_client the
        tensors are read on the host and copied up (``gpu_why_not`` says why)."""
        import torch
        dev = torch.device(device) if device is not None else torch.device("cpu")
        if dev.type == "cpu":
            arrays = self.tensors()
            return {name: _dt.to_torch(a, self._dtypes.get(name)) for name, a in arrays.items()}
        if dev.type != "cuda":
            raise invalid(f"{self.path}: device {dev} is neither cpu nor cuda")
        ok, why = gpu_available() if self.direct else (False, self.why_not or "not read through the direct path")
        self.gpu_why_not = why
        if not ok:
            return {name: t.to(dev) for name, t in self.torch().items()}
        return self._torch_on_device(dev)

    def _torch_on_device(self, dev):
        import torch
        entries = self._entries()
        self._dtypes = {name: dtype for name, dtype, _, _, _, _ in entries}
        out = {}
        if not entries:
            return out
        # One copy of the whole data region, views of it per tensor: the copies of all tensors
        # pipeline in one call. A tensor whose offset is not a multiple of its item size gets its own.
        lo = min(off for *_, off, _ in entries)
        hi = max(off + n for *_, off, n in entries)
        buf = torch.empty(hi - lo, dtype=torch.uint8, device=dev)
        self.gpu_stats = self._read_device(lo, hi - lo, buf)
        for name, dtype, npd, shape, off, n in entries:
            if dtype is None:
                raise invalid(f"{self.path}: {name} has dtype {npd}, which ptcfs does not store")
            tdtype = _dt.torch_dtype(dtype)
            size = npd.itemsize
            if (off - lo) % size == 0:
                out[name] = buf[off - lo:off - lo + n].view(tdtype).view(shape)
            else:
                own = torch.empty(n, dtype=torch.uint8, device=dev)
                self._read_device(off, n, own)
                out[name] = own.view(tdtype).view(shape)
        return out

    def _read_device(self, off: int, n: int, dst) -> Dict[str, int]:
        """Bytes [off, off + n) into the CUDA tensor `dst` (uint8, contiguous), on its device's
        current stream; returns the copy's DeviceStats as a dict."""
        import torch
        h = self._handle()
        stats = DeviceStats()
        err = ctypes.create_string_buffer(_ERRLEN)
        stream = torch.cuda.current_stream(dst.device).cuda_stream
        if n and h.lib.ptcfs_read_device(h.ptr, off, n, dst.data_ptr(), stream, ctypes.byref(stats), err, _ERRLEN):
            raise _error(err)
        return stats.as_dict()


def open(path: str, socket: Optional[str] = None, fallback: bool = True) -> File:  # noqa: A001
    """Opens a file of a ptcfs mount through the direct socket; with `fallback` (the default),
    through the mount when the direct path is not there (``File.why_not`` says why)."""
    path = os.path.abspath(path)
    lib = library()
    why = ""
    if os.environ.get("PTCFS_DIRECT") == "0":
        lib, why = None, "PTCFS_DIRECT=0"
    elif lib is None:
        why = library_error()
    else:
        err = ctypes.create_string_buffer(_ERRLEN)
        ptr = lib.ptcfs_open(path.encode(), (socket or "").encode(), err, _ERRLEN)
        if ptr:
            return File(path, _Handle(lib, ptr))
        e = _error(err)
        # Errors about the file itself stand; the lack of a direct path falls back.
        if e.code not in ("unavailable", "permission_denied", "resource_exhausted") or not fallback:
            raise e
        why = str(e)
    if not fallback:
        raise Error("unavailable", f"{path}: no direct path: {why}")
    if not os.path.exists(path):
        raise Error("not_found", f"{path}: no such file")
    if os.path.isdir(path):
        raise invalid(f"{path} is a folder, not a file")
    return File(path, None, why)
