"""ensure_layout: make a saved step show the parallel config a (re)started job runs with.

Every rank of a job calls it at start. It is idempotent and safe to call from all of them
at once: the daemon runs at most one repartition of a step at a time (a second is refused
with failed_precondition, "already being repartitioned"; one prepared against a version
that changed meanwhile is refused at commit), and a repartition to the layout a step
already has changes nothing. So each caller asks once, and a refused caller waits for the
mount to show the target, asking again now and then (in case the running repartition
failed, or went to another target).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

from . import ptc as _ptc
from .control import Client
from .errors import Error

# Refusals that mean "another repartition of this step is under way or just won": wait. On etcd
# the step's lock refuses a second coordinator ("by another coordinator (node n0)"), also while
# a change whose commit etcd did not answer is settled ("is not settled yet" from its own node).
# A change of the job's datasets prepared meanwhile (a progress, another caller's re-split) refuses
# with "is already being changed"; a node catching up with "try again in a moment".
_TRANSIENT = ("already being repartitioned", "changed while", "by another coordinator", "is not settled yet",
              "is already being changed", "try again in a moment")


def _mount_batches(mount: str, job: str) -> Optional[list]:
    """The global batch of each of the job's datasets as the mount shows them (MNT/job/data/<name>/
    state.json), or None when one cannot be read yet."""
    folder = os.path.join(mount, job, "data")
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out = []
    for name in names:
        try:
            with open(os.path.join(folder, name, "state.json"), "rb") as f:
                out.append(json.loads(f.read())["global_batch"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return out


def _mount_parallelism(mount: str, job: str, step: str) -> Optional[dict]:
    """The parallelism MNT/job/step/ptc.json shows, or None when it cannot be read yet."""
    try:
        with open(os.path.join(mount, job, step, "ptc.json"), "rb") as f:
            return json.loads(f.read())["parallelism"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_mount(client: Client) -> str:
    """$PTCFS_MOUNT, else the mount the daemon reports."""
    return os.environ.get("PTCFS_MOUNT") or client.status()["mount"]


def ensure_layout(job: str, step: Any, tp: int, pp: int, dp: int, mount: Optional[str] = None,
                  daemon: Optional[str] = None, secret_file: Optional[str] = None,
                  timeout: float = 600.0, poll: float = 0.05, retry: float = 2.0,
                  global_batch: Optional[int] = None) -> dict:
    """Returns once MNT/<job>/<step>/ptc.json shows tp, pp, dp (and, with `global_batch`, every
    dataset of the job has that global batch), repartitioning the step if it does not (with
    `global_batch`: the datasets take it in the same commit). `mount` defaults to $PTCFS_MOUNT,
    then the daemon's own mount; `daemon` and `secret_file` as for Client.

    Returns {"repartitioned": True when this call committed the new layout, "result": the
    daemon's repartition result or None, "refused": how many times the daemon said another
    repartition was under way, "ptc": the step's PTC as the mount shows it}.
    Raises Error: the daemon's own error for a real refusal (no such step, a config the PTC
    cannot split into, ...), deadline_exceeded when the mount does not show the layout
    within `timeout` seconds."""
    step = str(step)
    _ptc.check_id("job", job)
    _ptc.check_id("step", step)
    target = {"tp": int(tp), "pp": int(pp), "dp": int(dp)}
    to = f"tp={tp},pp={pp},dp={dp}"
    deadline = time.monotonic() + timeout

    def shown(mnt):
        if _mount_parallelism(mnt, job, step) != target:
            return False
        if global_batch is None:
            return True
        batches = _mount_batches(mnt, job)
        return batches is not None and all(b == int(global_batch) for b in batches)

    refused = 0

    def result(mnt, repartitioned, res):
        return {"repartitioned": repartitioned, "result": res, "refused": refused,
                "ptc": _ptc.load(os.path.join(mnt, job, step, "ptc.json"))}

    if mount is not None and shown(mount):
        return result(mount, False, None)
    with Client(daemon, secret_file, timeout=None) as c:
        mount = mount or default_mount(c)
        if shown(mount):
            return result(mount, False, None)
        last_error: Optional[Error] = None
        next_ask = time.monotonic()
        wait = poll
        while True:
            asking = time.monotonic() >= next_ask
            # The datasets' batches, read only when asking: a job without datasets has none.
            batches = _mount_batches(mount, job) if asking and global_batch is not None else []
            if asking and batches is None:
                next_ask = time.monotonic() + poll  # a dataset's state.json cannot be read yet
            elif asking:
                try:
                    res = c.repartition(job, step, to, global_batch=global_batch if batches else None)
                    # Done (by this call, or unchanged because another caller got there). The layout
                    # shown without the batch (a dataset came meanwhile): asked again below.
                    while _mount_parallelism(mount, job, step) != target:
                        if time.monotonic() > deadline:
                            raise Error("deadline_exceeded", f"{job}/{step} was repartitioned to {to} but "
                                        f"{mount}/{job}/{step}/ptc.json does not show it")
                        time.sleep(poll)
                    if shown(mount):
                        return result(mount, not res.get("unchanged", False), res)
                    next_ask = time.monotonic() + poll
                except Error as e:
                    if e.code != "failed_precondition" or not any(s in e.message for s in _TRANSIENT):
                        raise
                    last_error = e
                    refused += 1
                    next_ask = time.monotonic() + retry
            if shown(mount):
                return result(mount, False, None)
            if time.monotonic() > deadline:
                raise Error("deadline_exceeded",
                            f"{mount}/{job}/{step} does not show {to} after {timeout:g} s"
                            + (f" (last refusal: {last_error.message})" if last_error else ""))
            time.sleep(wait)
            wait = min(wait * 2, 0.5)


def wait_committed(job: str, step: Any, client: Optional[Client] = None, daemon: Optional[str] = None,
                   secret_file: Optional[str] = None, timeout: float = 600.0, poll: float = 0.05) -> dict:
    """Waits until JOB/STEP is a committed step (after saving into the mount: the daemon
    commits once every shard is complete and closed, which may land just after the last
    close returns). A step still `pending`, or not listed yet, is waited for. Returns the
    step's `ls` entry; Error(deadline_exceeded) after `timeout` seconds."""
    path = f"{job}/{step}"
    deadline = time.monotonic() + timeout
    own = client is None
    c = client or Client(daemon, secret_file)
    try:
        while True:
            try:
                info = c.ls(path)
                if info.get("state", "committed") == "committed":
                    return info
                what = f"pending ({info.get('bytes_written', '?')} of {info.get('bytes_total', '?')} bytes)"
            except Error as e:
                if e.code != "not_found":
                    raise
                what = "not listed"
            if time.monotonic() > deadline:
                raise Error("deadline_exceeded", f"{path} is still {what} after {timeout:g} s")
            time.sleep(poll)
            poll = min(poll * 2, 0.5)
    finally:
        if own:
            c.close()


