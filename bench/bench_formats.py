#!/usr/bin/env python3
"""Checkpoint formats in and out (issue 15's budgets), against baselines in the same run:

- `ptcfs import --format hf` of a Hugging Face style checkpoint of about --mb MB (shards of
  500 MB with an index) against `cp -r` of its files to the same disk plus `sync` (import also
  parses, hashes and fsyncs): budget >= 0.8;
- `ptcfs export --format hf` of the step against `cp -r` of its full views out of the same mount
  plus `sync` (both read through FUSE).

    $PTCFS_PYTHON bench/bench_formats.py [--mb 2000]
"""

import json
import os
import shutil
import subprocess
import sys
import time

from bench_lib import Daemon, best, gbps, ptcgen, row, standalone

SECTION = "formats"
TEMPLATE = {"name": "bench", "rules": [{"match": "layers.{layer}.*"}, {"match": "*"}]}


def write_hf(dirpath: str, mb: float) -> int:
    """A GPT-style checkpoint of about `mb` MB as Hugging Face shards of <= 500 MB and an index."""
    h = ptcgen.hidden_for_target("gpt", 1, 1, 1, 8, 32000, int(mb * 1e6))
    ptc = ptcgen.make_ptc("gpt", 1, 1, 1, 8, h, 32000)
    full = ptcgen.full_tensors(ptc, 0)
    os.makedirs(dirpath)
    shards, cur, size = [], {}, 0
    for name in sorted(full):
        n = full[name].nbytes
        if cur and size + n > 500e6:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = (ptc["tensors"][name]["dtype"], full[name])
        size += n
    shards.append(cur)
    weight_map, total = {}, 0
    for k, s in enumerate(shards):
        f = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        total += ptcgen.write_safetensors(os.path.join(dirpath, f), s)
        weight_map.update({n: f for n in s})
    with open(os.path.join(dirpath, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh)
    return total


def run(mb: float, root: str) -> tuple:
    rows, out = [], {}
    hf = os.path.join(root, "hf")
    nbytes = write_hf(hf, mb)
    tmpl = os.path.join(root, "template.json")
    with open(tmpl, "w") as f:
        json.dump(TEMPLATE, f)
    d = Daemon(os.path.join(root, "d"))
    steps = iter(range(1, 100))
    try:
        d.start()

        def imp():
            t0 = time.perf_counter()
            d.cli("import", hf, "--format", "hf", "--template", tmpl, "--job", "bench", "--step", str(next(steps)))
            return time.perf_counter() - t0

        def cp_sync():
            dst = os.path.join(root, "cp")
            shutil.rmtree(dst, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            t0 = time.perf_counter()
            subprocess.run(["cp", "-r", hf, dst], check=True)
            subprocess.run(["sync"], check=True)
            return time.perf_counter() - t0

        t_imp, t_cp = best(2, imp), best(2, cp_sync)
        rows.append(row(SECTION, f"import --format hf {nbytes / 1e9:.2f} GB vs cp -r + sync", gbps(nbytes, t_imp),
                        gbps(nbytes, t_cp), t_cp / t_imp, ">= 0.8", t_cp / t_imp >= 0.8))

        exports = iter(range(100))

        def export():
            dst = os.path.join(root, f"export{next(exports)}")
            t0 = time.perf_counter()
            d.cli("export", "bench/1", dst, "--format", "hf")
            subprocess.run(["sync"], check=True)
            dt = time.perf_counter() - t0
            shutil.rmtree(dst)
            return dt

        def cp_views():
            dst = os.path.join(root, "views")
            shutil.rmtree(dst, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run(["cp", "-r", os.path.join(d.mnt, "bench", "1", "full"), dst], check=True)
            subprocess.run(["sync"], check=True)
            return time.perf_counter() - t0

        t_exp, t_views = best(2, export), best(2, cp_views)
        rows.append(row(SECTION, f"export --format hf {nbytes / 1e9:.2f} GB vs cp -r of the full views + sync",
                        gbps(nbytes, t_exp), gbps(nbytes, t_views), t_views / t_exp, "", None))
        out.update(bytes=nbytes, import_s=t_imp, cp_sync_s=t_cp, export_s=t_exp, cp_views_s=t_views)
    finally:
        d.stop()
    return rows, out


def main() -> int:
    def configure(ap):
        ap.add_argument("--mb", type=float, default=2000, help="checkpoint size in MB")
    return standalone(__doc__, configure, lambda a, root: run(a.mb, root))


if __name__ == "__main__":
    sys.exit(main())
