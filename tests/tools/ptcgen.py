#!/usr/bin/env python3
"""ptcgen: checkpoint generator and independent reference layout for ptcfs tests.

This module is the test oracle. It implements the checkpoint-directory contract of
docs/FORMATS.md ("ptc.json") on its own, without sharing code or data with
the C++ implementation:

* ``make_ptc``        builds a PTC (the dict written as ptc.json) for a GPT- or Llama-style model;
* ``full_tensors``    makes the whole logical tensors, deterministically from a seed;
* ``shard_slices``    splits them into per-shard slices for any (tp, pp) -- the oracle;
* ``write_safetensors`` / ``read_safetensors``  a canonical writer and a strict reader;
* ``write_checkpoint`` writes ptc.json and the rank files ``tp{t}-pp{p}.safetensors``.

BF16 (and the F8 types) have no numpy dtype: they are held as their raw bits
(uint16 / uint8), which is also how the mount's .npy views show them.

Canonical safetensors form (what the mount serves, byte for byte): an 8-byte
little-endian u64 header length N; the header is
``json.dumps(h, separators=(',', ':'), sort_keys=True)`` where h maps each tensor name to
``{"data_offsets": [b, e], "dtype": D, "shape": [...]}`` (no ``__metadata__``), right-padded
with spaces so that N is a multiple of 8; the data area holds the tensors packed in
``sorted()`` name order with no gaps.

CLI::

    $PTCFS_PYTHON tests/tools/ptcgen.py OUTDIR --style gpt --tp 2 --pp 2 --dp 1 \\
        --layers 4 --hidden 256 --vocab 1000 --seed 0 [--ref REFDIR] [--target-mb N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import zlib
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

# --------------------------------------------------------------------------------------
# dtypes

# safetensors dtype name -> (numpy storage dtype, bytes per element)
DTYPES: Dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # raw bits
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
    "F8_E4M3": np.dtype("u1"),  # raw bits
    "F8_E5M2": np.dtype("u1"),  # raw bits
}


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that holds (and the .npy views show) a safetensors dtype."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}") from None


def itemsize(dtype: str) -> int:
    return np_dtype(dtype).itemsize


def nbytes_of(dtype: str, shape: Iterable[int]) -> int:
    return itemsize(dtype) * math.prod(int(d) for d in shape)


# --------------------------------------------------------------------------------------
# PTC construction

PTC_TOP_KEYS = {"parallelism", "num_layers", "tensors"}
PTC_TENSOR_KEYS = {"dtype", "shape", "tp_dim", "parts", "pad_to", "heads", "layer", "stage"}


def _t(dtype, shape, tp_dim=None, parts=None, pad_to=None, layer=None, stage=None) -> dict:
    spec = {"dtype": dtype, "shape": [int(s) for s in shape]}
    if tp_dim is not None:
        spec["tp_dim"] = tp_dim
    if parts is not None:
        spec["parts"] = parts
    if pad_to is not None:
        spec["pad_to"] = pad_to
    if layer is not None:
        spec["layer"] = layer
    if stage is not None:
        spec["stage"] = stage
    return spec


def llama_dims(hidden: int) -> Tuple[int, int]:
    """(kv_dim, ffn) of the Llama-style model: grouped-query attention with a quarter of
    the query heads as key/value heads, and a SwiGLU width of 8h/3 rounded up to 64."""
    kv_dim = hidden // 4
    ffn = -(-(8 * hidden) // (3 * 64)) * 64
    return kv_dim, ffn


def make_ptc(style: str = "gpt", tp: int = 2, pp: int = 2, dp: int = 1, layers: int = 4,
             hidden: int = 256, vocab: int = 1000, max_seq: int = 128) -> dict:
    """The PTC (ptc.json as a dict) of a small GPT- or Llama-style model.

    Raises ValueError when a split would not be even for this (tp, pp)."""
    h = int(hidden)
    T: Dict[str, dict] = {}
    if style == "gpt":
        T["embedding.word_embeddings.weight"] = _t("BF16", [vocab, h], tp_dim=0, pad_to=128, stage="first")
        T["embedding.position_embeddings.weight"] = _t("F32", [max_seq, h], stage="first")
        for i in range(layers):
            p = f"layers.{i}."
            T[p + "input_layernorm.weight"] = _t("F32", [h], layer=i)
            T[p + "input_layernorm.bias"] = _t("F32", [h], layer=i)
            T[p + "self_attention.query_key_value.weight"] = _t("BF16", [3 * h, h], tp_dim=0, layer=i)
            T[p + "self_attention.query_key_value.bias"] = _t("BF16", [3 * h], tp_dim=0, layer=i)
            T[p + "self_attention.dense.weight"] = _t("BF16", [h, h], tp_dim=1, layer=i)
            T[p + "self_attention.dense.bias"] = _t("BF16", [h], layer=i)
            T[p + "post_attention_layernorm.weight"] = _t("F32", [h], layer=i)
            T[p + "mlp.dense_h_to_4h.weight"] = _t("BF16", [8 * h, h], tp_dim=0, parts=2, layer=i)
            T[p + "mlp.dense_4h_to_h.weight"] = _t("BF16", [h, 4 * h], tp_dim=1, layer=i)
        T["final_layernorm.weight"] = _t("F32", [h], stage="last")
        T["final_layernorm.bias"] = _t("F32", [h], stage="last")
    elif style == "llama":
        kv_dim, ffn = llama_dims(h)
        T["embedding.word_embeddings.weight"] = _t("BF16", [vocab, h], tp_dim=0, pad_to=128, stage="first")
        for i in range(layers):
            p = f"layers.{i}."
            T[p + "input_layernorm.weight"] = _t("F32", [h], layer=i)  # RMS norm: no bias
            T[p + "self_attention.q_proj.weight"] = _t("BF16", [h, h], tp_dim=0, layer=i)
            T[p + "self_attention.k_proj.weight"] = _t("BF16", [kv_dim, h], tp_dim=0, layer=i)
            T[p + "self_attention.v_proj.weight"] = _t("BF16", [kv_dim, h], tp_dim=0, layer=i)
            T[p + "self_attention.o_proj.weight"] = _t("BF16", [h, h], tp_dim=1, layer=i)
            T[p + "post_attention_layernorm.weight"] = _t("F32", [h], layer=i)
            T[p + "mlp.gate_up_proj.weight"] = _t("BF16", [2 * ffn, h], tp_dim=0, parts=2, layer=i)
            T[p + "mlp.down_proj.weight"] = _t("BF16", [h, ffn], tp_dim=1, layer=i)
        T["final_layernorm.weight"] = _t("F32", [h], stage="last")
        T["output_layer.weight"] = _t("BF16", [vocab, h], tp_dim=0, pad_to=128, stage="last")
    else:
        raise ValueError(f"unknown style {style!r} (gpt or llama)")
    # A tensor whose name holds a slash (a subfolder in the .npy views), on every stage.
    T["extra/rng_state"] = _t("I64", [4], stage="all")
    ptc = {"parallelism": {"tp": int(tp), "pp": int(pp), "dp": int(dp)}, "num_layers": int(layers),
           "tensors": T}
    validate_ptc(ptc)
    return ptc


def validate_ptc(ptc: dict, tp: Optional[int] = None, pp: Optional[int] = None) -> None:
    """Checks that the PTC is well formed and splits evenly over (tp, pp) (default: its own)."""
    unknown = set(ptc) - PTC_TOP_KEYS
    if unknown:
        raise ValueError(f"ptc.json: unknown key(s) {sorted(unknown)}")
    tp = ptc["parallelism"]["tp"] if tp is None else tp
    pp = ptc["parallelism"]["pp"] if pp is None else pp
    if tp < 1 or pp < 1:
        raise ValueError("tp and pp must be >= 1")
    L = ptc["num_layers"]
    for name, spec in ptc["tensors"].items():
        unknown = set(spec) - PTC_TENSOR_KEYS
        if unknown:
            raise ValueError(f"{name}: unknown key(s) {sorted(unknown)}")
        np_dtype(spec["dtype"])
        shape = spec["shape"]
        if "layer" in spec and "stage" in spec:
            raise ValueError(f"{name}: both layer and stage")
        if "layer" in spec and not 0 <= spec["layer"] < L:
            raise ValueError(f"{name}: layer {spec['layer']} out of range")
        stages_of(spec, L, pp)
        k = spec.get("tp_dim")
        if k is None:
            if "parts" in spec or "pad_to" in spec:
                raise ValueError(f"{name}: parts/pad_to without tp_dim")
            continue
        if not 0 <= k < len(shape):
            raise ValueError(f"{name}: tp_dim {k} out of range")
        if "parts" in spec and "pad_to" in spec:
            raise ValueError(f"{name}: parts and pad_to together")
        n = spec.get("parts", 1)
        if "pad_to" in spec:
            continue
        if "heads" in spec and ((shape[k] // n) % spec["heads"] or spec["heads"] % tp):
            raise ValueError(f"{name}: {spec['heads']} heads per part do not split over tp={tp}")
        if shape[k] % n or (shape[k] // n) % tp:
            raise ValueError(f"{name}: dimension {k} of size {shape[k]} does not split into "
                             f"{n} part(s) x tp={tp}")


# --------------------------------------------------------------------------------------
# layout (the oracle)

def stage_layers(num_layers: int, pp: int) -> List[range]:
    """The layers of each stage: contiguous groups as even as possible, earlier stages
    taking the remainder (5 layers, pp=2 -> [0,1,2], [3,4])."""
    base, rem = divmod(num_layers, pp)
    out, lo = [], 0
    for s in range(pp):
        n = base + (1 if s < rem else 0)
        out.append(range(lo, lo + n))
        lo += n
    return out


def stage_of_layer(layer: int, num_layers: int, pp: int) -> int:
    for s, r in enumerate(stage_layers(num_layers, pp)):
        if layer in r:
            return s
    raise ValueError(f"layer {layer} not in 0..{num_layers - 1}")


def stages_of(spec: dict, num_layers: int, pp: int) -> List[int]:
    """The pipeline stages that hold a tensor."""
    if "layer" in spec:
        return [stage_of_layer(spec["layer"], num_layers, pp)]
    st = spec.get("stage", "first")
    if st == "first":
        return [0]
    if st == "last":
        return [pp - 1]
    if st == "all":
        return list(range(pp))
    if isinstance(st, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in st):
        if any(not 0 <= s < pp for s in st):
            raise ValueError(f"stage list {st} out of range for pp={pp}")
        return sorted(set(st))
    raise ValueError(f"bad stage {st!r}")


def padded_size(size: int, pad_to: int, tp: int) -> int:
    m = pad_to * tp
    return -(-size // m) * m


def shard_shape(spec: dict, tp: int) -> List[int]:
    """The shape of the slice one TP rank holds."""
    shape = list(spec["shape"])
    k = spec.get("tp_dim")
    if k is None:
        return shape
    if "pad_to" in spec:
        shape[k] = padded_size(shape[k], spec["pad_to"], tp) // tp
    else:
        shape[k] //= tp
    return shape


def tp_slice(full: np.ndarray, spec: dict, tp: int, t: int) -> np.ndarray:
    """TP rank t's slice of a full logical tensor (a new C-contiguous array)."""
    k = spec.get("tp_dim")
    if k is None:
        return np.ascontiguousarray(full).copy()
    size = full.shape[k]

    def take(lo, hi, arr=full):
        idx = [slice(None)] * arr.ndim
        idx[k] = slice(lo, hi)
        return arr[tuple(idx)]

    if "pad_to" in spec:
        P = padded_size(size, spec["pad_to"], tp)
        pshape = list(full.shape)
        pshape[k] = P
        padded = np.zeros(pshape, dtype=full.dtype)
        idx = [slice(None)] * full.ndim
        idx[k] = slice(0, size)
        padded[tuple(idx)] = full
        c = P // tp
        return np.ascontiguousarray(take(t * c, (t + 1) * c, padded))
    n = spec.get("parts", 1)
    if size % n or (size // n) % tp:
        raise ValueError(f"dimension {k} of size {size} does not split into {n} part(s) x tp={tp}")
    part = size // n
    c = part // tp
    chunks = [take(j * part + t * c, j * part + (t + 1) * c) for j in range(n)]
    return np.ascontiguousarray(np.concatenate(chunks, axis=k))


def shard_names(tp: int, pp: int) -> List[Tuple[int, int]]:
    return [(t, p) for p in range(pp) for t in range(tp)]


def shard_file(t: int, p: int) -> str:
    return f"tp{t}-pp{p}.safetensors"


def layout(ptc: dict, tp: Optional[int] = None, pp: Optional[int] = None) -> Dict[Tuple[int, int], Dict[str, Tuple[str, List[int]]]]:
    """{(t, p): {name: (dtype, slice shape)}} for every shard, without any data."""
    tp = ptc["parallelism"]["tp"] if tp is None else tp
    pp = ptc["parallelism"]["pp"] if pp is None else pp
    validate_ptc(ptc, tp, pp)
    L = ptc["num_layers"]
    out = {tp_pp: {} for tp_pp in shard_names(tp, pp)}
    for name, spec in ptc["tensors"].items():
        shp = shard_shape(spec, tp)
        for p in stages_of(spec, L, pp):
            for t in range(tp):
                out[(t, p)][name] = (spec["dtype"], shp)
    return out


def shard_slices(ptc: dict, tp: Optional[int] = None, pp: Optional[int] = None,
                 tensors: Optional[Dict[str, np.ndarray]] = None,
                 seed: int = 0) -> Dict[Tuple[int, int], Dict[str, np.ndarray]]:
    """The oracle: {(t, p): {name: slice}} of every shard for (tp, pp) (default: the PTC's own
    parallelism). ``tensors`` are the full logical tensors (default: full_tensors(ptc, seed))."""
    tp = ptc["parallelism"]["tp"] if tp is None else tp
    pp = ptc["parallelism"]["pp"] if pp is None else pp
    if tensors is None:
        tensors = full_tensors(ptc, seed)
    validate_ptc(ptc, tp, pp)
    L = ptc["num_layers"]
    out: Dict[Tuple[int, int], Dict[str, np.ndarray]] = {tp_pp: {} for tp_pp in shard_names(tp, pp)}
    for name, spec in ptc["tensors"].items():
        full = tensors[name]
        stages = stages_of(spec, L, pp)
        for t in range(tp):
            sl = tp_slice(full, spec, tp, t)
            assert list(sl.shape) == shard_shape(spec, tp), (name, sl.shape)
            for p in stages:
                out[(t, p)][name] = sl
    return out


def shard_bytes(ptc: dict, tp: Optional[int] = None, pp: Optional[int] = None) -> Dict[Tuple[int, int], int]:
    """Tensor data bytes of each rank file."""
    return {k: sum(nbytes_of(d, s) for d, s in v.values()) for k, v in layout(ptc, tp, pp).items()}


def total_bytes(ptc: dict, tp: Optional[int] = None, pp: Optional[int] = None) -> int:
    return sum(shard_bytes(ptc, tp, pp).values())


# --------------------------------------------------------------------------------------
# data

def _rng(seed: int, name: str) -> np.random.Generator:
    # One stream per tensor, keyed by a stable hash of the name, so that adding or
    # removing a tensor leaves every other tensor's values unchanged.
    return np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])


