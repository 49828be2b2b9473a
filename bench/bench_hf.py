#!/usr/bin/env python3
"""Hugging Face transformers on the mount (issue 44), against the baseline in the same run:

- `AutoModelForCausalLM.from_pretrained` of a step's `hf/` view, the step re-cut to tp=2,pp=2 (each
  tensor assembled from four shards), against `from_pretrained` of the same model's own folder on the
  same disk, both with the page cache dropped first (cold) and both timed inside the loading
  process (load only, not the interpreter's start);
- `save_pretrained` into the mount (a new step, committed when it returns) against
  `save_pretrained` into a folder on the same disk plus `sync`.

A Llama of about --mb MB in bfloat16 (grouped-query attention, 8 layers).

    $PTCFS_PYTHON bench/bench_hf.py [--mb 600]
"""

import json
import os
import subprocess
import sys

from bench_lib import Daemon, row, secs, standalone

SECTION = "hf"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

_LOAD = r"""
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
t0 = time.perf_counter()
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype="auto")
dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "sum": float(sum(p.float().sum() for p in m.parameters()))}))
"""

_SAVE = r"""
import json, os, subprocess, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg = json.loads(sys.argv[2])
torch.manual_seed(0)
m = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16)
t0 = time.perf_counter()
m.save_pretrained(sys.argv[1])
subprocess.run(["sync"], check=True)
print(json.dumps({"s": time.perf_counter() - t0}))
"""


def config_for(mb: float) -> dict:
    hidden = 256
    while True:
        inter = int(hidden * 2.75) // 64 * 64
        params = 2 * 32000 * hidden + 8 * (2 * hidden * hidden + 2 * hidden * hidden // 2 + 3 * hidden * inter)
        if params * 2 >= mb * 1e6 or hidden >= 8192:
            break
        hidden += 256
    return dict(vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=8,
                num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128, tie_word_embeddings=False,
                max_position_embeddings=256)


def drop_caches() -> None:
    """Every clean page of the machine's cache goes (root): the model's files and the store's blobs
    are read from disk again."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def child(code: str, *args) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env={**os.environ, **ENV}, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(mb: float, root: str) -> tuple:
    rows, out = [], {}
    cfg = config_for(mb)
    src = os.path.join(root, "src")
    t_save_disk = child(_SAVE, src, json.dumps(cfg))["s"]
    nbytes = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        d.cli("import", src, "--format", "hf", "--template", "llama", "--job", "b", "--step", "1",
              "--to", "tp=2,pp=2,dp=1")
        hf = os.path.join(d.mnt, "b", "1", "hf")
        loads = {}
        for name, path in (("disk", src), ("mount", hf)):
            best = None
            for _ in range(2):
                drop_caches()
                r = child(_LOAD, path)
                best = r if best is None or r["s"] < best["s"] else best
            loads[name] = best
        assert loads["disk"]["sum"] == loads["mount"]["sum"], loads
        rows.append(row(SECTION, f"from_pretrained {nbytes / 1e9:.2f} GB: hf/ of a tp=2,pp=2 step vs its own folder "
                        "(cold)", secs(loads["mount"]["s"]), secs(loads["disk"]["s"]),
                        loads["disk"]["s"] / loads["mount"]["s"], ">= 0.8", loads["disk"]["s"] / loads["mount"]["s"] >= 0.8))
        os.makedirs(os.path.join(d.mnt, "b", "2"))
        t_save_mount = child(_SAVE, os.path.join(d.mnt, "b", "2"), json.dumps(cfg))["s"]
        rows.append(row(SECTION, f"save_pretrained {nbytes / 1e9:.2f} GB into the mount (committed) vs a folder + sync",
                        secs(t_save_mount), secs(t_save_disk), t_save_disk / t_save_mount, "", None))
        out.update(bytes=nbytes, config=cfg, load_mount_s=loads["mount"]["s"], load_disk_s=loads["disk"]["s"],
                   save_mount_s=t_save_mount, save_disk_s=t_save_disk)
    finally:
        d.stop()
    return rows, out


def main() -> int:
    def configure(ap):
        ap.add_argument("--mb", type=float, default=600, help="model size in MB (bfloat16)")
    return standalone(__doc__, configure, lambda a, root: run(a.mb, root))


if __name__ == "__main__":
    sys.exit(main())
