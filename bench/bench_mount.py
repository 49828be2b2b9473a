#!/usr/bin/env python3
"""One daemon and its mount against tmpfs and cp, in one run:

- import of a checkpoint of about --mb MB (one rank file) against `cp -r` of the same files
  to the same disk followed by `sync` of the copies (import also validates, hashes and fsyncs);
- saving the same checkpoint into the mount with `cp -r` (timed until the step is committed:
  checked, hashed, synced) against the same `cp -r` plus `sync`; as the baseline removes its
  previous copy before each run (untimed), each save first removes the step the previous one
  saved (`ptcfs rm`, untimed), so that neither side writes into memory the other reuses;
- a checkpoint saved per tensor (one `np.save` per tensor file, N = 5,000, 20,000 and 100,000
  files of 16 floats) until committed, with the seconds per file for each N (a linear save
  spends the same per file at every N), against the same files saved to the disk plus `sync`;
- that rank file read through the mount with 1 MiB and 128 KiB reads, on first read (its
  cached pages dropped first) and re-read, against the same bytes read from tmpfs;
- `ls -l` and `stat` of the full/ folder of a step holding 10,000 tensors, with the kernel's
  cached names dropped first and again warm, against the same folder copied to tmpfs;
- a 200 MB JSONL dataset: `dataset add` against `cat` of the file, and its rank view (every
  record, in the shuffled order) read through the mount against the same bytes on tmpfs.

    $PTCFS_PYTHON bench/bench_mount.py [--mb 1200] [--reads-only] [--tensor-files 5000,20000,100000]
                                          [--json FILE]
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_lib import (BUILD, Daemon, best, drop_dentries, drop_page_cache, first_and_reread, gbps, ptcgen, read_secs, row,
                       secs, standalone, timed)

SECTION = "mount"


def ten_thousand_tensors() -> dict:
    """10,000 small tensors over 100 layers (half split along dimension 0, half along 1)."""
    tensors = {}
    for i in range(10000):
        tensors[f"layers.{i // 100}.t{i % 100:02d}.weight"] = {"dtype": "F32", "shape": [64, 32],
                                                               "tp_dim": i % 2, "layer": i // 100}
    return {"parallelism": {"tp": 2, "pp": 2, "dp": 1}, "num_layers": 100, "tensors": tensors}


def reads(d: Daemon, ck: str, shm: str, rows: list, out: dict) -> None:
    nbytes = os.path.getsize(os.path.join(ck, "tp0-pp0.safetensors"))
    r = d.cli_json("import", ck, "--job", "bench", "--step", "1", "--json")  # warm-up: blob and rank file cached
    dst = os.path.join(d.root, "cp")

    def cp_sync():
        shutil.rmtree(dst, ignore_errors=True)
        t = timed(["cp", "-r", ck, dst])
        return t + timed(["sync", *glob.glob(dst + "/*")])

    steps = iter(range(2, 100))

    def imp():
        t0 = time.perf_counter()
        d.cli("import", ck, "--job", "bench", "--step", str(next(steps)))
        return time.perf_counter() - t0

    saved = {}

    def fresh(kind: str, step: str) -> None:
        # The step the previous run of this kind saved goes first, untimed (the baseline removes
        # its previous copy likewise): memory freed by one side is not the other's to reuse.
        if kind in saved:
            d.cli("rm", f"bench/{saved[kind]}")
        saved[kind] = step

    def save():
        # cp -r into the mount, until the daemon has committed the step (blobs synced).
        step = str(next(steps))
        fresh("cp", step)
        sd = os.path.join(d.mnt, "bench", step)
        t0 = time.perf_counter()
        os.mkdir(sd)
        subprocess.run(["cp", "-r", ck + "/.", sd], check=True)
        while not os.path.exists(os.path.join(sd, "full")):  # committed: the views are there
            time.sleep(0.002)
        return time.perf_counter() - t0

    def rss_kb() -> int:
        with open(f"/proc/{d.proc.pid}/status") as f:
            # Anonymous memory only: blob pages mapped to hash them are the page cache's.
            return next(int(l.split()[1]) for l in f if l.startswith("RssAnon:"))

    peak = {"kb": 0}

    def py_save():
        # The package's save: ptc.json, then the shard front to back (tensors read from the
        # source checkpoint's mapping), until committed; the daemon's RSS sampled meanwhile.
        import threading
        import ptcfs
        step = str(next(steps))
        fresh("py", step)
        ptc = ptcfs.load_ptc(ck)
        tensors = ptcfs.load_shard(ck, 0, 0, ptc)
        base, done = rss_kb(), threading.Event()

        def sample():
            while not done.is_set():
                peak["kb"] = max(peak["kb"], rss_kb() - base)
                time.sleep(0.005)
        th = threading.Thread(target=sample)
        th.start()
        t0 = time.perf_counter()
        sd = ptcfs.step_dir(d.mnt, "bench", step, create=True)
        ptcfs.save_ptc(sd, ptc)
        ptcfs.save_shard(sd, ptc, 0, 0, tensors)
        while not os.path.exists(os.path.join(sd, "full")):
            time.sleep(0.002)
        dt = time.perf_counter() - t0
        done.set()
        th.join()
        return dt

    t_imp, t_cp, t_save, t_py = best(3, imp), best(3, cp_sync), best(3, save), best(3, py_save)
    shutil.rmtree(dst, ignore_errors=True)
    rows.append(row(SECTION, f"import {nbytes / 1e9:.2f} GB vs cp -r + sync", gbps(r["bytes"], t_imp),
                    gbps(nbytes, t_cp), t_cp / t_imp, "> 1", t_cp / t_imp > 1))
    rows.append(row(SECTION, f"save {nbytes / 1e9:.2f} GB into the mount (cp -r, until committed) vs cp -r + sync",
                    gbps(nbytes, t_save), gbps(nbytes, t_cp), t_cp / t_save, ">= 0.6", t_cp / t_save >= 0.6))
    rows.append(row(SECTION, f"save {nbytes / 1e9:.2f} GB with ptcfs.save_shard (until committed) vs cp -r + sync",
                    gbps(nbytes, t_py), gbps(nbytes, t_cp), t_cp / t_py, ">= 0.8", t_cp / t_py >= 0.8))
    rows.append(row(SECTION, "daemon anonymous memory growth while saving, against the checkpoint size",
                    f"{peak['kb'] / 1024:.0f} MiB", f"{nbytes / 2**20:.0f} MiB", peak["kb"] * 1024 / nbytes, "", None))
    out["import_s"], out["cp_sync_s"], out["save_cp_s"], out["save_py_s"] = t_imp, t_cp, t_save, t_py
    out["save_rss_growth_bytes"] = peak["kb"] * 1024

    f = os.path.join(d.mnt, "bench", "1", "tp0-pp0.safetensors")
    tm = os.path.join(shm, "tp0-pp0.safetensors")
    shutil.copyfile(f, tm)
    subprocess.run(["sync"], check=True)
    import ptcfs
    import numpy as np

    def py_load(folder):
        def fn():
            t0 = time.perf_counter()
            for a in ptcfs.load_shard(folder, 0, 0).values():
                np.array(a, copy=True)  # every byte read, as a training process copies it to its device
            return time.perf_counter() - t0
        return fn
    drop = lambda: subprocess.run(["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"], check=False)  # noqa: E731
    shutil.copyfile(os.path.join(d.mnt, "bench", "1", "ptc.json"), os.path.join(shm, "ptc.json"))
    os.environ["PTCFS_DIRECT"] = "0"  # through FUSE: load_shard takes the direct path where it can
    try:
        t_mnt = best(3, py_load(os.path.join(d.mnt, "bench", "1")), before=drop)
    finally:
        del os.environ["PTCFS_DIRECT"]
    t_shm = best(3, py_load(shm))
    rows.append(row(SECTION, f"ptcfs.load_shard + a copy of every tensor, mount (first read) vs tmpfs", gbps(nbytes, t_mnt),
                    gbps(nbytes, t_shm), t_shm / t_mnt, "", None))
    out["py_load_mount_s"], out["py_load_tmpfs_s"] = t_mnt, t_shm
    # The direct path: the same shard, the daemon's blobs mapped by this process for the first
    # time (their pages cached, as the mount's first read has them), every tensor copied.
    assert ptcfs.direct.open(f, fallback=False).direct
    t_dir = best(3, py_load(os.path.join(d.mnt, "bench", "1")))
    rows.append(row(SECTION, f"ptcfs.direct: load_shard + a copy of every tensor, first read vs the same on tmpfs",
                    gbps(nbytes, t_dir), gbps(nbytes, t_shm), t_shm / t_dir, "", None))

    def tmpfs_read():  # the plainest baseline: the file read from tmpfs into one numpy buffer
        t0 = time.perf_counter()
        np.fromfile(tm, dtype=np.uint8)
        return time.perf_counter() - t0
    t_read = best(3, tmpfs_read)
    rows.append(row(SECTION, f"ptcfs.direct: load_shard + a copy of every tensor, first read vs np.fromfile on tmpfs",
                    gbps(nbytes, t_dir), gbps(nbytes, t_read), t_read / t_dir, ">= 0.9", t_read / t_dir >= 0.9))
    # Bandwidth alone: every byte copied into one buffer allocated (and touched) beforehand, on
    # both sides, so that neither pays for fresh pages.
    dst = np.ones(nbytes, dtype=np.uint8)

    def direct_into():
        t0 = time.perf_counter()
        with ptcfs.direct.open(f, fallback=False) as df:
            at = 0
            for a in df.tensors().values():
                b = a.reshape(-1).view(np.uint8)
                dst[at:at + b.size] = b
                at += b.size
        return time.perf_counter() - t0

    def tmpfs_into():
        t0 = time.perf_counter()
        with open(tm, "rb", buffering=0) as fh:
            fh.readinto(memoryview(dst))
        return time.perf_counter() - t0
    t_dinto, t_rinto = best(3, direct_into), best(3, tmpfs_into)
    rows.append(row(SECTION, f"ptcfs.direct: every tensor copied into a ready buffer vs readinto it from tmpfs",
                    gbps(nbytes, t_dinto), gbps(nbytes, t_rinto), t_rinto / t_dinto, ">= 0.9", t_rinto / t_dinto >= 0.9))
    out["py_load_direct_s"], out["tmpfs_fromfile_s"] = t_dir, t_read
    out["direct_into_s"], out["tmpfs_readinto_s"] = t_dinto, t_rinto
    dst = None  # the 1.2 GB buffer goes before the reads below allocate theirs
    # The whole file as bytes: File.read() (the rank file is more than one piece, header and
    # tensors, so read() copies it into a new bytes object) vs read() of the tmpfs copy.
    def direct_read_all():
        t0 = time.perf_counter()
        with ptcfs.direct.open(f, fallback=False) as df:
            got = df.read()
        dt = time.perf_counter() - t0
        assert type(got) is bytes and len(got) == nbytes, (type(got), len(got))
        return dt

    def tmpfs_read_all():
        t0 = time.perf_counter()
        with open(tm, "rb") as fh:
            got = fh.read()
        dt = time.perf_counter() - t0
        assert len(got) == nbytes
        return dt
    with ptcfs.direct.open(f, fallback=False) as df, open(tm, "rb") as fh:
        assert df.read() == fh.read()  # the same bytes, checked once outside the timings
    t_dread, t_tread = best(3, direct_read_all), best(3, tmpfs_read_all)
    rows.append(row(SECTION, f"ptcfs.direct: File.read() of the {nbytes / 2**30:.2f} GiB rank file vs read() on tmpfs",
                    gbps(nbytes, t_dread), gbps(nbytes, t_tread), t_tread / t_dread, ">= 0.9",
                    t_tread / t_dread >= 0.9))
    out["direct_read_s"], out["tmpfs_read_s"] = t_dread, t_tread
    view_reads(d, ck, shm, rows, out)


def view_reads(d: Daemon, ck: str, shm: str, rows: list, out: dict) -> None:
    """The rank file read through the mount (first read and re-read) against tmpfs, and the
    first read of the same bytes served by a minimal libfuse3 server (bench/fuse_ceiling.cc,
    from a mapping of the source file, cached) in the same run: the machine's FUSE ceiling."""
    f = os.path.join(d.mnt, "bench", "1", "tp0-pp0.safetensors")
    tm = os.path.join(shm, "tp0-pp0.safetensors")
    if not os.path.exists(tm):
        shutil.copyfile(f, tm)
    nbytes = os.path.getsize(f)
    src = os.path.join(ck, "tp0-pp0.safetensors")
    read_secs(src, 1 << 20)  # cached, as the daemon's blobs are after an import
    cmnt = tempfile.mkdtemp(prefix="ptcfs-ceiling-", dir="/var/tmp")
    # Its own session, as the harness starts ptcfsd: with the kernel's autogroup scheduling a
    # server in the reader's session is scheduled with it, which alone made it 1.4x faster here.
    server = subprocess.Popen([os.path.join(BUILD, "bench", "ptcfs_fuse_ceiling"), src, cmnt], start_new_session=True)
    try:
        cf = os.path.join(cmnt, "data")
        for _ in range(500):  # mounted: the file is there
            if os.path.exists(cf):
                break
            time.sleep(0.01)
        for block, label in ((1 << 20, "1 MiB"), (128 << 10, "128 KiB")):
            first, again, base = first_and_reread(f, tm, block)
            ceil = best(3, lambda: read_secs(cf, block), before=lambda: drop_page_cache(cf))
            rows.append(row(SECTION, f"{nbytes / 2**30:.2f} GiB view, first read ({label}) vs tmpfs",
                            gbps(nbytes, first), gbps(nbytes, base), base / first, ">= 0.5", base / first >= 0.5))
            rows.append(row(SECTION, f"the same bytes, first read ({label}) from a minimal libfuse3 server vs tmpfs",
                            gbps(nbytes, ceil), gbps(nbytes, base), base / ceil, "", None))
            rows.append(row(SECTION, f"{nbytes / 2**30:.2f} GiB view, first read ({label}) vs that server",
                            gbps(nbytes, first), gbps(nbytes, ceil), ceil / first, "", None))
            rows.append(row(SECTION, f"{nbytes / 2**30:.2f} GiB view, re-read ({label}) vs tmpfs", gbps(nbytes, again),
                            gbps(nbytes, base), base / again, ">= 0.9", base / again >= 0.9))
            out[f"read_{block}"] = {"first_s": first, "again_s": again, "tmpfs_s": base, "ceiling_first_s": ceil,
                                    "bytes": nbytes}
    finally:
        subprocess.run(["fusermount3", "-u", cmnt], check=False)
        server.wait(timeout=30)
        os.rmdir(cmnt)


