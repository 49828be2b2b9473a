#!/usr/bin/env python3
"""One training rank of bench/bench_reconfig.py, started ahead of the timed window in its
node's network namespace (as a job's processes are alive when the change comes). Commands on
stdin, one JSON line each; each answered with one JSON line on stdout:

    {"op": "load", "dir": D, "t": T, "p": P}  ptcfs.load_shard(D, T, P), every tensor then held
                                               in this process's own memory: {"bytes", "seconds",
                                               "gathered", "cpu_user", "cpu_sys", "minor_faults"}
    {"op": "check", "path": F}                 the held tensors equal the safetensors file F byte
                                               for byte: {"ok", "detail"}
    {"op": "drop"}                             lets the tensors go

load_shard reads through the direct path in a ptcfs mount (the daemon's blobs mapped;
strided tensors gathered into one new buffer they share) and through a mapping of the file
elsewhere. A view of a mapping is copied once into an array of this process; a gathered tensor
already lies in one."""

import json
import resource
import sys
import time

import numpy as np

import ptcfs
from ptcfs import safetensors as st


def in_own_memory(a: np.ndarray) -> bool:
    """Whether `a` lies in this process's own memory: its base chain ends at an array that owns
    its data (the buffer the direct path gathered strided tensors into, which they share), not
    at a mapping of a file."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return isinstance(a, np.ndarray) and a.flags.owndata


def held_copy(a: np.ndarray) -> np.ndarray:
    return a if in_own_memory(a) else np.array(a)


def main() -> int:
    held, tensors = {}, None
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "load":
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            tensors = ptcfs.load_shard(cmd["dir"], cmd["t"], cmd["p"])
            held = {name: held_copy(a) for name, a in tensors.items()}
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            out = {"bytes": sum(a.nbytes for a in held.values()), "seconds": t1 - t0,
                   "gathered": sum(a.nbytes for a in tensors.values() if in_own_memory(a)),
                   "cpu_user": r1.ru_utime - r0.ru_utime, "cpu_sys": r1.ru_stime - r0.ru_stime,
                   "minor_faults": r1.ru_minflt - r0.ru_minflt}
        elif cmd["op"] == "check":
            want = st.SafetensorsFile(cmd["path"])
            names = set(want.keys())
            bad = [name for name in sorted(set(held) | names)
                   if name not in held or name not in names
                   or held[name].view(np.uint8).tobytes() != np.ascontiguousarray(want[name]).view(np.uint8).tobytes()]
            out = {"ok": not bad and bool(held), "detail": f"{len(bad)} tensors differ (e.g. {bad[:3]})" if bad
                   else f"{len(held)} tensors equal"}
        elif cmd["op"] == "drop":
            held = {}
            out = {"ok": True}
        else:
            out = {"error": f"unknown op {cmd['op']}"}
        tensors = None
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
