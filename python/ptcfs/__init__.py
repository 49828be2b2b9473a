"""ptcfs: what a training process uses of ptcfs (the mount's files and the daemon's control
protocol). numpy is required; torch is optional and imported only where a function takes or
gives torch tensors. See docs/PYTHON.md."""

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys

# The package by audience (docs/PYTHON.md "Modules"): what a training process calls (checkpoint,
# direct, live, elastic, data, dcp) at the top; file formats and importers under ptcfs.formats;
# the daemon's client (control) and the planner beside them. The modules that moved keep their old
# names as aliases of the same module objects, so that `import ptcfs.safetensors` and
# `from ptcfs.torch_pickle import ...` go on working.
_MOVED = {
    "ptcfs.safetensors": "ptcfs.formats.safetensors",
    "ptcfs.torch_zip": "ptcfs.formats.torch_zip",
    "ptcfs.torch_pickle": "ptcfs.formats.torch_pickle",
    "ptcfs.megatron": "ptcfs.formats.megatron",
    "ptcfs.megatron_ckpt": "ptcfs.formats.megatron.checkpoint",
    "ptcfs.megatron_shapes": "ptcfs.formats.megatron.shapes",
}


class _MovedModules(_abc.MetaPathFinder, _abc.Loader):
    """Imports an old name as the module it moved to (one module object under both names)."""

    def find_spec(self, name, path=None, target=None):
        return _util.spec_from_loader(name, self) if name in _MOVED else None

    def create_module(self, spec):
        return _importlib.import_module(_MOVED[spec.name])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _MovedModules) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _MovedModules())

from .errors import Error
from . import dtypes, ptc, checkpoint, control, elastic, planner, direct, live, formats
from .formats import safetensors, megatron
from .checkpoint import load_full, load_ptc, load_shard, save_ptc, save_shard, save_tensor_range, shard_file, step_dir
from .control import Client, connect
from .elastic import ensure_layout, record_dataset_progress, wait_committed
from .formats.megatron import infer_megatron
from .ptc import gather, shard_tensors, split
from .dtypes import to_torch
from .planner import plan

def _version() -> str:
    """The package's version: the one an installed wheel was built with (pyproject.toml writes
    _version.py from CMakeLists.txt), else, run from the source tree, CMakeLists.txt's own."""
    try:
        from ._version import __version__ as v
        return v
    except ImportError:
        import os
        import re
        top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")
        try:
            with open(top) as f:
                return re.search(r"project\(ptcfs VERSION ([0-9.]+)", f.read()).group(1)
        except (OSError, AttributeError):
            return "0+unknown"


__version__ = _version()

__all__ = ["Error", "Client", "connect", "ensure_layout", "record_dataset_progress", "plan", "planner", "wait_committed", "infer_megatron", "split", "gather",
           "shard_tensors", "to_torch", "save_shard", "save_tensor_range", "save_ptc", "load_shard", "load_full", "load_ptc", "shard_file", "step_dir",
           "direct", "live", "dtypes", "safetensors", "ptc", "megatron", "checkpoint", "control", "elastic", "formats",
           "__version__"]