def many_tensors(d: Daemon, root: str, shm: str, rows: list, out: dict) -> None:
    ptc = ten_thousand_tensors()
    ck = os.path.join(root, "ck10k")
    ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
    d.cli("import", ck, "--job", "many", "--step", "1")
    direct_open_latency(d, shm, rows, out, strided=False)
    # The same re-cut on a daemon that leaves re-cut slices strided (--compact-below 1): half of the
    # tensors are then gathered on every read, 128 pieces each.
    ds = Daemon(os.path.join(root, "d-strided"), extra_flags=["--compact-below", "1"])
    try:
        ds.start()
        ds.cli("import", ck, "--job", "many", "--step", "1")
        direct_open_latency(ds, shm, rows, out, strided=True)
    finally:
        ds.stop()
    full = os.path.join(d.mnt, "many", "1", "full")
    tm = os.path.join(shm, "full")
    shutil.copytree(full, tm)
    names = sorted(os.listdir(full))
    assert len(names) == 10000, len(names)
    commands = {"ls -l": lambda folder: timed(["ls", "-l", folder]),
                "stat": lambda folder: timed(["stat", "--format=%s", *[os.path.join(folder, n) for n in names]])}
    for what, cmd in commands.items():
        cold = best(3, lambda: cmd(full), before=drop_dentries)
        warm = best(3, lambda: cmd(full))
        base = best(3, lambda: cmd(tm))
        rows.append(row(SECTION, f"{what} of 10,000 tensor files, cold vs tmpfs", secs(cold), secs(base), base / cold,
                        "", None))
        rows.append(row(SECTION, f"{what} of 10,000 tensor files, warm vs tmpfs", secs(warm), secs(base), base / warm,
                        "", None))
        out[what] = {"cold_s": cold, "warm_s": warm, "tmpfs_s": base}


