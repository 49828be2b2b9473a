"""ptcfs: what a training process uses of ptcfs (the mount's files and the daemon's control
protocol). numpy is required; torch is optional and imported only where a function takes or
gives torch tensors. See docs/PYTHON.md."""

from .errors import Error
from . import dtypes, safetensors, ptc, megatron, checkpoint, control, elastic, planner, direct, live
from .checkpoint import load_full, load_ptc, load_shard, save_ptc, save_shard, save_tensor_range, shard_file, step_dir
from .control import Client, connect
from .elastic import ensure_layout, record_dataset_progress, wait_committed
from .megatron import infer_megatron
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
           "direct", "live", "dtypes", "safetensors", "ptc", "megatron", "checkpoint", "control", "elastic", "__version__"]