def random_tensor(dtype: str, shape: List[int], rng: np.random.Generator) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    if dtype in ("F32", "F64", "F16"):
        return rng.standard_normal(shape, dtype=np.float32).astype(np_dtype(dtype))
    if dtype == "BF16":
        # The top 16 bits of finite float32 values: never a NaN or infinity pattern.
        f = rng.standard_normal(shape, dtype=np.float32)
        return (f.view(np.uint32) >> np.uint32(16)).astype("<u2")
    if dtype in ("I64", "I32", "I16", "I8", "U8"):
        info = np.iinfo(np_dtype(dtype))
        return rng.integers(info.min, info.max, size=shape, dtype=np_dtype(dtype), endpoint=True)
    if dtype == "BOOL":
        return rng.integers(0, 2, size=shape, dtype=np.uint8).astype(np.bool_)
    if dtype == "F8_E4M3":  # 0x7F / 0xFF are NaN
        b = rng.integers(0, 256, size=shape, dtype=np.uint8)
        return np.where((b & 0x7F) == 0x7F, b & 0xFE, b).astype(np.uint8)
    if dtype == "F8_E5M2":  # exponent 0b11111: inf/NaN; clear the top exponent bit there
        b = rng.integers(0, 256, size=shape, dtype=np.uint8)
        return np.where((b & 0x7C) == 0x7C, b & 0xBF, b).astype(np.uint8)
    raise ValueError(f"unknown dtype {dtype!r}")


