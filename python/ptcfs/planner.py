"""The parallelism planner from Python: a launcher calls plan(), then ensure_layout() with the
first candidate. The planner itself is the C++ one of `ptcfs plan` (docs/PLANNER.md); this runs
that command and returns its JSON, so both always agree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Union

from .errors import Error

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_path() -> str:
    """The `ptcfs` binary: $PTCFS_CLI, else `ptcfs` on PATH, else the repository's build."""
    for p in (os.environ.get("PTCFS_CLI"), shutil.which("ptcfs"),
              os.path.join(os.environ.get("PTCFS_BUILD") or os.path.join(_REPO, "build"), "cli", "ptcfs")):
        if p and os.access(p, os.X_OK):
            return p
    raise Error("not_found", "the ptcfs command was not found (set PTCFS_CLI, put it on PATH, or build the repository)")


def plan(model: Union[str, Mapping[str, Any]], gpus: int, gpus_per_node: Optional[int] = None,
         top: int = 0) -> List[Dict[str, Any]]:
    """Every (tp, pp, dp, micro_batch) of `model` (a MODEL.json path, or its dict) on `gpus` GPUs that
    fits in memory, best first: dicts of tp, pp, dp, micro_batch, virtual_stages, memory_gb,
    step_seconds and tflops_per_gpu. `top` > 0 keeps the best `top`. Raises Error with the planner's message (a model
    that fits nowhere says by how much)."""
    tmp = None
    if not isinstance(model, str):
        import tempfile
        fd, tmp = tempfile.mkstemp(prefix="ptcfs-model-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(model), f)
        model = tmp
    try:
        cmd = [cli_path(), "plan", "--model", model, "--gpus", str(gpus), "--json", "--top", str(top)]
        if gpus_per_node is not None:
            cmd += ["--gpus-per-node", str(gpus_per_node)]
        r = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        if tmp:
            os.unlink(tmp)
    if r.returncode != 0:
        msg = r.stderr.strip().removeprefix("ptcfs: error: ")
        raise Error("invalid_argument", msg or f"ptcfs plan exited with {r.returncode}")
    return json.loads(r.stdout)
