"""Readers under load: many threads and processes reading random views and byte ranges of one
step and checking every byte, while the step is repartitioned back and forth, other steps are
saved into the mount and removed, and a dataset's progress moves. Used by test_load.py (short)
and bench/bench_soak.py (ten minutes, latency percentiles).

Every read is checked against the versions the file may be: a full view (`full/<name>.npy`) is
the same in every layout; a rank file is one of the layouts' renderings (by ptcgen). A reader
narrows the candidates with each read of an open file, so a file whose version changed while it
was open, or a byte that is no version's, fails it."""

import multiprocessing
import os
import random
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

import numpy as np

import ptcgen
from dataset_util import write_jsonl
from ptcfs_harness import Checkpoint, check_npy, read_all

READ_SIZES = (1, 7, 4096, 65536, 1 << 20)
LAYOUTS = ((2, 2), (1, 2))  # what the step is repartitioned between


def rank_file_versions(ck: Checkpoint) -> Dict[str, List[bytes]]:
    """{tp{t}-pp{p}.safetensors: [its bytes in each layout that has it]}."""
    out: Dict[str, List[bytes]] = {}
    for tp, pp in LAYOUTS:
        ptc = dict(ck.ptc, parallelism={"tp": tp, "pp": pp, "dp": 1})
        with tempfile.TemporaryDirectory() as d:
            ptcgen.write_checkpoint(d, ptc, ck.full)
            for t in range(tp):
                for p in range(pp):
                    name = ptcgen.shard_file(t, p)
                    with open(os.path.join(d, name), "rb") as f:
                        out.setdefault(name, []).append(f.read())
    return out


def full_views(step_dir: str, ck: Checkpoint) -> Dict[str, List[bytes]]:
    """{full/<name>.npy: [its bytes]}, read from the mount once and checked against the oracle."""
    out = {}
    for name, arr in ck.full.items():
        rel = os.path.join("full", ptcgen.npy_relpath(name))
        check_npy(os.path.join(step_dir, rel), arr, rel)
        out[rel] = [read_all(os.path.join(step_dir, rel))]
    return out


def read_loop(step_dir: str, refs: Dict[str, List[bytes]], seconds: float, seed: int) -> dict:
    """Random opens and reads for `seconds`; raises AssertionError at the first wrong byte. Returns
    counts and a sample of read latencies (seconds)."""
    rnd = random.Random(seed)
    names = sorted(refs)
    st = {"opens": 0, "reads": 0, "bytes": 0, "missing": 0, "lat": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rel = rnd.choice(names)
        try:
            fd = os.open(os.path.join(step_dir, rel), os.O_RDONLY)
        except FileNotFoundError:
            st["missing"] += 1  # a rank file of the other layout
            continue
        st["opens"] += 1
        try:
            size = os.fstat(fd).st_size
            cands = [c for c in refs[rel] if len(c) == size]
            assert cands, f"{rel}: size {size} is no version's ({[len(c) for c in refs[rel]]})"
            for _ in range(rnd.randint(1, 8)):
                off = rnd.randrange(size)
                n = rnd.choice(READ_SIZES)
                t0 = time.perf_counter()
                data = os.pread(fd, n, off)
                lat = time.perf_counter() - t0
                assert len(data) == min(n, size - off), f"{rel}: short read at {off}: {len(data)} of {n}"
                cands = [c for c in cands if c[off:off + n] == data]
                assert cands, f"{rel}: bytes {off}+{len(data)} are no version's, or the version changed while open"
                st["reads"] += 1
                st["bytes"] += len(data)
                if len(st["lat"]) < 20000:
                    st["lat"].append(lat)
                elif rnd.random() < 0.05:
                    st["lat"][rnd.randrange(20000)] = lat
        finally:
            os.close(fd)
    return st


def _process_reader(args):
    return read_loop(*args)


def rss_anon_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("RssAnon:")).split()[1])


