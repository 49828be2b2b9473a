"""JSON reading shared by the parsers of ptc.json and safetensors headers."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from .errors import invalid


def no_duplicates(where: str) -> Callable[[List[Tuple[str, Any]]], Dict[str, Any]]:
    """An ``object_pairs_hook`` for :func:`json.loads` that refuses a key repeated within one
    object, as the daemon does: ptcfs.Error (invalid_argument) naming `where` and the key."""
    def hook(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise invalid(f"{where}: key '{k}' is repeated")
            out[k] = v
        return out
    return hook
