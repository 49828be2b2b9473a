"""safetensors dtype names and the numpy dtypes that hold them.

numpy has no bfloat16 or float8, so those are held as their raw bits (BF16 as ``<u2``,
F8_E4M3 and F8_E5M2 as ``|u1``), exactly as the mount's .npy views show them. torch 2.x has
them all: ``to_torch`` gives torch.bfloat16, torch.float8_e4m3fn and torch.float8_e5m2 tensors
over the same bytes, and torch.uint16/uint32/uint64 tensors are stored as U16/U32/U64.
A numpy uint16 array given without a dtype is taken as BF16 bits, as before U16 existed.
"""

from typing import Any, Dict, Optional

import numpy as np

from .errors import invalid

NUMPY: Dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E5M2": np.dtype("u1"),
    "U16": np.dtype("<u2"),
    "U32": np.dtype("<u4"),
    "U64": np.dtype("<u8"),
}

# Held as raw bits: any unsigned or signed integer array of the right width is accepted.
RAW_BITS = ("BF16", "F8_E4M3", "F8_E5M2")

# numpy dtype -> safetensors name, for arrays that say what they are.
_FROM_NUMPY = {np.dtype(v).newbyteorder("=").str.lstrip("<>|="): k for k, v in NUMPY.items()
               if k not in RAW_BITS and k != "U16"}


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that holds a safetensors dtype (BF16: uint16 raw bits)."""
    try:
        return NUMPY[dtype]
    except KeyError:
        raise invalid(f"unknown dtype {dtype!r} (expected one of {' '.join(NUMPY)})") from None


def itemsize(dtype: str) -> int:
    return numpy_dtype(dtype).itemsize


def is_torch(x: Any) -> bool:
    """True for a torch.Tensor, without importing torch when the caller never did."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_to_numpy(x: Any):
    """(numpy array, safetensors dtype or None) of a torch tensor, zero-copy for a contiguous
    CPU tensor. bfloat16 and float8 become their raw bits and say BF16 or F8_*; torch's unsigned
    types say U16, U32, U64."""
    import torch
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    raw = {torch.bfloat16: (torch.int16, np.uint16, "BF16")}
    for name, st in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
        if hasattr(torch, name):
            raw[getattr(torch, name)] = (torch.uint8, np.uint8, st)
    if t.dtype in raw:
        # Reinterpret the bits through a type torch and numpy share (int16: torch.uint16 tensors
        # reach numpy only from torch 2.3 on).
        via, np_type, name = raw[t.dtype]
        return t.contiguous().view(via).numpy().view(np_type), name
    unsigned = {getattr(torch, n, None): n.upper().replace("INT", "") for n in ("uint16", "uint32", "uint64")}
    if t.dtype in unsigned and t.dtype is not None:
        bits = {"U16": (torch.int16, np.uint16), "U32": (torch.int32, np.uint32), "U64": (torch.int64, np.uint64)}
        via, np_type = bits[unsigned[t.dtype]]
        return t.contiguous().view(via).numpy().view(np_type), unsigned[t.dtype]
    return t.numpy(), None


def safetensors_dtype_of(arr: np.ndarray) -> Optional[str]:
    """The safetensors dtype a numpy array holds, or None when it is ambiguous (uint16
    could be BF16 bits; uint8 could be U8 or F8 bits) or unsupported."""
    key = arr.dtype.newbyteorder("=").str.lstrip("<>|=")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 2:
        return "BF16"  # numpy has no uint16 safetensors type other than BF16 bits
    return _FROM_NUMPY.get(key)


def check_storage(x: Any, dtype: Optional[str], where: str):
    """(numpy array, safetensors dtype) that `x` is stored as, checked without copying.

    `x` is a numpy array or a torch tensor (bfloat16 comes as its uint16 bits); `dtype` the
    safetensors dtype it must be stored as (None: inferred from the array). No value is
    converted: an array of another type is an error naming `where`, so a float64 never lands
    silently in an F32 slot."""
    given = None
    if is_torch(x):
        x, given = torch_to_numpy(x)
    a = np.asarray(x)
    if dtype is None:
        dtype = given or safetensors_dtype_of(a)
        if dtype is None:
            raise invalid(f"{where}: cannot store numpy dtype {a.dtype} (give its safetensors dtype)")
    want = numpy_dtype(dtype)
    if given is not None and given != dtype:
        raise invalid(f"{where}: a {given} tensor cannot be stored as {dtype}")
    if dtype in RAW_BITS:
        ok = a.dtype.kind in "ui" and a.dtype.itemsize == want.itemsize
    else:
        ok = a.dtype.kind == want.kind and a.dtype.itemsize == want.itemsize
    if not ok:
        raise invalid(f"{where}: array of dtype {a.dtype} does not hold {dtype} "
                      f"(want {want}{' raw bits' if dtype in RAW_BITS else ''})")
    return a, dtype


def storage_array(a: np.ndarray, dtype: str) -> np.ndarray:
    """The C-contiguous little-endian array of a checked array's bytes, as numpy_dtype(dtype);
    no copy when it already is one."""
    want = numpy_dtype(dtype)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
        a = a.astype(a.dtype.newbyteorder("<"))  # the file is little-endian
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # (np.ascontiguousarray would turn a scalar into shape (1,))
    return a.view(want)


def as_storage(x: Any, dtype: Optional[str], where: str):
    """(C-contiguous little-endian array, safetensors dtype): check_storage then storage_array."""
    a, dt = check_storage(x, dtype, where)
    return storage_array(a, dt), dt


_TORCH = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
          "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32",
          "U64": "uint64"}


def torch_dtype(dtype: str):
    """The torch dtype of a safetensors dtype (an error where this torch has none, e.g. F8)."""
    import torch
    t = getattr(torch, _TORCH.get(dtype, ""), None)
    if t is None:
        raise invalid(f"torch {torch.__version__} has no dtype for {dtype!r}")
    return t


def to_torch(arr: np.ndarray, dtype: Optional[str] = None):
    """A torch tensor sharing `arr`'s memory. With dtype "BF16" (or a uint16 array and no
    dtype) the raw bits become torch.bfloat16; with F8_E4M3 or F8_E5M2, torch's float8 type; with
    U16, U32 or U64, torch's unsigned type. A read-only array (a mapping of the mount) gives a
    tensor that must not be written: torch warns once about that; we silence it because reading
    such a tensor is the point."""
    import warnings

    import torch
    if dtype is None and arr.dtype == np.uint16:
        dtype = "BF16"
    # Types torch.from_numpy cannot take: their bits through a same-width signed type, then a view.
    via = {"BF16": np.int16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "U16": np.int16, "U32": np.int32,
           "U64": np.int64}.get(dtype or "")
    want = torch_dtype(dtype) if via is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(arr.view(via) if via is not None else arr)
    return t.view(want) if want is not None else t
