#!/usr/bin/env python3
"""ptcfs against what users do today, on the same model and disk: for each model size, a
GPT-style checkpoint saved at tp=4,pp=2 is re-sharded to tp=2,pp=4 by

- bench/torch_reshard.py (Debian's torch: load every rank file, concatenate the full tensors,
  split them again, write new rank files), and
- `ptcfs repartition` of the same checkpoint, imported beforehand; also with every new rank
  file then read once through the mount (what a restarting job reads).

The torch script's files must equal the mount's byte for byte (checked). Writes a plot of
time against model size (gnuplot, PNG).

    $PTCFS_PYTHON bench/bench_torch.py [--sizes 0.25,0.5,1,2] [--plot FILE] [--json FILE]
"""

import filecmp
import os
import shutil
import subprocess
import sys
import time

from bench_lib import HERE, Daemon, ptcgen, row, secs, standalone

SECTION = "torch"
FROM, TO = (4, 2), (2, 4)


def one_size(d: Daemon, root: str, gb: float, step: str) -> dict:
    tp, pp = FROM
    hidden = ptcgen.hidden_for_target("gpt", tp, pp, 1, 8, 32000, int(gb * 1e9))
    ptc = ptcgen.make_ptc("gpt", tp, pp, 1, 8, hidden, 32000)
    ck, out = os.path.join(root, "ck"), os.path.join(root, "torch-out")
    summary = ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    d.cli("import", ck, "--job", "torch", "--step", step)  # also brings the rank files into the page cache
    subprocess.run(["sync"], check=True)

    t0 = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(HERE, "torch_reshard.py"), ck, out, "--tp", str(TO[0]),
                    "--pp", str(TO[1])], check=True)
    t_torch = time.perf_counter() - t0

    t0 = time.perf_counter()
    d.cli("repartition", "--job", "torch", "--step", step, "--to", f"tp={TO[0]},pp={TO[1]},dp=1")
    t_ptcfs = time.perf_counter() - t0
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    mnt = d.step_dir("torch", step)
    t0 = time.perf_counter()
    subprocess.run(["cat", *[os.path.join(mnt, f) for f in files]], check=True, stdout=subprocess.DEVNULL)
    t_read = time.perf_counter() - t0
    bad = [f for f in files + ["ptc.json"] if not filecmp.cmp(os.path.join(out, f), os.path.join(mnt, f), shallow=False)]
    if bad or len(files) != TO[0] * TO[1]:
        raise SystemExit(f"bench_torch: the torch script and the mount disagree on {bad or files}")
    shutil.rmtree(ck)
    shutil.rmtree(out)
    return {"bytes": summary["bytes"], "torch_s": t_torch, "repartition_s": t_ptcfs,
            "repartition_and_read_s": t_ptcfs + t_read}


def plot(points: list, path: str) -> None:
    data = path + ".dat"
    with open(data, "w") as f:
        for p in points:
            f.write(f"{p['bytes'] / 1e9:.3f} {p['torch_s']:.4f} {p['repartition_s']:.4f} "
                    f"{p['repartition_and_read_s']:.4f}\n")
    script = f"""
set terminal pngcairo size 800,500 font ",11"
set output "{path}"
set title "Re-sharding tp=4,pp=2 -> tp=2,pp=4 (same machine, same disk)"
set xlabel "model size (GB)"
set ylabel "seconds (log scale)"
set logscale y
set key top left
set grid
plot "{data}" using 1:2 with linespoints lw 2 title "torch script (load, concatenate, split, save)", \\
     "{data}" using 1:4 with linespoints lw 2 title "ptcfs repartition + read every new file", \\
     "{data}" using 1:3 with linespoints lw 2 title "ptcfs repartition"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data)


def run(sizes: list, root: str, plot_path: str) -> tuple:
    rows, points = [], []
    d = Daemon(os.path.join(root, "d"))
    try:
        d.start()
        for i, gb in enumerate(sizes):
            p = one_size(d, root, gb, str(i + 1))
            points.append(p)
            print(f"  {p['bytes'] / 1e9:.2f} GB: torch {p['torch_s']:.2f} s, ptcfs repartition "
                  f"{p['repartition_s']:.3f} s, + reading the new files {p['repartition_and_read_s']:.2f} s", flush=True)
    finally:
        d.stop()
    big = points[-1]
    size = f"{big['bytes'] / 1e9:.2f} GB"
    rows.append(row(SECTION, f"re-shard {size}: ptcfs repartition vs torch script", secs(big["repartition_s"]),
                    secs(big["torch_s"]), big["torch_s"] / big["repartition_s"], "> 1", big["torch_s"] > big["repartition_s"]))
    rows.append(row(SECTION, f"re-shard {size}: repartition + read new files vs torch", secs(big["repartition_and_read_s"]),
                    secs(big["torch_s"]), big["torch_s"] / big["repartition_and_read_s"], "> 1",
                    big["torch_s"] > big["repartition_and_read_s"]))
    if plot_path:
        plot(points, plot_path)
    return rows, points


def main() -> int:
    def configure(ap):
        ap.add_argument("--sizes", default="0.25,0.5,1,2", help="model sizes in GB, comma-separated")
        ap.add_argument("--plot", metavar="PNG", help="write the plot here")
    return standalone(__doc__, configure, lambda a, root: run([float(x) for x in a.sizes.split(",")], root, a.plot))


if __name__ == "__main__":
    sys.exit(main())