def full_tensors(ptc: dict, seed: int = 0) -> Dict[str, np.ndarray]:
    """The whole logical tensors of a PTC, deterministic in (seed, name, dtype, shape)."""
    return {name: random_tensor(spec["dtype"], spec["shape"], _rng(seed, name))
            for name, spec in ptc["tensors"].items()}


# --------------------------------------------------------------------------------------
# safetensors

def _as_bytes(dtype: str, arr: np.ndarray, name: str) -> bytes:
    want = np_dtype(dtype)
    a = np.asarray(arr)
    if a.dtype.itemsize != want.itemsize:
        raise ValueError(f"{name}: array dtype {a.dtype} does not hold {dtype}")
    if dtype in ("BF16", "F8_E4M3", "F8_E5M2"):
        if a.dtype.kind not in "ui":
            raise ValueError(f"{name}: {dtype} must be given as raw bits (unsigned ints), not {a.dtype}")
        a = a.astype(a.dtype.newbyteorder("<")).view(want)
    elif a.dtype.kind != want.kind:
        raise ValueError(f"{name}: array dtype {a.dtype} does not hold {dtype}")
    else:
        a = a.astype(want)
    return np.ascontiguousarray(a).tobytes(order="C")


def safetensors_header(entries: Dict[str, Tuple[str, List[int]]]) -> Tuple[bytes, Dict[str, Tuple[int, int]]]:
    """The canonical header bytes (length prefix included) for {name: (dtype, shape)}, and each
    tensor's [begin, end) in the data area."""
    h, offsets, pos = {}, {}, 0
    for name in sorted(entries):
        dtype, shape = entries[name]
        n = nbytes_of(dtype, shape)
        h[name] = {"data_offsets": [pos, pos + n], "dtype": dtype, "shape": [int(s) for s in shape]}
        offsets[name] = (pos, pos + n)
        pos += n
    return encode_header(h), offsets