def record_dataset_progress(client: Client, job: str, name: str, consumed: int, epoch: Optional[int] = None,
                            timeout: float = 600.0, poll: float = 0.05, dp: Optional[int] = None,
                            global_batch: Optional[int] = None, batch_offset: Optional[int] = None) -> dict:
    """client.dataset_progress, waiting out another change of the dataset prepared meanwhile (a
    repartition that re-splits it, the controller's while a job trains: refused with
    failed_precondition "is already being changed", or, on a cluster while its commit reaches the
    nodes, "is at version V, not W"); asked again until it goes through. Other refusals are
    raised at once; still refused after `timeout` seconds, the last refusal is. `dp`,
    `global_batch`, `batch_offset`: as Client.dataset_progress."""
    deadline = time.monotonic() + timeout
    # Only the fields given: a client of before (or a stand-in) takes (job, name, consumed, epoch).
    extra = {k: v for k, v in (("dp", dp), ("global_batch", global_batch), ("batch_offset", batch_offset))
             if v is not None}
    while True:
        try:
            return client.dataset_progress(job, name, consumed, epoch, **extra)
        except Error as e:
            busy = "is already being changed" in e.message or "is at version" in e.message
            if e.code != "failed_precondition" or not busy or time.monotonic() > deadline:
                raise
        time.sleep(poll)
        poll = min(poll * 2, 0.5)
