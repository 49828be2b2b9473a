"""safetensors dtype names and the numpy dtypes that hold them.

numpy has no bfloat16 or float8, so those are held as their raw bits (BF16 as ``<u2``,
F8_E4M3 and F8_E5M2 as ``|u1``), exactly as the mount's .npy views show them.
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
}

# Held as raw bits: any unsigned or signed integer array of the right width is accepted.
RAW_BITS = ("BF16", "F8_E4M3", "F8_E5M2")

# numpy dtype -> safetensors name, for arrays that say what they are.
_FROM_NUMPY = {np.dtype(v).newbyteorder("=").str.lstrip("<>|="): k for k, v in NUMPY.items() if k not in RAW_BITS}


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
    """(numpy array, safetensors dtype or None) of a torch tensor, zero-copy for a CPU tensor.
    bfloat16 becomes its uint16 raw bits and says BF16."""
    import torch
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        # torch 1.13 has no uint16: view as int16, then reinterpret the bits in numpy.
        return t.contiguous().view(torch.int16).numpy().view(np.uint16), "BF16"
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
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def torch_dtype(dtype: str):
    """The torch dtype of a safetensors dtype (an error where this torch has none, e.g. F8)."""
    import torch
    t = getattr(torch, _TORCH.get(dtype, ""), None)
    if t is None:
        raise invalid(f"torch {torch.__version__} has no dtype for {dtype!r}")
    return t


def to_torch(arr: np.ndarray, dtype: Optional[str] = None):
    """A torch tensor sharing `arr`'s memory. With dtype "BF16" (or a uint16 array and no
    dtype) the raw bits become torch.bfloat16. A read-only array (a mapping of the mount)
    gives a tensor that must not be written: torch warns once about that; we silence it
    because reading such a tensor is the point."""
    import warnings

    import torch
    if dtype in ("F8_E4M3", "F8_E5M2"):
        raise invalid(f"torch {torch.__version__} has no {dtype}; use the uint8 raw bits")
    bf16 = dtype == "BF16" or (dtype is None and arr.dtype == np.uint16)
    src = arr.view(np.int16) if bf16 else arr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(src)
    return t.view(torch.bfloat16) if bf16 else t
