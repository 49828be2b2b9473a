"""A seeded chaos soak of a cluster on a real etcd, checking the promises of docs/ARCHITECTURE.md
"What holds under faults" together under random faults.

Three etcd members and three daemons (2 GPUs each, 2 s leases, --peer-timeout 3). The main thread runs
operations one at a time, through a node that is up when it starts: repartitions of a step to random
layouts, saves of new steps from two nodes' mounts, removals, and dataset progress. A fault thread,
independent of the operations (so faults land mid-operation), SIGKILLs daemons and restarts them,
SIGSTOPs them for 1-4 s, and kills etcd members (now and then two: quorum lost) and starts them again.
Reader threads read the step's full views through every node's mount all along, and files held open
across changes, and check every byte.

Checked, as operations end and at convergence points (faults paused and healed):
- success means every live node serves the change (nodes faulted during the operation excepted: they
  catch up, which the convergence point checks);
- failure means nothing changed, unless the coordinator said the outcome is unknown (etcd did not answer)
  or was itself faulted: then the outcome settles within a minute, the same on every node;
- files open before a change read one whole version of the file (never a mix, never a wrong byte);
- no step or dataset position is lost, and no complete save stays pending;
- every call returns within its deadline: a CLI call within a minute (the CLI's deadline is 30 s of
  silence, docs/FORMATS.md), each read syscall within 2 x --peer-timeout + 1 s.

A read may fail (EIO, EHOSTUNREACH, ENOTCONN, ECONNABORTED) only while a node is faulted, and ENOENT only on the
mount of a node that is restarting after a kill; a wrong byte never. Every
operation, fault and violation is kept in `events` with its time, and written to `chaos.log` under the
root, so that a failing seed can be read and run again.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional, Tuple

from dataset_util import write_jsonl
from etcd_util import Etcd, EtcdCluster
from ptcfs_harness import PTCFS, Checkpoint, verify_step
from repartition_util import Oracles, par_str

JOB, STEP, DATA = "j", "1", "train"
GLOBAL_BATCH = 12
SAMPLES = 240  # of the dataset: 20 global batches an epoch
LAYOUTS = [(1, 1, 2), (2, 1, 1), (1, 2, 1), (2, 1, 2), (1, 2, 2), (2, 2, 1), (1, 1, 4), (2, 1, 3), (1, 2, 3),
           (1, 1, 6), (2, 2, 1), (1, 1, 3)]
PEER_TIMEOUT_S = 3
# Pauses in the windows of a change (docs/ARCHITECTURE.md "One commit path": failpoints), so that
# faults land inside them: after every node prepared, and before a node's commit.
WIDEN = "coordinator.prepared:0.3,commit.before:0.2"
CLI_DEADLINE_S = 60.0
READ_DEADLINE_S = 2 * PEER_TIMEOUT_S + 1.0
SETTLE_S = 60.0
CATCH_UP_S = 5.0
READ_ERRNOS = (errno.EIO, errno.EHOSTUNREACH, errno.ENOTCONN, errno.ECONNREFUSED, errno.ECONNABORTED)


class Faults:
    """What is faulted now and what was, with times (monotonic)."""

    def __init__(self):
        self.mu = threading.Lock()
        self.intervals: List[Tuple[str, int, float, Optional[float]]] = []  # (kind, target, start, end)

    def begin(self, kind: str, target: int) -> int:
        with self.mu:
            self.intervals.append((kind, target, time.monotonic(), None))
            return len(self.intervals) - 1

    def end(self, i: int) -> None:
        with self.mu:
            k, t, s, _ = self.intervals[i]
            self.intervals[i] = (k, t, s, time.monotonic())

    def active(self) -> List[Tuple[str, int]]:
        with self.mu:
            return [(k, t) for k, t, _, e in self.intervals if e is None]

    def node_faulted(self, node: int, t0: float, t1: float) -> bool:
        """Whether daemon `node` was stopped or dead at any time in [t0, t1] (1 s around it), or was
        resumed from a pause less than CATCH_UP_S before t0: a paused node serves what it had until its
        watch delivers what it missed (docs/ARCHITECTURE.md "What holds under faults"); the
        convergence points check that it does. A restarted node has no such grace: its mount answers
        once it has caught up (its restart ends when the mount answers)."""
        with self.mu:
            return any(t == node and k in ("kill", "stop") and s <= t1 + 1 and
                       (e is None or e >= t0 - (CATCH_UP_S if k == "stop" else 1.0))
                       for k, t, s, e in self.intervals)

    def node_killed(self, node: int, t0: float, t1: float) -> bool:
        """Whether daemon `node` was dead or restarting at any time in [t0, t1] (1 s around it)."""
        with self.mu:
            return any(t == node and k == "kill" and s <= t1 + 1 and (e is None or e >= t0 - 1.0)
                       for k, t, s, e in self.intervals)

    def any_node_faulted(self, t0: float, t1: float) -> bool:
        return any(self.node_faulted(n, t0, t1) for n in range(3))

    def etcd_faulted(self, t0: float, t1: float) -> bool:
        with self.mu:
            return any(k == "etcd" and s <= t1 + 1 and (e is None or e >= t0 - 1) for k, _, s, e in self.intervals)


class Soak:
    def __init__(self, root: str, seed: int, seconds: float, convergence_every: float = 60.0):
        self.root = root
        self.seed = seed
        self.seconds = seconds
        self.convergence_every = convergence_every
        self.rnd = random.Random(seed)
        self.fault_rnd = random.Random(seed * 7919 + 1)
        self.faults = Faults()
        self.events: List[str] = []
        self.violations: List[str] = []
        self.stats = {"operations": 0, "succeeded": 0, "failed": 0, "unknown": 0, "faults": 0,
                      "faults_mid_operation": 0, "reads": 0, "read_bytes": 0, "read_errors": 0,
                      "open_reads": 0, "convergence_points": 0, "max_cli_s": 0.0, "max_read_syscall_s": 0.0}
        self.t_start = time.monotonic()
        self.stop = threading.Event()
        self.pause_faults = threading.Event()
        self.in_operation = threading.Event()
        self.node_mu = [threading.Lock() for _ in range(3)]  # held while a node's state changes
        self.down: Dict[int, str] = {}  # node -> "kill" | "stop" while faulted
        self.etcd_down: List[int] = []
        self.log = open(os.path.join(root, "chaos.log"), "a")
        # The expected state.
        self.par = (2, 2, 1)
        self.version = 1
        self.saves: Dict[str, dict] = {}  # step -> {"writers": [node...], "t0", "t1", "complete", "removed"}
        self.position = (0, 0)  # the dataset's (epoch, consumed)
        self.next_save = 100

    # -- bookkeeping

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.t_start:8.2f} {text}"
        self.events.append(line)
        self.log.write(line + "\n")
        self.log.flush()

    def violation(self, text: str) -> None:
        self.note("VIOLATION " + text)
        self.violations.append(text)

    # -- the cluster

    def setup(self) -> None:
        self.etcd = Etcd(self.root, members=3)
        self.etcd.start()
        self.c = EtcdCluster(self.root, self.etcd, 3, gpus=2, lease_ttl=2)  # --peer-timeout 3
        for d in self.c.nodes:
            d.env["PTCFS_FAILPOINT"] = WIDEN
        self.c.start()
        self.ck = Checkpoint(os.path.join(self.root, "ck"), tp=2, pp=2, layers=4, hidden=64, vocab=200, seed=3)
        self.oracles = Oracles(self.root, self.ck, 3)
        self.save_ck = Checkpoint(os.path.join(self.root, "save"), tp=2, pp=1, layers=2, hidden=64, vocab=128,
                                  seed=9)
        self.cli(0, "import", self.ck.path, "--job", JOB, "--step", STEP, check=True)
        src = os.path.join(self.root, "home", "train.jsonl")
        os.makedirs(os.path.dirname(src))
        write_jsonl(src, SAMPLES, seed=5)
        self.cli(0, "dataset", "add", "--job", JOB, "--name", DATA, "--format", "jsonl", "--seed", "5",
                 "--global-batch", str(GLOBAL_BATCH), src, check=True)
        # Every layout's rank file tp0-pp0 and the full views, as bytes: what readers may see.
        self.rank0 = {}
        for par in set(LAYOUTS) | {self.par}:
            with open(self.oracles(par).shard_path(0, 0), "rb") as f:
                self.rank0[f.read()] = par
        self.full = {}
        fdir = os.path.join(self.c[0].step_dir(JOB, STEP), "full")
        for name in sorted(self.ck.full):
            rel = name.replace(".", "/") + ".npy"
            if not os.path.exists(os.path.join(fdir, rel)):
                rel = name + ".npy"
            with open(os.path.join(fdir, rel), "rb") as f:
                self.full[rel] = f.read()
        verify_step(self.c[0], JOB, STEP, self.ck, full_views=True)  # the bytes above are the oracle's

    def teardown(self) -> None:
        self.stop.set()
        for d in self.c.nodes:
            if d.proc is not None:
                try:
                    os.kill(d.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
        self.c.__exit__(None, None, None)
        self.etcd.stop()
        self.log.close()

    def cli(self, node: int, *args: str, check: bool = False) -> Tuple[int, str, str, float]:
        d = self.c[node]
        t0 = time.monotonic()
        try:
            r = subprocess.run([PTCFS, "--daemon", d.addr, "--secret-file", self.c.secret, *args],
                               capture_output=True, text=True, timeout=CLI_DEADLINE_S * 2)
            rc, out, err = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = -1, "", "the CLI did not return"
        took = time.monotonic() - t0
        self.stats["max_cli_s"] = max(self.stats["max_cli_s"], took)
        if took > CLI_DEADLINE_S:
            self.violation(f"n{node} {' '.join(args[:2])} took {took:.1f} s (deadline {CLI_DEADLINE_S:.0f} s)")
        if check and rc != 0:
            raise AssertionError(f"n{node} {' '.join(args)}: rc {rc}: {err}")
        return rc, out, err, took

    def up_nodes(self) -> List[int]:
        return [i for i in range(3) if i not in self.down]

    # -- faults

    def fault_loop(self) -> None:
        while not self.stop.wait(self.fault_rnd.uniform(1.5, 5.0)):
            if self.pause_faults.is_set():
                continue
            if self.fault_rnd.random() < 0.5:
                # Aimed at an operation: the daemons pause in its windows (WIDEN), so a fault
                # shortly after it starts lands in one.
                self.in_operation.wait(3.0)
                time.sleep(self.fault_rnd.uniform(0.0, 0.4))
                if self.pause_faults.is_set():
                    continue
            kind = self.fault_rnd.choice(["kill", "stop", "stop", "etcd"])
            if kind in ("kill", "stop"):
                node = self.fault_rnd.randrange(3)
                with self.node_mu[node]:
                    if node in self.down or len(self.down) >= 1:
                        continue
                    self.down[node] = kind
                    i = self.faults.begin(kind, node)
                    mid = self.in_operation.is_set()
                    d = self.c[node]
                    if not d.running():
                        self.violation(f"n{node} is not running (exit {d.proc.returncode if d.proc else None})")
                        self.faults.end(i)
                        continue
                    pause = (self.fault_rnd.uniform(0.5, 3.0) if kind == "kill" else
                             self.fault_rnd.uniform(1.0, 4.0))
                    if kind == "kill":
                        d.kill9()
                        waiter = None
                    else:
                        # Stopped and continued by a process of its own, started before the stop: a
                        # child forked here while the daemon is stopped closes its copy of any file
                        # open on that mount and waits in FUSE's flush until the daemon runs again.
                        waiter = subprocess.Popen(["sh", "-c", f"kill -STOP {d.proc.pid}; sleep {pause:.2f}; "
                                                  f"kill -CONT {d.proc.pid}"], start_new_session=True)
                self.stats["faults"] += 1
                self.stats["faults_mid_operation"] += int(mid)
                self.note(f"fault {kind} n{node} for {pause:.1f} s{' (mid-operation)' if mid else ''}")
                if waiter is None:
                    threading.Timer(pause, self.heal_node, (node, i)).start()
                else:
                    threading.Thread(target=lambda w=waiter, n=node, k=i: (w.wait(), self.heal_node(n, k)),
                                     daemon=True).start()
            else:
                if self.etcd_down:
                    continue
                members = self.fault_rnd.sample(range(3), 2 if self.fault_rnd.random() < 0.4 else 1)
                for m in members:
                    self.etcd.kill(m)
                self.etcd_down = members
                i = self.faults.begin("etcd", -1)
                mid = self.in_operation.is_set()
                self.stats["faults"] += 1
                self.stats["faults_mid_operation"] += int(mid)
                pause = self.fault_rnd.uniform(2.0, 6.0)
                self.note(f"fault etcd members {members} for {pause:.1f} s{' (mid-operation)' if mid else ''}")
                threading.Timer(pause, self.heal_etcd, (i,)).start()

    def heal_node(self, node: int, i: int) -> None:
        with self.node_mu[node]:
            if self.down.get(node) is None or self.stop.is_set():
                return
            d = self.c[node]
            try:
                if self.down[node] == "kill":
                    d.start()
                else:
                    os.kill(d.proc.pid, signal.SIGCONT)
            except BaseException as e:  # noqa: BLE001 - pytest.fail's too: a node that does not come back
                self.violation(f"n{node} did not come back: {e}")
            del self.down[node]
            self.faults.end(i)
            self.note(f"healed n{node}")

    def heal_etcd(self, i: int) -> None:
        if self.stop.is_set():
            return
        members, self.etcd_down = self.etcd_down, []
        try:
            for m in members:
                self.etcd.start(m, wait=False)
            self.etcd.wait_healthy()
        except BaseException as e:  # noqa: BLE001 - pytest.fail's exception, in this timer's thread
            self.violation(f"etcd members {members} did not come back: {e}")
        self.faults.end(i)
        self.note(f"healed etcd members {members}")

    def heal_all(self) -> None:
        """Pauses new faults and waits for the current ones to end."""
        self.pause_faults.set()
        deadline = time.monotonic() + 30
        while self.faults.active() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.faults.active():
            self.violation(f"faults did not heal: {self.faults.active()}")

    # -- readers

    def read_loop(self, node: int, seed: int) -> None:
        rnd = random.Random(seed)
        names = sorted(self.full)
        while not self.stop.is_set():
            d = self.c[node]
            t0 = time.monotonic()
            try:
                if rnd.random() < 0.25:
                    self.open_read(node, rnd)
                else:
                    rel = rnd.choice(names)
                    got = self.timed_read(os.path.join(d.step_dir(JOB, STEP), "full", rel), 0)
                    self.stats["reads"] += 1
                    self.stats["read_bytes"] += len(got)
                    if got != self.full[rel]:
                        self.violation(f"n{node} full/{rel}: wrong bytes ({len(got)} read)")
            except OSError as e:
                t1 = time.monotonic()
                self.stats["read_errors"] += 1
                # The mount point of a restarting node is an empty folder between the new daemon's
                # detaching of the stale mount and its own mount (docs/ARCHITECTURE.md, the errno table).
                restarting = e.errno == errno.ENOENT and self.faults.node_killed(node, t0, t1)
                if not restarting and (e.errno not in READ_ERRNOS or not self.faults.any_node_faulted(t0, t1)):
                    self.violation(f"n{node} read failed with {errno.errorcode.get(e.errno, e.errno)} ({e}) "
                                   f"with {'a' if self.faults.any_node_faulted(t0, t1) else 'no'} node faulted")
                time.sleep(0.2)

    def timed_read(self, path: str, pause_at: int) -> bytes:
        """Reads a file whole, one syscall per MiB, each timed; sleeps once after `pause_at` bytes
        (0: never), so that a change can commit while the file is open."""
        out = []
        fd = os.open(path, os.O_RDONLY)
        try:
            off = 0
            while True:
                if pause_at and off >= pause_at:
                    time.sleep(0.5)
                    pause_at = 0
                t0 = time.monotonic()
                b = os.pread(fd, 1 << 20, off)
                took = time.monotonic() - t0
                self.stats["max_read_syscall_s"] = max(self.stats["max_read_syscall_s"], took)
                if took > READ_DEADLINE_S:
                    self.violation(f"a read of {path} at {off} took {took:.1f} s (deadline {READ_DEADLINE_S:.0f} s)")
                if not b:
                    break
                out.append(b)
                off += len(b)
        finally:
            os.close(fd)
        return b"".join(out)

    def open_read(self, node: int, rnd: random.Random) -> None:
        path = os.path.join(self.c[node].step_dir(JOB, STEP), "tp0-pp0.safetensors")
        got = self.timed_read(path, max(1, rnd.randrange(1, 1 << 16)))
        self.stats["open_reads"] += 1
        if got not in self.rank0:
            self.violation(f"n{node} tp0-pp0.safetensors read while open across changes is no version's "
                           f"({len(got)} bytes)")

    # -- what nodes serve

    def served(self, node: int) -> Optional[dict]:
        """What node serves now: the step's (version, layout), the saved steps and the dataset
        position; None if it does not answer."""
        d = self.c[node]
        rc, out, _, _ = self.cli(node, "ls", JOB, "--json")
        if rc != 0:
            return None
        listing = json.loads(out)
        rc, out, _, _ = self.cli(node, "ls", f"{JOB}/{STEP}", "--json")
        if rc != 0:
            return None
        info = json.loads(out)
        p = info["parallelism"]
        try:
            with open(os.path.join(d.mnt, JOB, "data", DATA, "state.json")) as f:
                ds = json.load(f)
        except OSError:
            return None
        return {"version": info["version"], "par": (p["tp"], p["pp"], p["dp"]),
                "steps": sorted(set(listing["steps"]) - set(listing.get("pending", [])) - {STEP}),
                "pending": sorted(listing.get("pending", [])),
                "consumed": (ds["epoch"], ds["consumed"])}

    def check_served(self, what: str, t0: float, want) -> None:
        """Every node up and unfaulted since t0 serves `want(served)` now."""
        for n in range(3):
            with self.node_mu[n]:
                if n in self.down or self.faults.node_faulted(n, t0, time.monotonic()):
                    continue
            s = self.served(n)
            if s is None:
                if not self.faults.node_faulted(n, t0, time.monotonic()):
                    self.violation(f"{what}: n{n} does not answer")
                continue
            bad = want(s)
            if bad and not self.faults.node_faulted(n, t0, time.monotonic()):
                self.violation(f"{what}: n{n} serves {s}: {bad}")

    # -- operations

    def operation(self) -> None:
        up = self.up_nodes()
        if not up:
            time.sleep(0.5)
            return
        via = self.rnd.choice(up)
        op = self.rnd.choices(["repartition", "save", "remove", "progress"], [4, 2, 1, 2])[0]
        self.stats["operations"] += 1
        self.in_operation.set()
        try:
            getattr(self, "op_" + op)(via)
        finally:
            self.in_operation.clear()
        time.sleep(self.rnd.uniform(0.1, 1.0))

    def outcome(self, what: str, via: int, rc: int, err: str, t0: float) -> str:
        """'ok', 'failed' (nothing may have changed) or 'unknown'."""
        if rc == 0:
            self.stats["succeeded"] += 1
            return "ok"
        unknown = ("did not answer the commit" in err or rc < 0 or
                   self.faults.node_faulted(via, t0, time.monotonic()) or "deadline" in err.lower())
        self.stats["unknown" if unknown else "failed"] += 1
        self.note(f"  {what} via n{via}: {'unknown' if unknown else 'failed'}: {err.strip()[:300]}")
        return "unknown" if unknown else "failed"

    def op_repartition(self, via: int) -> None:
        up = self.up_nodes()
        nodes = []
        if len(up) < 3 and self.rnd.random() < 0.6:
            nodes = ["--nodes", ",".join(f"n{n}" for n in up)]  # leave the faulted node out
        gpus = 2 * (len(up) if nodes else 3)
        to = self.rnd.choice([p for p in LAYOUTS if p != self.par and p[0] * p[1] * p[2] <= gpus])
        t0 = time.monotonic()
        rc, out, err, took = self.cli(via, "repartition", "--job", JOB, "--step", STEP, "--to", par_str(to), "--json",
                                      *nodes)
        self.note(f"repartition {par_str(self.par)} -> {par_str(to)} via n{via} {' '.join(nodes)}: rc {rc} in "
                  f"{took:.1f} s")
        res = self.outcome("repartition", via, rc, err, t0)
        if res == "ok":
            r = json.loads(out)
            if r["bytes_moved"] != r["bytes_min"]:
                self.violation(f"repartition moved {r['bytes_moved']} bytes, the minimum is {r['bytes_min']}")
            self.par, self.version = to, r["version"]
            self.check_served(f"repartition to {par_str(to)} succeeded", t0,
                              lambda s: None if (s["version"], s["par"]) == (self.version, to) else "the old layout")
        elif res == "failed":
            old = (self.version, self.par)
            self.check_served(f"repartition to {par_str(to)} failed", t0,
                              lambda s: None if (s["version"], s["par"]) == old else "a changed layout")
        else:
            self.settle(f"repartition to {par_str(to)} (unknown outcome)")

    def op_progress(self, via: int) -> None:
        epoch, consumed = self.position
        consumed = min(consumed + GLOBAL_BATCH * self.rnd.randint(1, 3), SAMPLES)
        want = (epoch + 1, 0) if consumed == SAMPLES else (epoch, consumed)  # a whole epoch starts the next
        t0 = time.monotonic()
        rc, _, err, took = self.cli(via, "dataset", "progress", "--job", JOB, "--name", DATA, "--consumed",
                                    str(consumed))
        self.note(f"progress {self.position} -> {want} via n{via}: rc {rc} in {took:.1f} s")
        res = self.outcome("progress", via, rc, err, t0)
        if res == "ok":
            self.position = want
            self.check_served(f"progress to {want} succeeded", t0,
                              lambda s: None if s["consumed"] == want else "the old position")
        elif res == "failed":
            old = self.position
            self.check_served(f"progress to {want} failed", t0,
                              lambda s: None if s["consumed"] == old else "a changed position")
        else:
            self.settle(f"progress to {want} (unknown outcome)")

    def op_save(self, via: int) -> None:
        up = self.up_nodes()
        if len(up) < 2:
            return
        writers = self.rnd.sample(up, 2)
        step = str(self.next_save)
        self.next_save += 1
        rec = {"writers": writers, "t0": time.monotonic(), "complete": True, "removed": False}
        self.saves[step] = rec
        for w, shard in zip(writers, ("tp0-pp0.safetensors", "tp1-pp0.safetensors")):
            sd = self.c[w].step_dir(JOB, step)
            try:
                os.makedirs(sd, exist_ok=True)
                for name in ("ptc.json", shard):
                    with open(os.path.join(self.save_ck.path, name), "rb") as src, \
                            open(os.path.join(sd, name), "wb") as dst:
                        dst.write(src.read())
            except OSError as e:
                rec["complete"] = False
                self.note(f"  save {step}: n{w}'s write failed: {e}")
        rec["t1"] = time.monotonic()
        self.note(f"save {step} from n{writers[0]}, n{writers[1]}: {'written' if rec['complete'] else 'interrupted'}")

    def op_remove(self, via: int) -> None:
        done = [s for s, r in self.saves.items() if not r["removed"]]
        if len(done) < 3:
            return
        step = done[0]
        t0 = time.monotonic()
        rc, _, err, took = self.cli(via, "rm", f"{JOB}/{step}")
        self.note(f"rm {step} via n{via}: rc {rc} in {took:.1f} s")
        res = self.outcome("rm", via, rc, err, t0)
        if res == "ok":
            self.saves[step]["removed"] = True
            self.check_served(f"rm {step} succeeded", t0, lambda s: "still there" if step in s["steps"] else None)
        elif res == "unknown":
            self.settle(f"rm {step} (unknown outcome)")
            s = self.served(via)
            if s is not None and step not in s["steps"]:
                self.saves[step]["removed"] = True
        elif "not committed" in err or "pending" in err:
            pass  # a save not committed yet: removed at a convergence point if it never commits

    # -- convergence

    def settle(self, what: str) -> None:
        """Waits until every up node serves the same step version (the one etcd's record holds) and
        dataset position, and still does 3 s later (past a dead coordinator's 2 s lease, after which
        its change is decided), within a minute; takes that as the expected state."""
        # No new fault while it settles (those under way end): the promise is that an unknown
        # outcome settles once the cluster is whole, within a minute. Faults landing every few
        # seconds would keep the 3 s of agreement from ever being seen.
        paused = self.pause_faults.is_set()
        self.pause_faults.set()
        try:
            self._settle(what)
        finally:
            if not paused:
                self.pause_faults.clear()

    def _settle(self, what: str) -> None:
        deadline = time.monotonic() + SETTLE_S
        last = None
        while True:
            up = self.up_nodes()
            seen = {n: self.served(n) for n in up}
            vals = {(s["version"], s["par"], s["consumed"]) for s in seen.values() if s is not None}
            agreed = None
            if len(vals) == 1 and None not in seen.values() and up == self.up_nodes():
                agreed = (tuple(up), vals.pop())
                r = self.etcd.ctl("get", f"/ptcfs/steps/{JOB}/{STEP}", "--print-value-only", check=False)
                record = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}  # no quorum: not yet
                if record.get("version") != agreed[1][0]:
                    agreed = None
            if agreed is not None and agreed == last:
                self.version, self.par, self.position = agreed[1]
                self.note(f"  settled {what}: version {self.version} {par_str(self.par)}, dataset at {self.position}")
                return
            if time.monotonic() > deadline:
                r = self.etcd.ctl("get", f"/ptcfs/steps/{JOB}/{STEP}", "--print-value-only", check=False)
                self.violation(f"{what} did not settle within {SETTLE_S:.0f} s: {seen}; etcd's record of "
                               f"{JOB}/{STEP}: {r.stdout.strip()[:300] or r.stderr.strip()[-300:]}")
                return
            last = agreed
            time.sleep(3.0 if agreed is not None else 0.5)

    def converge(self, final: bool = False) -> None:
        """Heals every fault, then: every node serves the same step version, layout and position
        (within a minute), every complete save is committed on every node (a save whose writer died
        may be lost with it, then it is removed), and the step's views are exactly the oracle's."""
        self.heal_all()
        self.stats["convergence_points"] += 1
        self.note("convergence point")
        t0 = time.monotonic()
        self.settle("convergence")
        for step, rec in self.saves.items():
            if rec["removed"]:
                continue
            lost = not rec["complete"] or any(self.killed(w, rec["t0"]) for w in rec["writers"])
            while True:
                seen = [self.served(n) for n in range(3)]
                committed = [s is not None and step in s["steps"] for s in seen]
                if all(committed):
                    break
                if lost and not any(committed):
                    # Dropped by the writer that died (docs: a daemon that dies drops its pending
                    # steps); the other writer's part stays pending until removed.
                    for n, s in enumerate(seen):
                        if s is not None and step in s["pending"]:
                            rc, _, err, _ = self.cli(n, "rm", f"{JOB}/{step}")
                            self.note(f"  save {step} lost with a writer: rm via n{n}: rc {rc} {err.strip()[:200]}")
                    rec["removed"] = True
                    break
                if time.monotonic() - t0 > SETTLE_S:
                    self.violation(f"save {step} (writers n{rec['writers'][0]}, n{rec['writers'][1]}, "
                                   f"{'complete' if not lost else 'lost'}) not committed everywhere: {seen}")
                    rec["removed"] = True
                    break
                time.sleep(0.5)
        want_steps = sorted(s for s, r in self.saves.items() if not r["removed"])
        for n in range(3):
            s = self.served(n)
            if s is None:
                self.violation(f"n{n} does not answer at the convergence point")
                continue
            if s["steps"] != want_steps:
                self.violation(f"n{n} serves steps {s['steps']}, expected {want_steps}")
            try:
                verify_step(self.c[n], JOB, STEP, self.oracles(self.par), full_views=False)
            except (AssertionError, OSError) as e:
                self.violation(f"n{n}'s views of {JOB}/{STEP} at {par_str(self.par)}: {e}")
        for step in want_steps[-1:]:
            for n in range(3):
                try:
                    verify_step(self.c[n], JOB, step, self.save_ck, full_views=False)
                except (AssertionError, OSError) as e:
                    self.violation(f"n{n}'s views of saved step {step}: {e}")
        for n in range(3):
            s = self.served(n)
            if s is not None and s["pending"]:
                self.violation(f"n{n} has pending steps {s['pending']} at the convergence point")
        if not final:
            self.pause_faults.clear()

    def killed(self, node: int, since: float) -> bool:
        with self.faults.mu:
            return any(t == node and k == "kill" and (e is None or e >= since) for k, t, _, e in self.faults.intervals)

    # -- the run

    def run(self) -> dict:
        # fork, not vfork: a vforked child that closes its copy of a file open on a stopped mount
        # waits in FUSE's flush while holding the interpreter (every thread here would stop).
        use_vfork, subprocess._USE_VFORK = getattr(subprocess, "_USE_VFORK", None), False
        try:
            return self._run()
        finally:
            subprocess._USE_VFORK = use_vfork

    def _run(self) -> dict:
        self.setup()
        threads = [threading.Thread(target=self.fault_loop, daemon=True)]
        threads += [threading.Thread(target=self.read_loop, args=(n, self.seed * 10 + n), daemon=True)
                    for n in range(3)]
        try:
            for t in threads:
                t.start()
            end = self.t_start + self.seconds
            next_converge = time.monotonic() + self.convergence_every
            while time.monotonic() < end:
                self.operation()
                if time.monotonic() >= next_converge:
                    self.converge()
                    next_converge = time.monotonic() + self.convergence_every
            self.converge(final=True)
            self.stop.set()
            for t in threads:
                t.join(timeout=30)
        finally:
            self.teardown()
        self.stats["seconds"] = round(time.monotonic() - self.t_start, 1)
        self.stats["violations"] = len(self.violations)
        return self.stats
