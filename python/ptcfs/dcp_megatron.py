"""Megatron-Core ``torch_dist`` checkpoint directories, as ``megatron.core.dist_checkpointing.save``
writes them (docs/DCP-ON-DISK.md §7, docs/FORMATS.md "Distributed Checkpoint"): a DCP directory
(``.metadata``, ``__<rank>_<i>.distcp``; Megatron's sharded keys are its names, a ShardedObject a
bytes item ``<key>/shard_<offsets>_<shape>``) plus two files of its own:

* ``metadata.json``, Megatron's CheckpointingConfig, written last (its "checkpoint complete"
  mark): parsed as JSON of at most MAX_JSON_BYTES, its members exactly the config's, and it must
  say ``sharded_backend`` ``torch_dist`` (version 1) with ``common_backend`` ``torch``;
* ``common.pt``, the ``torch.save`` of the non-sharded state (iteration, args, optimizer param
  groups): checked to be a torch.save archive (ptcfs.torch_zip: no compressed or oversized member)
  and kept as its bytes, never unpickled here.

Both are kept in the step as U8 tensors under ``__dcp__/megatron/`` (FILES), which an export
writes back as files, so that Megatron's own ``dist_checkpointing.load`` reads the exported
directory. A DistributedOptimizer state in its per-DP-rank bucket layout (keys
``optimizer.distributed.dp_group_idx_<g>.*``, sharding_type ``dp_reshardable`` or the deprecated
``dp_zero_gather_scatter``) has no tensor by its parameter's name and is refused.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Dict

from .errors import invalid
from .formats.torch_zip import TorchZip

PREFIX = "__dcp__/megatron/"
FILES = {"metadata.json": PREFIX + "metadata.json", "common.pt": PREFIX + "common.pt"}  # file: PTC tensor
MAX_JSON_BYTES = 64 << 10  # Megatron writes ~120 bytes
MAX_COMMON_BYTES = 4 << 30  # held in memory while the import runs
DP_BUCKETS = "optimizer.distributed."  # DistributedOptimizer._get_... keys of its DP-bucket formats
_CONFIG = {"sharded_backend": ("torch_dist",), "sharded_backend_version": (1,),
           "common_backend": ("torch",), "common_backend_version": (1,)}


def is_megatron(src: str) -> bool:
    """Whether `src` holds either of Megatron's own files (then both must be there and right)."""
    return any(os.path.lexists(os.path.join(src, f)) for f in FILES)


def read_files(src: str) -> Dict[str, bytes]:
    """{PTC tensor name: bytes} of `src`'s metadata.json and common.pt, checked; {} when `src` is a
    plain DCP directory (neither file there)."""
    if not is_megatron(src):
        return {}
    raw = {f: _read_regular(src, f, MAX_JSON_BYTES if f.endswith(".json") else MAX_COMMON_BYTES) for f in FILES}
    _check_config(src, raw["metadata.json"])
    if not os.path.isfile(os.path.join(src, ".metadata")):
        raise invalid(f"{src}: metadata.json says sharded_backend torch_dist, but there is no .metadata "
                      "(not a torch_dist checkpoint, or an unfinished save)")
    TorchZip(os.path.join(src, "common.pt")).close()  # its members checked; nothing unpickled
    return {FILES[f]: data for f, data in raw.items()}


def _read_regular(src: str, name: str, limit: int) -> bytes:
    path = os.path.join(src, name)
    try:
        st = os.lstat(path)  # a symlink could lead out of the folder
    except FileNotFoundError:
        other = next(f for f in FILES if f != name)
        raise invalid(f"{src}: a Megatron-Core checkpoint with {other} but no {name} "
                      "(an unfinished dist_checkpointing.save: metadata.json is written last)") from None
    if not stat.S_ISREG(st.st_mode):
        raise invalid(f"{path}: not a regular file")
    if st.st_size > limit:
        raise invalid(f"{path}: {st.st_size} bytes (at most {limit} are read)")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) != st.st_size:
        raise invalid(f"{path}: changed while it was read")
    return data


def _check_config(src: str, data: bytes) -> None:
    """metadata.json as Megatron's CheckpointingConfig reads it (core.py: CheckpointingConfig(**json)),
    naming a format ptcfs imports."""
    path = os.path.join(src, "metadata.json")
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise invalid(f"{path}: not JSON ({str(e)[:200]})") from None
    if not isinstance(config, dict) or "sharded_backend" not in config:
        raise invalid(f"{path}: not Megatron-Core's checkpoint config (a JSON object with sharded_backend)")
    for key, value in config.items():
        if key not in _CONFIG:
            raise invalid(f"{path}: unknown member {json.dumps(key)[:80]} (Megatron-Core's config has "
                          f"{', '.join(_CONFIG)})")
        if value not in _CONFIG[key] or type(value) is not type(_CONFIG[key][0]):
            raise invalid(f"{path}: {key} {json.dumps(value)[:80]}: ptcfs imports Megatron-Core checkpoints "
                          f"with {key} {json.dumps(_CONFIG[key][0])} (dist_checkpointing's torch_dist format)")


def check_keys(src: str, names) -> None:
    """Refuses DistributedOptimizer state saved in its DP-bucket layout, naming the first key."""
    for name in sorted(names):
        if name.startswith(DP_BUCKETS):
            key = name.split("/shard_")[0]  # a ShardedObject's unique key: <key>/shard_<offsets>_<shape>
            raise invalid(
                f"{src}: Megatron key '{key}' is DistributedOptimizer state in its per-DP-rank bucket layout "
                "(sharding_type 'dp_reshardable', or 'dp_zero_gather_scatter'): flattened buckets of many "
                "parameters, each DP rank's range, that reshard only across DP ranks; ptcfs imports each "
                "tensor whole by its parameter's name. Save the optimizer with "
                "metadata={'distrib_optim_sharding_type': 'fully_reshardable'}")


def write_files(step_files: Dict[str, bytes], out: str) -> None:
    """Writes the kept files back into the DCP directory `out`: common.pt, then metadata.json
    (last, as Megatron does: its presence marks the checkpoint complete)."""
    for f in ("common.pt", "metadata.json"):
        if FILES[f] in step_files:
            with open(os.path.join(out, f), "wb") as fh:
                fh.write(step_files[FILES[f]])
                fh.flush()
                os.fsync(fh.fileno())