def direct_open_latency(d: Daemon, shm: str, rows: list, out: dict, strided: bool) -> None:
    """The map of a 10,000-tensor shard through ptcfs.direct (many/1 re-cut to tp=1,pp=1: the
    halves of the 5,000 tensors split along dimension 1 interleave row by row), and its tensors,
    against opening the same file on tmpfs with the package's reader. `strided`: the daemon left
    the re-cut slices strided (5,000 tensors gathered from 128 pieces each), else it compacted
    them (every tensor one piece)."""
    import numpy as np
    import ptcfs
    d.cli("repartition", "--job", "many", "--step", "1", "--to", "tp=1,pp=1,dp=1")
    f = os.path.join(d.mnt, "many", "1", "tp0-pp0.safetensors")
    tm = os.path.join(shm, "many-tp0-pp0.safetensors")
    shutil.copyfile(f, tm)
    with ptcfs.direct.open(f, fallback=False) as df:
        got, want = df.tensors(), ptcfs.safetensors.SafetensorsFile(tm).tensors()
        gathered = len(df.gathered)
        assert gathered == (5000 if strided else 0), gathered
        assert all(np.array_equal(got[n], want[n]) for n in want)  # the same arrays, checked once
        del got, want

    def direct_open():
        t0 = time.perf_counter()
        with ptcfs.direct.open(f, fallback=False) as df:
            dt = time.perf_counter() - t0
            assert df.direct
        return dt

    def direct_tensors():
        t0 = time.perf_counter()
        with ptcfs.direct.open(f, fallback=False) as df:
            n = len(df.tensors())
        assert n == 10000, n
        return time.perf_counter() - t0

    def tmpfs_tensors():
        t0 = time.perf_counter()
        n = len(ptcfs.safetensors.SafetensorsFile(tm).tensors())
        assert n == 10000, n
        return time.perf_counter() - t0
    t_open, t_all, t_base = best(5, direct_open), best(5, direct_tensors), best(5, tmpfs_tensors)
    kind = "left strided (5,000 tensors gathered)" if strided else "compacted by the daemon"
    rows.append(row(SECTION, f"ptcfs.direct.open of a 10,000-tensor shard re-cut, {kind} (its map) vs tensors() "
                    "on tmpfs", secs(t_open), secs(t_base), t_base / t_open, "", None))
    rows.append(row(SECTION, "ptcfs.direct.open + tensors() of that shard vs the same on tmpfs", secs(t_all),
                    secs(t_base), t_base / t_all, ">= 0.8" if strided else "",
                    t_base / t_all >= 0.8 if strided else None))
    key = "strided_" if strided else ""
    out[f"direct_open_10k_{key}s"], out[f"direct_tensors_10k_{key}s"] = t_open, t_all
    out[f"tmpfs_tensors_10k_{key}s"] = t_base


