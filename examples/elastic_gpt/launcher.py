#!/usr/bin/env python3
"""The launcher of one job under `ptcfs autoscale` (docs/PLANNER.md "The autoscaler"): reads the
job's decision from etcd and runs train.py at the decided (tp, pp, dp) in segments of --every
iterations, each resuming from the job's latest saved step and saving at its end, until --until.

    launcher.py --etcd http://127.0.0.1:2379 --queue-name gpt --job gpt --every 4 --until 12

Before each segment it reads <prefix>/decision/<queue name> again, so a decision takes effect at
the next segment boundary (the running segment is not interrupted: the step it saves is then
repartitioned by train.py's ensure_layout on resume). A decision with a global batch (the job
gave `batch` in its queue entry) runs train.py with --global-batch: the controller gave the
job's datasets that batch when it repartitioned the latest step. No decision yet, or "queued":
it waits, asking every --poll seconds. --segments N stops after N segments (for scripts and tests). What
train.py prints passes through; --out and the other train.py flags go to every segment.

After each segment that train.py finished, the launcher adds the samples it trained (the global batch
of each iteration train.py printed) to `samples_done` in the job's queue entry, when the entry gives
the job's `samples` and the sum stays below them, in an etcd transaction on the entry's mod_revision
(a change someone else made meanwhile is kept; a few tries, then it says on stderr that it gave up
and goes on training). With it, `samples_done_step`: the step the count reaches, so that no segment
is counted twice (a retry after a lost reply) and one nobody counted is said (record_progress).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import ptcfs  # noqa: E402


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _gateway(endpoints: str, path: str, body: dict, unanswered: Optional[list] = None) -> dict:
    """etcd's answer to `body` POSTed to `path` of its v3 JSON gateway (keys and values base64), from
    the first endpoint that answers; ptcfs.Error `unavailable` when none does. The endpoints tried
    before the one that answered are appended to `unanswered` (when given): one of them may have
    applied a write whose answer never came."""
    data = json.dumps(body).encode()
    errors = []
    for url in endpoints.split(","):
        req = urllib.request.Request(url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                return json.load(r)
        except OSError as e:
            errors.append(f"{url}: {e}")
            if unanswered is not None:
                unanswered.append(url)
    raise ptcfs.Error("unavailable", "no etcd endpoint answered: " + "; ".join(errors))


def etcd_range(endpoints: str, key: str) -> Optional[Tuple[dict, str]]:
    """The JSON value of `key` and its mod_revision (None when absent)."""
    kvs = _gateway(endpoints, "/v3/kv/range", {"key": _b64(key)}).get("kvs", [])
    return (json.loads(base64.b64decode(kvs[0]["value"])), kvs[0]["mod_revision"]) if kvs else None


def etcd_get(endpoints: str, key: str) -> Optional[dict]:
    """The JSON object at `key` (None when absent, or when it is not a JSON object: said on stderr);
    no etcd: the launcher stops, saying so."""
    try:
        kv = etcd_range(endpoints, key)
    except ptcfs.Error as e:
        raise SystemExit(f"launcher: {e.message}")
    except ValueError as e:
        print(f"launcher: {key} is not JSON ({e}); taken as absent", file=sys.stderr)
        return None
    if kv and not isinstance(kv[0], dict):
        print(f"launcher: {key} is {json.dumps(kv[0])[:80]}, not a JSON object; taken as absent", file=sys.stderr)
        return None
    return kv[0] if kv else None


def record_progress(endpoints: str, key: str, batches: Dict[int, int], start: int, end: int,
                    tries: int = 5) -> None:
    """Adds the samples of the segment that resumed from step `start` and saved step `end` (its
    iterations start..end - 1; `batches` {iteration: global batch} from what train.py printed) to
    `samples_done` of the queue entry at `key` (docs/PLANNER.md "The autoscaler"), and records `end` as
    the entry's `samples_done_step`, the step the count reaches. The write is idempotent: only the
    iterations at or after the entry's `samples_done_step` are added, so a segment already counted (a
    retry after a reply lost although the write landed, a second call) adds nothing; an entry whose step
    is behind `start` (a segment nobody counted: a launcher stopped between its save and its write) is
    said on stderr, its missing samples not guessed. An entry without `samples_done_step` reaches step 0
    when it has no (or a zero) `samples_done`, else an unknown step: the segment is added whole.
    In a transaction on the entry's mod_revision, so that a change another writer made meanwhile is
    kept: on a conflict it reads the entry again, `tries` times in all. Nothing written when the entry
    is gone, gives no `samples`, or the sum would reach them (the entry takes fewer: a job that trained
    them all leaves the queue). Says on stderr what it did not write; never raises."""
    if not batches:
        return
    why = ""
    unanswered = False  # a transaction of this call got no answer: it may have been applied
    behind_said = False
    for _ in range(tries):
        try:
            kv = etcd_range(endpoints, key)
            if kv is None:
                print(f"launcher: {key} is gone: progress (+{sum(batches.values())} samples, iterations "
                      f"{start}..{end - 1}) not recorded", file=sys.stderr)
                return
            entry, rev = kv
            if not isinstance(entry, dict):
                raise ValueError(f"{key} is {json.dumps(entry)[:80]}, not a JSON object")
            job = entry.get("job")
            samples = job.get("samples") if isinstance(job, dict) else None
            if samples is None:
                return  # samples_done goes only with samples
            before = entry.get("samples_done", 0)
            reached = entry.get("samples_done_step", None if before else 0)
            if reached is not None and (not isinstance(reached, int) or isinstance(reached, bool) or reached < 0):
                raise ValueError(f"samples_done_step is {json.dumps(reached)}, not a step >= 0")
            if reached is not None and end <= reached:
                if not unanswered:  # else it may be this call's own write, its reply lost
                    print(f"launcher: {key}: samples_done already counts the steps up to {reached}; iterations "
                          f"{start}..{end - 1} not added again", file=sys.stderr)
                return
            if reached is not None and reached < start and not behind_said:
                behind_said = True
                print(f"launcher: {key}: samples_done counts the steps up to {reached}, this segment trained "
                      f"iterations {start}..{end - 1}: the samples of iterations {reached}..{start - 1} are not "
                      f"counted (a launcher stopped between their save and its write?)", file=sys.stderr)
            trained = sum(b for it, b in batches.items() if reached is None or it >= reached)
            if before + trained >= samples:
                print(f"launcher: {key}: {before + trained} of the job's {samples} samples trained; samples_done "
                      f"left at {before} (the entry takes fewer: the job leaves the queue when it finishes)",
                      file=sys.stderr)
                return
            entry["samples_done"] = before + trained
            entry["samples_done_step"] = end
            tried = []  # endpoints that did not answer this transaction: it may have been applied there
            try:
                r = _gateway(endpoints, "/v3/kv/txn", {
                    "compare": [{"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev}],
                    "success": [{"request_put": {"key": _b64(key), "value": _b64(json.dumps(entry))}}]}, tried)
            except (ptcfs.Error, ValueError):
                unanswered = True
                raise
            unanswered = unanswered or bool(tried)
            if r.get("succeeded"):
                return
            why = "the entry changed between its read and the write"
        except (ptcfs.Error, ValueError, TypeError, KeyError) as e:
            why = str(e)
    print(f"launcher: gave up recording progress (+{sum(batches.values())} samples, iterations {start}..{end - 1}) "
          f"in {key} after {tries} tries (the last: {why}); training goes on", file=sys.stderr)


def run_segment(cmd: List[str]) -> Tuple[int, Dict[int, int]]:
    """Runs train.py, passing its stdout through: its exit status and {iteration: global batch} from
    the iteration lines it printed."""
    batches = {}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as p:
        for line in p.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            try:
                x = json.loads(line)
            except ValueError:
                continue
            if isinstance(x, dict) and "iter" in x and "global_batch" in x:
                batches[x["iter"]] = x["global_batch"]
    return p.returncode, batches


def latest_step(client: ptcfs.Client, job: str) -> Optional[int]:
    """The job's latest committed numbered step (train.py names steps by iteration), None when it has
    none; a save still pending (being written, or left half written) is no step to resume from."""
    try:
        listed = client.ls(job)
    except ptcfs.Error as e:
        if e.code == "not_found":
            return None
        raise
    pending = set(listed.get("pending", []))
    numbered = [int(s) for s in listed["steps"] if s.isdigit() and s not in pending]
    return max(numbered) if numbered else None


DECISION_KEYS = ("queued", "gpus", "tp", "pp", "dp", "seq")


def wait_for_decision(a) -> dict:
    """The job's decision once it is one to run (not queued). One that lacks a member the launcher
    needs is taken as absent, said once on stderr: the controller writes decisions anew."""
    key = f"{a.prefix}/decision/{a.queue_name}"
    said = None
    while True:
        d = etcd_get(a.etcd, key)
        missing = [k for k in DECISION_KEYS if d is not None and k not in d]
        if missing and d != said:
            print(f"launcher: {key} lacks {', '.join(missing)}; taken as absent", file=sys.stderr)
            said = d
        elif d is not None and not missing and not d["queued"]:
            return d
        time.sleep(a.poll)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etcd", required=True, help="etcd endpoints, comma-separated http://HOST:PORT")
    ap.add_argument("--prefix", default="/ptcfs-autoscale")
    ap.add_argument("--queue-name", required=True, help="the job's name in <prefix>/queue/")
    ap.add_argument("--job", required=True, help="the job's name in the store (train.py --job)")
    ap.add_argument("--every", type=int, required=True, help="iterations per segment (a save after each)")
    ap.add_argument("--until", type=int, required=True, help="train up to this iteration")
    ap.add_argument("--segments", type=int, help="stop after this many segments")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between reads of the decision while waiting")
    ap.add_argument("--daemon", help="HOST:PORT (default $PTCFS_DAEMON, then 127.0.0.1:7070)")
    a, train_args = ap.parse_known_args(argv)
    done = 0
    while a.segments is None or done < a.segments:
        with ptcfs.Client(a.daemon) as c:
            start = latest_step(c, a.job)
        if (start or 0) >= a.until:
            break
        d = wait_for_decision(a)
        end = min((start or 0) + a.every, a.until)
        cmd = [sys.executable, os.path.join(_HERE, "train.py"), "--job", a.job, "--tp", str(d["tp"]),
               "--pp", str(d["pp"]), "--dp", str(d["dp"]), "--steps", str(end), "--save-at", str(end)]
        if start is not None:
            cmd += ["--resume", str(start)]
        batch = ""
        if d.get("global_batch") is not None:  # the job chooses its batch; its datasets have it
            cmd += ["--global-batch", str(d["global_batch"])]
            batch = f", global batch {d['global_batch']}"
        if a.daemon:
            cmd += ["--daemon", a.daemon]
        print(f"launcher: decision {d['seq']} ({d['gpus']} GPUs{batch}, tp={d['tp']},pp={d['pp']},dp={d['dp']}): "
              f"iterations {start or 0}..{end - 1}", file=sys.stderr, flush=True)
        rc, batches = run_segment(cmd + train_args)
        if rc != 0:
            print(f"launcher: train.py exited {rc}", file=sys.stderr)
            return rc
        record_progress(a.etcd, f"{a.prefix}/queue/{a.queue_name}", batches, start or 0, end)
        done += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
