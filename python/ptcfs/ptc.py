"""The PTC (parallelizable tensor collection) in Python: ptc.json and its exact slice geometry.

A PTC is kept as the plain dict ptc.json holds ({"parallelism", "num_layers", "tensors"}), so
it can be printed, compared and written as is. Everything here follows docs/FORMATS.md and
refuses what the daemon refuses (unknown or repeated keys, bad types, uneven splits), with
an error naming the file and the tensor.

Geometry, for a tensor split along ``tp_dim`` k of size N:

* ``parts`` n: q = N/n, c = q/tp; TP rank t's local rows [j*c, (j+1)*c) are global rows
  [j*q + t*c, j*q + (t+1)*c) for each part j.
* ``pad_to`` m: P = ceil(N/(m*tp))*m*tp, c = P/tp; rank t holds padded rows [t*c, (t+1)*c),
  those >= N being zeros.
* ``heads`` h: each part is h equal attention heads (or key/value groups); a tp that does not
  divide h is refused, so that no rank holds part of a head.
* layers go to stages in contiguous groups, as even as possible, earlier stages taking the
  remainder (5 layers on 2 stages: 0-2, 3-4).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from ._json import no_duplicates
from .errors import invalid

TOP_KEYS = ("parallelism", "num_layers", "tensors", "hf_config")
TENSOR_KEYS = ("dtype", "shape", "tp_dim", "parts", "pad_to", "heads", "layer", "stage")
PAR_KEYS = ("tp", "pp", "dp")
MAX_DIMS = 16
_ID = re.compile(r"[A-Za-z0-9_.-]+")


# --------------------------------------------------------------------------------------
# parsing and checking

def _int(v: Any, where: str, lo: int, hi: int) -> int:
    # JSON integers only: true/false and 2.0 are refused, as nlohmann's is_number_integer does.
    if type(v) is not int:
        raise invalid(f"{where}: expected an integer, got {json.dumps(v)}")
    if not lo <= v <= hi:
        raise invalid(f"{where}: {v} is outside [{lo}, {hi}]")
    return v


def _members(obj: Any, allowed: Sequence[str], where: str) -> None:
    if not isinstance(obj, dict):
        raise invalid(f"{where}: expected an object")
    for k in obj:
        if k not in allowed:
            raise invalid(f"{where}: unknown key '{k}'")


def check_tensor_name(name: str, where: str = "ptc.json") -> None:
    """Names are '/'-separated components, none empty, '.' or '..', none over 250 bytes."""
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}: empty tensor name")
    if "\0" in name:
        raise invalid(f"{where}: tensor name '{name}' contains a NUL byte")
    for comp in name.split("/"):
        if comp in ("", ".", ".."):
            raise invalid(f"{where}: tensor name '{name}' has an empty, '.' or '..' path component")
        if len(comp.encode("utf-8")) > 250:
            raise invalid(f"{where}: tensor name '{name}' has a path component longer than 250 bytes")


def check_id(what: str, ident: str) -> None:
    """Job, step and dataset names: [A-Za-z0-9_.-]+, not starting with '.', at most 128 bytes;
    no step called 'data'."""
    if not isinstance(ident, str) or not _ID.fullmatch(ident) or ident.startswith(".") or len(ident) > 128:
        raise invalid(f"{what} name {ident!r} must be [A-Za-z0-9_.-]+, not start with '.', at most 128 bytes")
    if what == "step" and ident == "data":
        raise invalid("a step may not be called 'data': that folder of a job holds its datasets")


def _check_spec(name: str, spec: Any, num_layers: int, where: str) -> None:
    at = f"{where}: tensor '{name}'"
    check_tensor_name(name, where)
    _members(spec, TENSOR_KEYS, at)
    if "dtype" not in spec:
        raise invalid(f"{at}: missing 'dtype'")
    if spec["dtype"] not in _dt.NUMPY:
        raise invalid(f"{at}: unknown dtype {json.dumps(spec['dtype'])}")
    shape = spec.get("shape")
    if not isinstance(shape, list):
        raise invalid(f"{at}: 'shape' must be a list of integers")
    if len(shape) > MAX_DIMS:
        raise invalid(f"{at}: more than {MAX_DIMS} dimensions")
    for i, d in enumerate(shape):
        _int(d, f"{at}: shape[{i}]", 0, 1 << 48)
    if "tp_dim" in spec:
        if not shape:
            raise invalid(f"{at}: a scalar cannot have a tp_dim")
        _int(spec["tp_dim"], f"{at}: tp_dim", 0, len(shape) - 1)
    if "parts" in spec:
        n = _int(spec["parts"], f"{at}: parts", 1, 1 << 16)
        if "tp_dim" not in spec:
            raise invalid(f"{at}: 'parts' needs a 'tp_dim'")
        k = spec["tp_dim"]
        if shape[k] % n:
            raise invalid(f"{at}: shape[{k}] = {shape[k]} is not divisible into {n} parts")
    if "pad_to" in spec:
        _int(spec["pad_to"], f"{at}: pad_to", 1, 1 << 32)
        if "tp_dim" not in spec:
            raise invalid(f"{at}: 'pad_to' needs a 'tp_dim'")
        if spec.get("parts", 1) > 1:
            raise invalid(f"{at}: 'pad_to' and 'parts' cannot be combined")
    if "heads" in spec:
        h = _int(spec["heads"], f"{at}: heads", 1, 1 << 20)
        if "tp_dim" not in spec:
            raise invalid(f"{at}: 'heads' needs a 'tp_dim'")
        if "pad_to" in spec:
            raise invalid(f"{at}: 'heads' and 'pad_to' cannot be combined")
        parts = spec.get("parts", 1)
        part = shape[spec["tp_dim"]] // parts
        if part % h:
            raise invalid(f"{at}: {'each part of shape[' if parts > 1 else 'shape['}{spec['tp_dim']}] ({part}) "
                          f"is not {h} equal heads")
    if "layer" in spec and "stage" in spec:
        raise invalid(f"{at}: give either 'layer' or 'stage', not both")
    if "layer" in spec:
        if num_layers < 1:
            raise invalid(f"{at}: 'layer' given but num_layers is 0")
        _int(spec["layer"], f"{at}: layer", 0, num_layers - 1)
    if "stage" in spec:
        st = spec["stage"]
        if isinstance(st, str):
            if st not in ("first", "last", "all"):
                raise invalid(f"{at}: stage '{st}' (expected \"first\", \"last\", \"all\" or a list of indices)")
        elif isinstance(st, list) and st:
            for i, s in enumerate(st):
                _int(s, f"{at}: stage[{i}]", 0, 1 << 20)
            if len(set(st)) != len(st):
                raise invalid(f"{at}: stage list repeats an index")
        else:
            raise invalid(f"{at}: stage must be \"first\", \"last\", \"all\" or a non-empty list of indices")


def validate(ptc: Any, where: str = "ptc.json") -> None:
    """Checks a PTC the way the daemon parses ptc.json (not yet against a parallel config:
    check_layout does that). Raises Error(invalid_argument) naming `where` and the tensor."""
    _members(ptc, TOP_KEYS, where)
    if "parallelism" not in ptc:
        raise invalid(f"{where}: missing 'parallelism'")
    par = ptc["parallelism"]
    _members(par, PAR_KEYS, f"{where}: parallelism")
    for k in PAR_KEYS:
        if k not in par:
            raise invalid(f"{where}: parallelism: missing '{k}'")
        _int(par[k], f"{where}: parallelism.{k}", 1, 1 << 20)
    num_layers = _int(ptc.get("num_layers", 0), f"{where}: num_layers", 0, 1 << 20)
    if "hf_config" in ptc and not isinstance(ptc["hf_config"], dict):
        raise invalid(f"{where}: 'hf_config' must be an object (a config.json)")
    tensors = ptc.get("tensors")
    if not isinstance(tensors, dict) or not tensors:
        raise invalid(f"{where}: 'tensors' must be a non-empty object")
    for name, spec in tensors.items():
        _check_spec(name, spec, num_layers, where)


def loads(text, where: str = "ptc.json") -> dict:
    """Parses and validates ptc.json text (str or bytes)."""
    try:
        ptc = json.loads(text, object_pairs_hook=no_duplicates(where))
    except ValueError as e:
        raise invalid(f"{where}: not valid JSON: {e}") from None
    validate(ptc, where)
    return ptc


def load(path: str) -> dict:
    """Reads and validates a ptc.json file."""
    with open(path, "rb") as f:
        return loads(f.read(), path)


def normalize(ptc: Mapping) -> dict:
    """The PTC as the daemon writes it back: every placement explicit ("stage": "first" when
    neither layer nor stage was given), sorted stage lists, parts only when > 1."""
    out = {"parallelism": {k: ptc["parallelism"][k] for k in PAR_KEYS},
           "num_layers": ptc.get("num_layers", 0), "tensors": {}}
    if "hf_config" in ptc:
        out["hf_config"] = copy.deepcopy(ptc["hf_config"])
    for name, spec in ptc["tensors"].items():
        o = {"dtype": spec["dtype"], "shape": list(spec["shape"])}
        if "tp_dim" in spec:
            o["tp_dim"] = spec["tp_dim"]
        if spec.get("parts", 1) > 1:
            o["parts"] = spec["parts"]
        if "pad_to" in spec:
            o["pad_to"] = spec["pad_to"]
        if "heads" in spec:
            o["heads"] = spec["heads"]
        if "layer" in spec:
            o["layer"] = spec["layer"]
        else:
            st = spec.get("stage", "first")
            o["stage"] = sorted(st) if isinstance(st, list) else st
        out["tensors"][name] = o
    return out


def dumps(ptc: Mapping) -> str:
    """ptc.json text: the normalized PTC, keys sorted, 2-space indent, a final newline; byte
    for byte what the mount shows for a step with this PTC."""
    validate(ptc)
    return json.dumps(normalize(ptc), indent=2, sort_keys=True) + "\n"


def parallelism(ptc: Mapping) -> Tuple[int, int, int]:
    par = ptc["parallelism"]
    return par["tp"], par["pp"], par["dp"]


def with_parallelism(ptc: Mapping, tp: int, pp: int, dp: int) -> dict:
    """A copy of the PTC for another parallel config (checked with check_layout)."""
    out = copy.deepcopy(dict(ptc))
    out["parallelism"] = {"tp": int(tp), "pp": int(pp), "dp": int(dp)}
    check_layout(out)
    return out


# --------------------------------------------------------------------------------------
# geometry

def stage_layers(num_layers: int, pp: int) -> List[range]:
    """The layers of each stage: contiguous groups, as even as possible, earlier stages
    taking the remainder."""
    base, rem = divmod(num_layers, pp)
    out, lo = [], 0
    for s in range(pp):
        n = base + (1 if s < rem else 0)
        out.append(range(lo, lo + n))
        lo += n
    return out


def stages_of(spec: Mapping, num_layers: int, pp: int) -> List[int]:
    """The pipeline stages that hold a tensor (sorted)."""
    if "layer" in spec:
        for s, r in enumerate(stage_layers(num_layers, pp)):
            if spec["layer"] in r:
                return [s]
        raise invalid(f"layer {spec['layer']} is not in 0..{num_layers - 1}")
    st = spec.get("stage", "first")
    if st == "first":
        return [0]
    if st == "last":
        return [pp - 1]
    if st == "all":
        return list(range(pp))
    return sorted(st)


def padded_size(size: int, pad_to: int, tp: int) -> int:
    """Dimension size after Megatron's vocabulary padding to a multiple of pad_to * tp."""
    unit = pad_to * tp
    return -(-size // unit) * unit


def _check_heads(spec: Mapping, tp: int) -> None:
    # Megatron's rule (query groups divisible by tp): every rank holds whole heads.
    h = spec.get("heads")
    if h is not None and h % tp:
        raise invalid(f"dimension {spec['tp_dim']} holds {h} heads{' per part' if spec.get('parts', 1) > 1 else ''}, "
                      f"which tp={tp} does not divide (a rank would hold part of a head)")


def pieces(spec: Mapping, tp: int, t: int) -> List[Tuple[Tuple[int, int], Tuple[int, int]]]:
    """[((local lo, hi), (global lo, hi)), ...] along tp_dim: where TP rank t's slice takes its
    rows from. Empty for a replicated tensor (it holds everything). Padding rows of a pad_to
    tensor belong to no piece."""
    k = spec.get("tp_dim")
    if k is None:
        return []
    n = spec["shape"][k]
    if "pad_to" in spec:
        c = padded_size(n, spec["pad_to"], tp) // tp
        g0, g1 = t * c, min((t + 1) * c, n)
        return [((0, g1 - g0), (g0, g1))] if g1 > g0 else []
    _check_heads(spec, tp)
    parts = spec.get("parts", 1)
    q = n // parts
    if q % tp:
        raise invalid(f"dimension {k} {'part size' if parts > 1 else 'size'} {q} is not divisible by tp={tp}")
    c = q // tp
    return [((j * c, (j + 1) * c), (j * q + t * c, j * q + (t + 1) * c)) for j in range(parts)] if c else []


def local_shape(spec: Mapping, tp: int) -> List[int]:
    """The shape of the slice each TP rank holds (padding included)."""
    shape = list(spec["shape"])
    k = spec.get("tp_dim")
    if k is None:
        return shape
    if "pad_to" in spec:
        shape[k] = padded_size(shape[k], spec["pad_to"], tp) // tp
    else:
        _check_heads(spec, tp)
        if (shape[k] // spec.get("parts", 1)) % tp:
            raise invalid(f"dimension {k} of size {shape[k]} does not split into "
                          f"{spec.get('parts', 1)} part(s) x tp={tp}")
        shape[k] //= tp
    return shape


def check_layout(ptc: Mapping, tp: Optional[int] = None, pp: Optional[int] = None, where: str = "ptc.json") -> None:
    """Checks that the PTC splits over (tp, pp) (default: its own), as the daemon's layout does."""
    validate(ptc, where)
    ptp, ppp, _ = parallelism(ptc)
    tp = ptp if tp is None else tp
    pp = ppp if pp is None else pp
    cfg = f"{where}: config tp={tp},pp={pp}"
    if tp < 1 or pp < 1:
        raise invalid(f"{cfg}: every degree must be at least 1")
    L = ptc.get("num_layers", 0)
    if L > 0 and pp > L:
        raise invalid(f"{cfg}: more pipeline stages ({pp}) than layers ({L})")
    for name, spec in ptc["tensors"].items():
        for s in stages_of(spec, L, pp):
            if s >= pp:
                raise invalid(f"{cfg}: tensor '{name}' is placed on stage {s} but there are only {pp} stages")
        try:
            local_shape(spec, tp)
        except Exception as e:
            raise invalid(f"{cfg}: tensor '{name}': {getattr(e, 'message', e)}") from None


def shards(ptc: Mapping) -> List[Tuple[int, int]]:
    """Every shard (t, p) of the PTC's own layout, in the daemon's order (p, then t)."""
    tp, pp, _ = parallelism(ptc)
    return [(t, p) for p in range(pp) for t in range(tp)]


def shard_tensors(ptc: Mapping, tp_rank: int, pp_rank: int) -> Dict[str, Tuple[str, List[int]]]:
    """{name: (dtype, local shape)} of the tensors shard (tp_rank, pp_rank) holds, in name
    order, for the PTC's own parallelism."""
    tp, pp, _ = parallelism(ptc)
    if not (0 <= tp_rank < tp and 0 <= pp_rank < pp):
        raise invalid(f"shard tp{tp_rank}-pp{pp_rank} is outside tp={tp},pp={pp}")
    check_layout(ptc)
    L = ptc.get("num_layers", 0)
    return {name: (spec["dtype"], local_shape(spec, tp))
            for name, spec in sorted(ptc["tensors"].items())
            if pp_rank in stages_of(spec, L, pp)}


def _index(ndim: int, k: int, lo: int, hi: int):
    idx = [slice(None)] * ndim
    idx[k] = slice(lo, hi)
    return tuple(idx)


def split(full: np.ndarray, spec: Mapping, tp: int, t: int) -> np.ndarray:
    """TP rank t's slice of a full logical tensor (a new C-contiguous array; padding zeros)."""
    full = np.asarray(full)
    if list(full.shape) != list(spec["shape"]):
        raise invalid(f"split: array shape {list(full.shape)} is not the tensor's {list(spec['shape'])}")
    k = spec.get("tp_dim")
    if k is None:
        return np.array(full, order="C", copy=True)
    out = np.zeros(local_shape(spec, tp), dtype=full.dtype)
    for (l0, l1), (g0, g1) in pieces(spec, tp, t):
        out[_index(out.ndim, k, l0, l1)] = full[_index(full.ndim, k, g0, g1)]
    return out


def gather(slices: Sequence[np.ndarray], spec: Mapping, tp: int) -> np.ndarray:
    """The full logical tensor from every TP rank's slice (slices[t]); padding dropped. A
    replicated tensor is slices[0] (all must be equal)."""
    if len(slices) != tp:
        raise invalid(f"gather: {len(slices)} slices for tp={tp}")
    want = local_shape(spec, tp)
    for t, s in enumerate(slices):
        if list(np.shape(s)) != want:
            raise invalid(f"gather: slice of TP rank {t} has shape {list(np.shape(s))}, want {want}")
    k = spec.get("tp_dim")
    if k is None:
        for t in range(1, tp):
            if not np.array_equal(slices[t], slices[0]):
                raise invalid(f"gather: replicated tensor differs between TP ranks 0 and {t}")
        return np.array(slices[0], copy=True)
    full = np.zeros(spec["shape"], dtype=np.asarray(slices[0]).dtype)
    for t, s in enumerate(slices):
        s = np.asarray(s)
        for (l0, l1), (g0, g1) in pieces(spec, tp, t):
            full[_index(full.ndim, k, g0, g1)] = s[_index(s.ndim, k, l0, l1)]
    return full
