#!/usr/bin/python3
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
from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # the repo's ptcfs

import ptcfs  # noqa: E402


def etcd_get(endpoints: str, key: str) -> Optional[dict]:
    """The JSON value of `key` (None when absent), through etcd's v3 JSON gateway."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    errors = []
    for url in endpoints.split(","):
        req = urllib.request.Request(url.rstrip("/") + "/v3/kv/range", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                kvs = json.load(r).get("kvs", [])
        except OSError as e:
            errors.append(f"{url}: {e}")
            continue
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None
    raise SystemExit("launcher: no etcd endpoint answered: " + "; ".join(errors))


def latest_step(client: ptcfs.Client, job: str) -> Optional[int]:
    """The job's latest numbered step (train.py names steps by iteration), None when it has none."""
    try:
        steps = client.ls(job)["steps"]
    except ptcfs.Error as e:
        if e.code == "not_found":
            return None
        raise
    numbered = [int(s) for s in steps if s.isdigit()]
    return max(numbered) if numbered else None


def wait_for_decision(a) -> dict:
    key = f"{a.prefix}/decision/{a.queue_name}"
    while True:
        d = etcd_get(a.etcd, key)
        if d is not None and not d["queued"]:
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
        r = subprocess.run(cmd + train_args)
        if r.returncode != 0:
            print(f"launcher: train.py exited {r.returncode}", file=sys.stderr)
            return r.returncode
        done += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