def dataset(d: Daemon, root: str, shm: str, rows: list, out: dict, lines: int = 200000) -> None:
    """A JSONL dataset of `lines` records of 0.5-1.5 kB: `dataset add` (every line parsed as
    JSON) against reading the file, and its rank view (every record, shuffled) against the
    same bytes on tmpfs."""
    src = os.path.join(root, "train.jsonl")
    text = "abcdefghijklmnopqrstuvwxyz" * 60
    with open(src, "w") as f:
        for i in range(lines):
            f.write(json.dumps({"id": i, "text": text[:500 + (i * 7919) % 1000]}) + "\n")
    nbytes = os.path.getsize(src)
    cat = best(3, lambda: timed(["cat", src]))
    t0 = time.perf_counter()
    d.cli("dataset", "add", "--job", "data", "--name", "train", "--format", "jsonl", "--seed", "1",
          "--global-batch", "64", "--dp", "1", src)
    add = time.perf_counter() - t0
    rows.append(row(SECTION, f"dataset add, {nbytes / 1e6:.0f} MB JSONL vs cat of the file", gbps(nbytes, add),
                    gbps(nbytes, cat), cat / add, "", None))
    view = os.path.join(d.mnt, "data", "data", "train", "dp0.jsonl")
    vbytes = os.path.getsize(view)
    tm = os.path.join(shm, "dp0.jsonl")
    shutil.copyfile(view, tm)
    first, again, base = first_and_reread(view, tm, 1 << 20)
    rows.append(row(SECTION, "dataset rank view (shuffled records), first read vs tmpfs", gbps(vbytes, first),
                    gbps(vbytes, base), base / first, "", None))
    rows.append(row(SECTION, "dataset rank view (shuffled records), re-read vs tmpfs", gbps(vbytes, again),
                    gbps(vbytes, base), base / again, "", None))
    out["dataset"] = {"bytes": nbytes, "view_bytes": vbytes, "add_s": add, "cat_s": cat, "first_s": first,
                      "again_s": again, "tmpfs_s": base}


