"""libptcfs_client through ctypes: where it is found, and one table of every C entry it exports,
mirroring client/ptcfs_client.h. ptcfs.direct (files through the direct socket) and ptcfs.live
(live reshard plans, the NCCL communicator) both load it from here. An entry a library of an
older build lacks is left untyped; ``has`` says which it has."""

import ctypes
import ctypes.util
import os
import threading
from typing import Optional

from .errors import Error

ERRLEN = 1024  # every entry's error buffer: "code: message"

_c = ctypes
_file, _u64, _size, _int, _str, _ptr = _c.c_void_p, _c.c_uint64, _c.c_size_t, _c.c_int, _c.c_char_p, _c.c_void_p


class DeviceStats(ctypes.Structure):
    """How a copy into GPU memory went (client/ptcfs_client.h ptcfs_device_stats)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "staged_bytes", "zero_bytes", "chunks", "direct_chunks", "gathered_chunks",
        "plan_ns", "stage_ns", "wait_ns", "total_ns")]

    def as_dict(self):
        return {name: int(getattr(self, name)) for name, _ in self._fields_}


class P2POp(ctypes.Structure):
    """One send or receive of ptcfs_nccl_exchange (client/ptcfs_client.h ptcfs_p2p_op)."""
    _fields_ = [("peer", ctypes.c_int), ("send", ctypes.c_int), ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_uint64)]


# name: (restype, argtypes), in the header's order.
ENTRIES = {
    # A file through the direct socket.
    "ptcfs_open": (_file, [_str, _str, _str, _size]),
    "ptcfs_close": (None, [_file]),
    "ptcfs_size": (_u64, [_file]),
    "ptcfs_version": (_u64, [_file]),
    "ptcfs_span_count": (_size, [_file]),
    "ptcfs_span": (_int, [_file, _size, _c.POINTER(_ptr), _c.POINTER(_u64)]),
    "ptcfs_contiguous": (_ptr, [_file, _u64, _u64]),
    "ptcfs_read": (_int, [_file, _u64, _u64, _ptr, _str, _size]),
    "ptcfs_mapping_count": (_size, [_file]),
    "ptcfs_mapping": (_int, [_file, _size, _c.POINTER(_ptr), _c.POINTER(_u64)]),
    "ptcfs_locate": (_int, [_file, _size, _ptr, _ptr, _ptr, _ptr, _str, _size]),
    "ptcfs_read_many": (_int, [_file, _size, _ptr, _ptr, _ptr, _str, _size]),
    # The GPU path (a library built without CUDA says why it cannot copy).
    "ptcfs_gpu_available": (_int, [_str, _size]),
    "ptcfs_read_device": (_int, [_file, _u64, _u64, _ptr, _ptr, _c.POINTER(DeviceStats), _str, _size]),
    # Live reshard plans.
    "ptcfs_live_plan": (_ptr, [_str, _str, _str, _str, _size]),
    "ptcfs_free": (None, [_ptr]),
    # The NCCL communicator (NCCL itself is loaded when first used).
    "ptcfs_nccl_version": (_int, [_str, _size]),
    "ptcfs_nccl_unique_id": (_int, [_str, _str, _size]),
    "ptcfs_nccl_open": (_ptr, [_int, _int, _str, _int, _str, _size]),
    "ptcfs_nccl_exchange": (_int, [_ptr, _c.POINTER(P2POp), _size, _ptr, _u64, _str, _size]),
    "ptcfs_nccl_close": (None, [_ptr]),
}
# Entries of before which the library is refused (it must be rebuilt).
_REQUIRED = "ptcfs_read_many"

_LIB = None
_LIB_ERROR = ""
_LOCK = threading.Lock()


def _candidates():
    """Where libptcfs_client may be, in order: PTCFS_CLIENT_LIB; inside the package (a pip install,
    pyproject.toml: every folder of the package's path, which an editable install extends); the
    build folder of a source tree (PTCFS_BUILD, else <repo>/build); the system's."""
    env = os.environ.get("PTCFS_CLIENT_LIB")
    if env:
        yield env
    from . import __path__ as package_dirs
    for d in package_dirs:
        yield os.path.join(d, "libptcfs_client.so")
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("PTCFS_BUILD") or os.path.join(here, "..", "..", "build")
    yield os.path.join(build, "client", "libptcfs_client.so")
    found = ctypes.util.find_library("ptcfs_client")
    if found:
        yield found


def load() -> Optional[ctypes.CDLL]:
    """The library with every entry of ENTRIES it has typed, or None with the reason in
    ``load_error()``."""
    global _LIB, _LIB_ERROR
    with _LOCK:
        if _LIB is not None or _LIB_ERROR:
            return _LIB
        for path in _candidates():
            if not os.path.exists(path) and "/" in path:
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                _LIB_ERROR = f"{path}: {e}"
                continue
            if not hasattr(lib, _REQUIRED):
                _LIB_ERROR = f"{path}: a libptcfs_client of before {_REQUIRED} (rebuild it)"
                continue
            for name, (restype, argtypes) in ENTRIES.items():
                if hasattr(lib, name):
                    fn = getattr(lib, name)
                    fn.restype = restype if restype is not None else None
                    fn.argtypes = argtypes
            _LIB, _LIB_ERROR = lib, ""
            return lib
        _LIB_ERROR = _LIB_ERROR or ("libptcfs_client.so not found (pip install the package, build the project, "
                                    "or set PTCFS_CLIENT_LIB)")
        return None


def load_error() -> str:
    load()
    return _LIB_ERROR


def has(lib: ctypes.CDLL, name: str) -> bool:
    """Whether the loaded library exports entry `name` (one of ENTRIES)."""
    return hasattr(lib, name)


def error(buf) -> Error:
    """The Error of an entry's error buffer ("code: message")."""
    text = buf.value.decode("utf-8", "replace")
    code, _, message = text.partition(": ")
    return Error(code or "internal", message or text)
