#!/usr/bin/env python3
"""What users do today without ptcfs: re-shard a checkpoint with torch, as Megatron's
checkpoint converters do. Loads every old rank file, concatenates each tensor's TP slices
into the full tensor (fused parts separately, padding dropped), then splits the full
tensors again for the new config and writes new rank files and ptc.json.

    $PTCFS_PYTHON bench/torch_reshard.py SRC DST --tp T --pp P [--dp D]

SRC is a checkpoint directory (docs/FORMATS.md: ptc.json + tp{t}-pp{p}.safetensors). The
files written are canonical safetensors (sorted header, tensors in name order), so they
equal the mount's view files byte for byte: bench/bench_torch.py checks that they do.
Like torch.save, it does not fsync what it writes.
"""

import argparse
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "tools"))
from ptcgen import padded_size, stages_of  # noqa: E402  (stage and padding rules of ptc.json)

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def load_safetensors(path: str) -> dict:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        dt = DTYPES[h["dtype"]]
        count = (e - b) // torch.tensor([], dtype=dt).element_size()
        t = torch.frombuffer(data, dtype=dt, count=count, offset=8 + n + b) if count else torch.empty(0, dtype=dt)
        out[name] = t.reshape(h["shape"])
    return out


def save_safetensors(path: str, tensors: dict) -> None:
    names = sorted(tensors)
    header, off = {}, 0
    for name in names:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"data_offsets": [off, off + size], "dtype": NAMES[t.dtype], "shape": list(t.shape)}
        off += size
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in names:
            t = tensors[name].contiguous()
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy())


def gather(spec: dict, pieces: list) -> torch.Tensor:
    """The full logical tensor from the TP ranks' slices."""
    k = spec.get("tp_dim")
    if k is None:
        return pieces[0]
    parts = spec.get("parts", 1)
    chunks = [torch.chunk(p, parts, dim=k) for p in pieces]
    full = torch.cat([torch.cat([c[j] for c in chunks], dim=k) for j in range(parts)], dim=k)
    return full.narrow(k, 0, spec["shape"][k])


def split(spec: dict, full: torch.Tensor, tp: int) -> list:
    """Each new TP rank's slice of a full logical tensor."""
    k = spec.get("tp_dim")
    if k is None:
        return [full] * tp
    if "pad_to" in spec:
        size = padded_size(full.shape[k], spec["pad_to"], tp)
        pad = list(full.shape)
        pad[k] = size - full.shape[k]
        full = torch.cat([full, torch.zeros(pad, dtype=full.dtype)], dim=k)
    parts = torch.chunk(full, spec.get("parts", 1), dim=k)
    per_part = [torch.chunk(p, tp, dim=k) for p in parts]
    return [torch.cat([pp[t] for pp in per_part], dim=k) for t in range(tp)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--dp", type=int, default=1)
    a = ap.parse_args()
    with open(os.path.join(a.src, "ptc.json")) as f:
        ptc = json.load(f)
    old = ptc["parallelism"]
    layers = ptc["num_layers"]
    shards = {(t, p): load_safetensors(os.path.join(a.src, f"tp{t}-pp{p}.safetensors"))
              for p in range(old["pp"]) for t in range(old["tp"])}
    new = {(t, p): {} for p in range(a.pp) for t in range(a.tp)}
    for name, spec in ptc["tensors"].items():
        p0 = stages_of(spec, layers, old["pp"])[0]
        full = gather(spec, [shards[(t, p0)][name] for t in range(old["tp"])])
        slices = split(spec, full, a.tp)
        for p in stages_of(spec, layers, a.pp):
            for t in range(a.tp):
                new[(t, p)][name] = slices[t]
    os.makedirs(a.dst, exist_ok=True)
    for (t, p), tensors in new.items():
        save_safetensors(os.path.join(a.dst, f"tp{t}-pp{p}.safetensors"), tensors)
    ptc["parallelism"] = {"tp": a.tp, "pp": a.pp, "dp": a.dp}
    with open(os.path.join(a.dst, "ptc.json"), "w") as f:
        json.dump(ptc, f, indent=2, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