def encode_header(h: dict) -> bytes:
    """Length prefix + JSON (compact, sorted keys) padded with spaces to a multiple of 8."""
    js = json.dumps(h, separators=(",", ":"), sort_keys=True).encode("utf-8")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js


def safetensors_bytes(tensors: Dict[str, Tuple[str, np.ndarray]]) -> bytes:
    """The canonical file bytes for {name: (dtype, array)}."""
    header, _ = safetensors_header({n: (d, list(np.shape(a))) for n, (d, a) in tensors.items()})
    parts = [header]
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        parts.append(_as_bytes(dtype, arr, name))
    return b"".join(parts)


def write_safetensors(path: str, tensors: Dict[str, Tuple[str, np.ndarray]]) -> int:
    """Writes the canonical file; returns the number of tensor data bytes."""
    data = safetensors_bytes(tensors)
    with open(path, "wb") as f:
        f.write(data)
    return sum(nbytes_of(d, np.shape(a)) for d, a in tensors.values())


class SafetensorsError(ValueError):
    pass


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise SafetensorsError(f"duplicate key {k!r}")
        d[k] = v
    return d


def parse_safetensors_header(data: bytes, file_size: Optional[int] = None, where: str = "<bytes>"):
    """Strictly parses a header. Returns (header_len N, {name: (dtype, shape, begin, end)},
    metadata or None). ``data`` must hold at least the 8 + N header bytes."""
    file_size = len(data) if file_size is None else file_size
    if len(data) < 8:
        raise SafetensorsError(f"{where}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > 100_000_000 or 8 + n > file_size or 8 + n > len(data):
        raise SafetensorsError(f"{where}: header length {n} exceeds the file ({file_size} bytes)")
    try:
        h = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=_no_dup_pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{where}: header is not valid JSON: {e}") from None
    if not isinstance(h, dict):
        raise SafetensorsError(f"{where}: header is not a JSON object")
    meta = h.pop("__metadata__", None)
    if meta is not None and (not isinstance(meta, dict) or
                             not all(isinstance(v, str) for v in meta.values())):
        raise SafetensorsError(f"{where}: __metadata__ is not a map of strings")
    data_len = file_size - 8 - n
    entries = {}
    for name, e in h.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{where}: {name}: entry must have exactly dtype, shape, data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in DTYPES:
            raise SafetensorsError(f"{where}: {name}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise SafetensorsError(f"{where}: {name}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise SafetensorsError(f"{where}: {name}: bad data_offsets {offs!r}")
        if offs[1] - offs[0] != nbytes_of(dtype, shape):
            raise SafetensorsError(f"{where}: {name}: data_offsets {offs} do not hold {dtype} {shape}")
        if offs[1] > data_len:
            raise SafetensorsError(f"{where}: {name}: data_offsets {offs} past the end of the data "
                                   f"area ({data_len} bytes)")
        entries[name] = (dtype, shape, offs[0], offs[1])
    pos = 0
    for name, (_, _, b, e) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if b < pos:
            raise SafetensorsError(f"{where}: {name}: data_offsets overlap another tensor")
        if b > pos:
            raise SafetensorsError(f"{where}: {name}: hole in the data area before offset {b}")
        pos = e
    if pos != data_len:
        raise SafetensorsError(f"{where}: data area is {data_len} bytes but tensors cover {pos}")
    return n, entries, meta


def read_safetensors(path: str, canonical: bool = False) -> Dict[str, Tuple[str, np.ndarray]]:
    """Strictly reads a safetensors file: {name: (dtype, array)}. With ``canonical``, also
    checks that the file is exactly in the canonical form."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_safetensors(data, where=path, canonical=canonical)


def parse_safetensors(data: bytes, where: str = "<bytes>", canonical: bool = False):
    n, entries, meta = parse_safetensors_header(data, len(data), where)
    if canonical:
        if meta is not None:
            raise SafetensorsError(f"{where}: canonical form has no __metadata__")
        want, _ = safetensors_header({k: (d, s) for k, (d, s, _, _) in entries.items()})
        if data[:len(want)] != want:
            raise SafetensorsError(f"{where}: header is not in canonical form")
    out = {}
    base = 8 + n
    for name, (dtype, shape, b, e) in entries.items():
        arr = np.frombuffer(data, dtype=np_dtype(dtype), count=(e - b) // itemsize(dtype),
                            offset=base + b).reshape(shape)
        out[name] = (dtype, arr)
    return out


# --------------------------------------------------------------------------------------
# checkpoints

def write_ptc_json(path: str, ptc: dict) -> None:
    with open(path, "w") as f:
        json.dump(ptc, f, indent=2)
        f.write("\n")


def write_checkpoint(outdir: str, ptc: dict, tensors: Dict[str, np.ndarray]) -> dict:
    """Writes OUTDIR/ptc.json and every rank file for the PTC's own parallelism.
    Returns {"shards", "tensors", "bytes", "shard_bytes": {"tp0-pp0": n, ...}}."""
    os.makedirs(outdir, exist_ok=True)
    write_ptc_json(os.path.join(outdir, "ptc.json"), ptc)
    slices = shard_slices(ptc, tensors=tensors)
    total, per = 0, {}
    for (t, p), sl in slices.items():
        n = write_safetensors(os.path.join(outdir, shard_file(t, p)),
                              {name: (ptc["tensors"][name]["dtype"], a) for name, a in sl.items()})
        per[f"tp{t}-pp{p}"] = n
        total += n
    return {"shards": len(slices), "tensors": len(ptc["tensors"]), "bytes": total, "shard_bytes": per}


def npy_relpath(name: str) -> str:
    """Where a tensor's .npy lives below a view folder (slashes are subfolders)."""
    return name + ".npy"


def write_reference(refdir: str, tensors: Dict[str, np.ndarray]) -> None:
    """REFDIR/<name>.npy for every full logical tensor (BF16 as uint16 bits)."""
    for name, arr in tensors.items():
        path = os.path.join(refdir, npy_relpath(name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, arr, allow_pickle=False)


def load_reference(refdir: str, ptc: dict) -> Dict[str, np.ndarray]:
    return {name: np.load(os.path.join(refdir, npy_relpath(name)), allow_pickle=False)
            for name in ptc["tensors"]}


def hidden_for_target(style: str, tp: int, pp: int, dp: int, layers: int, vocab: int,
                      target_bytes: int) -> int:
    """The hidden size (a multiple of 32 * tp) whose rank files total closest to target_bytes."""
    step = 32 * tp
    best, best_err = step, None
    h = step
    while h <= 1 << 18:
        try:
            size = total_bytes(make_ptc(style, tp, pp, dp, layers, h, vocab))
        except ValueError:
            h += step
            continue
        err = abs(size - target_bytes)
        if best_err is None or err < best_err:
            best, best_err = h, err
        if size > target_bytes:
            return best
        h += step
    if best_err is None:
        raise ValueError(f"no hidden size fits style={style} tp={tp} pp={pp}")
    return best


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Generate a ptcfs checkpoint directory (ptc.json + rank files).")
    ap.add_argument("outdir")
    ap.add_argument("--style", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ref", metavar="REFDIR", help="also write the full logical tensors as REFDIR/<name>.npy")
    ap.add_argument("--target-mb", type=float, metavar="N",
                    help="choose the hidden size so that the rank files total about N MB (10^6 bytes); "
                         "overrides --hidden")
    ap.add_argument("--json", action="store_true", help="print a JSON summary")
    a = ap.parse_args(argv)
    hidden = a.hidden
    if a.target_mb is not None:
        hidden = hidden_for_target(a.style, a.tp, a.pp, a.dp, a.layers, a.vocab, int(a.target_mb * 1e6))
    try:
        ptc = make_ptc(a.style, a.tp, a.pp, a.dp, a.layers, hidden, a.vocab)
    except ValueError as e:
        print(f"ptcgen: error: {e}", file=sys.stderr)
        return 2
    tensors = full_tensors(ptc, a.seed)
    summary = write_checkpoint(a.outdir, ptc, tensors)
    if a.ref:
        write_reference(a.ref, tensors)
    summary.update({"hidden": hidden, "style": a.style, "outdir": a.outdir})
    if a.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"ptcgen: wrote {a.outdir}: style={a.style} tp={a.tp} pp={a.pp} dp={a.dp} layers={a.layers} "
              f"hidden={hidden} vocab={a.vocab}: {summary['shards']} rank files, {summary['tensors']} tensors, "
              f"{summary['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