class Load:
    """The step gpt/1 of `d` under readers (threads and processes) and changes (mutate())."""

    def __init__(self, d, root: str, seed: int = 7):
        self.d = d
        self.root = root
        self.ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=4, hidden=256, vocab=1000, seed=seed)
        self.small = Checkpoint(os.path.join(root, "small"), tp=1, pp=1, layers=2, hidden=64, vocab=300, seed=1)
        d.cli("import", self.ck.path, "--job", "gpt", "--step", "1")
        self.step_dir = d.step_dir("gpt", "1")
        self.refs = {**full_views(self.step_dir, self.ck), **rank_file_versions(self.ck)}
        write_jsonl(os.path.join(root, "train.jsonl"), 4096, seed=3)
        d.cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 5,
              "--global-batch", 16, "--dp", 2, os.path.join(root, "train.jsonl"))
        self.changes = {"repartition": 0, "save": 0, "rm": 0, "progress": 0}
        self._layout = 0
        self._consumed = 0

    def mutate(self) -> None:
        """One round: a repartition to the other layout, a step saved into the mount (cp -r) and
        removed, a dataset progress record."""
        self._layout ^= 1
        tp, pp = LAYOUTS[self._layout]
        self.d.cli("repartition", "--job", "gpt", "--step", "1", "--to", f"tp={tp},pp={pp},dp=1")
        self.changes["repartition"] += 1
        n = self.changes["save"]
        sd = os.path.join(self.d.mnt, "saves", str(n))
        os.makedirs(sd, exist_ok=True)
        subprocess.run(["cp", "-r", self.small.path + "/.", sd], check=True)
        deadline = time.monotonic() + 60
        while self.d.cli_json("ls", f"saves/{n}", "--json")["state"] != "committed":
            assert time.monotonic() < deadline, f"saves/{n} never committed\n{self.d.log_tail()}"
            time.sleep(0.05)
        self.changes["save"] += 1
        self.d.cli("rm", f"saves/{n}")
        self.changes["rm"] += 1
        self._consumed = (self._consumed + 16) % 4096
        self.d.cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", self._consumed)
        self.changes["progress"] += 1

    def run(self, seconds: float, threads: int = 16, processes: int = 16) -> dict:
        """Readers for `seconds` while mutate() runs in a loop (run_readers)."""
        self.mutate()  # one round first: every kind of change has happened once
        r = run_readers(self.step_dir, self.refs, seconds, threads, processes, during=self.mutate,
                        pid=self.d.proc.pid)
        r["changes"] = dict(self.changes)
        return r


def run_readers(step_dir: str, refs: Dict[str, List[bytes]], seconds: float, threads: int = 16,
                processes: int = 16, during: Optional[Callable[[], None]] = None, pid: Optional[int] = None) -> dict:
    """`threads` reader threads and `processes` reader processes (read_loop) for `seconds`,
    calling during() in a loop meanwhile. Merged stats: counts, latency percentiles (seconds),
    and the anonymous memory (RssAnon, kB) of process `pid` every half second."""
    results: List[dict] = []
    errors: List[BaseException] = []
    rss: List[int] = []
    sampling = threading.Event()

    def sampler():
        while pid is not None and not sampling.wait(0.5):
            try:
                rss.append(rss_anon_kb(pid))
            except OSError:  # the daemon is gone: the readers will say why
                return

    def thread_reader(i):
        try:
            results.append(read_loop(step_dir, refs, seconds, 1000 + i))
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        pending = pool.map_async(_process_reader, [(step_dir, refs, seconds, 2000 + i) for i in range(processes)])
        ts = [threading.Thread(target=thread_reader, args=(i,)) for i in range(threads)]
        ts.append(threading.Thread(target=sampler))
        for t in ts:
            t.start()
        end = time.monotonic() + seconds
        while during is not None and time.monotonic() < end and not errors:
            during()
        for t in ts[:-1]:
            t.join()
        sampling.set()
        ts[-1].join()
        results.extend(pending.get(timeout=seconds + 120))
    if errors:
        raise errors[0]
    lat = np.array(sorted(x for r in results for x in r["lat"]))
    return {"readers": len(results), "opens": sum(r["opens"] for r in results),
            "reads": sum(r["reads"] for r in results), "bytes": sum(r["bytes"] for r in results),
            "missing": sum(r["missing"] for r in results),
            "latency_s": {q: float(np.quantile(lat, q / 100)) for q in (50, 90, 99)} | {"max": float(lat[-1])},
            "rss_anon_kb": rss}
