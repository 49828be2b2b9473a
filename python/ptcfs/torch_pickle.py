"""Loading torch checkpoint files without running code from them.

A Megatron-LM checkpoint is a torch pickle that holds more than tensors (the run's
``argparse.Namespace``, numpy RNG states, enums of Megatron's own modules), so torch's
``weights_only=True`` refuses it, and ``weights_only=False`` lets the file call anything. This
loader is between the two: tensors, containers, numpy arrays and ``Namespace`` are rebuilt for
real; any other class named in the file becomes an inert :class:`Opaque` placeholder that
records its name and arguments, and no function outside the allowlist is ever called.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import types
from typing import Any, Dict, Tuple

# (module, name) -> object: what a checkpoint may construct for real. Tensor rebuilders,
# containers and plain data; nothing that evaluates, imports or touches files.
_TORCH_NAMES = ("_utils._rebuild_tensor", "_utils._rebuild_tensor_v2", "_utils._rebuild_parameter",
                "_utils._rebuild_parameter_with_state", "_tensor._rebuild_from_type_v2", "Tensor",
                "nn.parameter.Parameter", "Size")


def _allowed() -> Dict[Tuple[str, str], Any]:
    import numpy as np
    import torch

    out: Dict[Tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("argparse", "Namespace"): argparse.Namespace,
        ("copyreg", "_reconstructor"): _reconstructor,
        ("codecs", "encode"): _codecs_encode, ("_codecs", "encode"): _codecs_encode,
        ("numpy", "dtype"): np.dtype, ("numpy", "ndarray"): np.ndarray,
    }
    for mod in ("builtins", "__builtin__"):  # (protocol 2 names Python 2's module)
        for value in (set, frozenset, slice, bytearray, complex):
            out[(mod, value.__name__)] = value
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out[(mod, "_reconstruct")] = np.core.multiarray._reconstruct
        out[(mod, "scalar")] = np.core.multiarray.scalar
    for path in _TORCH_NAMES:
        obj: Any = torch
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            mod, _, name = ("torch." + path).rpartition(".")
            out[(mod, name)] = obj
    for name in dir(torch):
        if isinstance(getattr(torch, name, None), torch.dtype):
            out[("torch", name)] = getattr(torch, name)
    return out


def _codecs_encode(text: str, encoding: str = "latin1") -> bytes:
    # How protocol-2 pickles written by Python 3 store bytes; only the latin1 form occurs.
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"codecs.encode({type(text).__name__}, {encoding!r}) is not a bytes literal")
    return text.encode("latin1")


class Opaque:
    """A stand-in for a class the loader does not construct: keeps the name, the arguments it
    was called with and the state it was given, and does nothing else."""

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
        return f"<opaque {self.__ptcfs_name__}{self.args!r}>"


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    # copyreg's helper for objects pickled with protocol < 2: only for classes we build.
    if base is object and isinstance(cls, type) and (issubclass(cls, Opaque) or cls is argparse.Namespace):
        return cls.__new__(cls)
    raise pickle.UnpicklingError(f"refusing to reconstruct {cls!r}")


class _Unpickler(pickle.Unpickler):
    _opaque: Dict[Tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        allowed = _allowed_cache()
        if (module, name) in allowed:
            return allowed[(module, name)]
        key = (module, name)
        if key not in self._opaque:
            self._opaque[key] = type(name, (Opaque,), {"__ptcfs_name__": f"{module}.{name}",
                                                       "__module__": "ptcfs.torch_pickle.opaque"})
        return self._opaque[key]


_ALLOWED: Dict[Tuple[str, str], Any] = {}


def _allowed_cache() -> Dict[Tuple[str, str], Any]:
    if not _ALLOWED:
        _ALLOWED.update(_allowed())
    return _ALLOWED


# What torch.load takes as pickle_module: it subclasses .Unpickler and calls .load on files in
# the legacy (pre-zip) format.
restricted_pickle = types.SimpleNamespace(
    __name__="ptcfs.torch_pickle.restricted_pickle",
    Unpickler=_Unpickler,
    load=lambda f, **kw: _Unpickler(f, **kw).load(),
)


def load(path: str) -> Any:
    """The object in a torch checkpoint file (the zip format torch writes since 1.6), tensors
    on the CPU, built without calling anything the allowlist does not name. torch is imported
    here. (torch 1.x's torch.load ignores pickle_module unless weights_only is set, so there
    the zip archive goes to torch.serialization._load, which torch.load itself calls.)"""
    import torch
    if int(torch.__version__.split(".")[0]) >= 2:
        return torch.load(path, map_location="cpu", pickle_module=restricted_pickle, weights_only=False)
    with open(path, "rb") as f:
        if not torch.serialization._is_zipfile(f):
            raise pickle.UnpicklingError("not a torch zip checkpoint (files of torch < 1.6 are not read)")
    with torch.serialization._open_zipfile_reader(path) as z:
        return torch.serialization._load(z, "cpu", restricted_pickle, encoding="utf-8")