def per_tensor_saves(d: Daemon, root: str, rows: list, out: dict, counts=(5000, 20000, 100000)) -> None:
    """A checkpoint saved per tensor into the mount: ptc.json of N tensors of 16 floats (tp=pp=dp=1),
    then one np.save per tensor file in turn, timed until the step is committed, against np.save of
    the same files into a folder of the disk plus sync. Best of two runs up to 20,000 files, one
    above; each step is removed once measured."""
    import numpy as np
    arr = np.arange(16, dtype=np.float32)
    first = None
    out["per_tensor"] = {}
    runs = iter(range(1, 1000))
    for n in counts:
        ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1,
               "tensors": {f"t{i:06d}": {"dtype": "F32", "shape": [16]} for i in range(n)}}

        def save():
            job = f"pertensor{next(runs)}"
            sd = os.path.join(d.mnt, job, "1")
            t0 = time.perf_counter()
            os.makedirs(sd)
            with open(os.path.join(sd, "ptc.json"), "w") as f:
                json.dump(ptc, f)
            os.mkdir(os.path.join(sd, "tp0-pp0"))
            for i in range(n):
                np.save(os.path.join(sd, "tp0-pp0", f"t{i:06d}.npy"), arr)
            while not os.path.exists(os.path.join(sd, "full")):  # committed
                time.sleep(0.005)
            took = time.perf_counter() - t0
            d.cli("rm", f"{job}/1")
            return took

        def to_disk():
            disk = os.path.join(root, "npy")
            os.makedirs(os.path.join(disk, "tp0-pp0"))
            t0 = time.perf_counter()
            with open(os.path.join(disk, "ptc.json"), "w") as f:
                json.dump(ptc, f)
            for i in range(n):
                np.save(os.path.join(disk, "tp0-pp0", f"t{i:06d}.npy"), arr)
            subprocess.run(["sync"], check=True)
            took = time.perf_counter() - t0
            shutil.rmtree(disk)
            return took

        k = 2 if n <= 20000 else 1
        took, base = best(k, save), best(k, to_disk)
        per, per_base = took / n, base / n
        print(f"  per tensor: {n} files in {took:.2f} s, {per * 1e6:.0f} us per file (disk: {per_base * 1e6:.0f} us)",
              flush=True)
        rows.append(row(SECTION, f"save {n:,} per-tensor npy files (np.save each, until committed) vs disk + sync",
                        f"{per * 1e6:.0f} us/file", f"{per_base * 1e6:.0f} us/file", base / took, "", None))
        if first is None:
            first = (counts[0], per)
        else:
            rows.append(row(SECTION, f"time per file saving {n:,} per-tensor files vs {first[0]:,} (linear: 1)",
                            f"{per * 1e6:.0f} us", f"{first[1] * 1e6:.0f} us", first[1] / per, ">= 0.67",
                            first[1] / per >= 0.67))
        out["per_tensor"][str(n)] = {"save_s": took, "disk_s": base, "save_s_per_file": per,
                                     "disk_s_per_file": per_base}


def run(mb: float, root: str, reads_only: bool = False, tensor_files=(5000, 20000, 100000)) -> tuple:
    rows, out = [], {}
    shm = tempfile.mkdtemp(prefix="ptcfs-bench-", dir="/dev/shm")
    try:
        ck = os.path.join(root, "ck")
        ptc = ptcgen.make_ptc("gpt", 1, 1, 1, 8, ptcgen.hidden_for_target("gpt", 1, 1, 1, 8, 32000, int(mb * 1e6)),
                              32000)
        ptcgen.write_checkpoint(ck, ptc, ptcgen.full_tensors(ptc, 0))
        d = Daemon(os.path.join(root, "d"))
        try:
            d.start()
            if reads_only:
                d.cli("import", ck, "--job", "bench", "--step", "1")
                view_reads(d, ck, shm, rows, out)
                return rows, out
            reads(d, ck, shm, rows, out)
            shutil.rmtree(ck)
            many_tensors(d, root, shm, rows, out)
            dataset(d, root, shm, rows, out)
            if tensor_files:
                per_tensor_saves(d, root, rows, out, tensor_files)
        finally:
            d.stop()
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    return rows, out


def main() -> int:
    def configure(ap):
        ap.add_argument("--mb", type=float, default=1200, help="size of the read file in MB (at least 1 GiB)")
        ap.add_argument("--reads-only", action="store_true",
                        help="only the view's reads through the mount (import once, no other measure)")
        ap.add_argument("--tensor-files", default="5000,20000,100000",
                        help="per-tensor saves of these many files ('' for none)")
    return standalone(__doc__, configure,
                      lambda a, root: run(a.mb, root, a.reads_only,
                                          tuple(int(n) for n in a.tensor_files.split(",") if n)))


if __name__ == "__main__":
    sys.exit(main())
