"""Helpers for the repartition integration tests: oracles for any target configuration,
`ptcfs repartition` with the invariants every reply must satisfy, the blob directory, polling."""

from __future__ import annotations

import copy
import json
import os
import re
import time
from typing import Optional, Callable, Dict, Tuple

import pytest

import ptcgen
from ptcfs_harness import Checkpoint, Daemon, check_ls_step, verify_step

Par = Tuple[int, int, int]  # (tp, pp, dp)

# The fields of `repartition --json` that describe the plan, identical for a dry run and the real run.
PLAN_KEYS = ("shards", "tensors", "copies", "fills", "extents", "compacted_slices", "bytes_total",
             "bytes_remapped", "bytes_compacted", "bytes_fill", "bytes_moved", "bytes_min")
REPLY_KEYS = {"job", "step", "from", "to", "dry_run", "unchanged", "version", "seconds", "datasets", *PLAN_KEYS}
BLOB_NAME = re.compile(r"^[0-9a-f]{16}$")


def par_of(ptc: dict) -> Par:
    p = ptc["parallelism"]
    return (p["tp"], p["pp"], p["dp"])


def par_str(par: Par) -> str:
    return "tp={},pp={},dp={}".format(*par)


def par_dict(par: Par) -> dict:
    return {"tp": par[0], "pp": par[1], "dp": par[2]}


def retarget(ptc: dict, par: Par) -> dict:
    """The same PTC with another parallelism (what the mount's ptc.json must show after a repartition)."""
    out = copy.deepcopy(ptc)
    out["parallelism"] = par_dict(par)
    return out


def padding_bytes(ptc: dict, tp: int, pp: int) -> int:
    """Zero padding bytes of every pad_to tensor, counted once per stage holding it."""
    total = 0
    for spec in ptc["tensors"].values():
        if "pad_to" not in spec:
            continue
        k = spec["tp_dim"]
        rows = ptcgen.padded_size(spec["shape"][k], spec["pad_to"], tp) - spec["shape"][k]
        other = ptcgen.nbytes_of(spec["dtype"], spec["shape"]) // spec["shape"][k]
        total += rows * other * len(ptcgen.stages_of(spec, ptc["num_layers"], pp))
    return total


class Oracles:
    """Canonical checkpoint directories of one PTC (same full tensors) for any configuration,
    written on first use under `root`."""

    def __init__(self, root: str, base: Checkpoint, seed: int):
        self.root = root
        self.base = base
        self.seed = seed
        self._by_par: Dict[Par, Checkpoint] = {par_of(base.ptc): base}

    def __call__(self, par: Par) -> Checkpoint:
        par = tuple(par)
        if par not in self._by_par:
            path = os.path.join(self.root, "oracle-tp{}-pp{}-dp{}".format(*par))
            self._by_par[par] = Checkpoint(path, ptc=retarget(self.base.ptc, par), seed=self.seed)
        return self._by_par[par]


def repartition(d: Daemon, job: str, step: str, to: Par, *, frm: Par, ptc: dict, version: int,
                dry_run: bool = False) -> dict:
    """Runs `ptcfs repartition --json` and checks the reply against what the contract fixes:
    `frm`/`version` are the step's configuration and version before the call."""
    args = ["repartition", "--job", job, "--step", step, "--to", par_str(to), "--json"]
    if dry_run:
        args.append("--dry-run")
    r = d.cli_json(*args)
    assert set(r) == REPLY_KEYS, f"reply keys {sorted(r)}"
    assert r["job"] == job and r["step"] == step, r
    assert r["from"] == par_dict(frm), r
    assert r["to"] == par_dict(to), r
    assert r["dry_run"] is dry_run, r
    unchanged = tuple(to) == tuple(frm)
    assert r["unchanged"] is unchanged, r
    assert r["version"] == (version if dry_run or unchanged else version + 1), r
    tp, pp, _ = to
    assert r["shards"] == tp * pp, r
    assert r["tensors"] == len(ptc["tensors"]), r
    assert r["bytes_total"] == ptcgen.total_bytes(retarget(ptc, to)), r
    assert r["bytes_moved"] == 0 and r["bytes_min"] == 0, r
    assert isinstance(r["seconds"], (int, float)) and r["seconds"] >= 0, r
    if not unchanged:
        assert r["bytes_fill"] == padding_bytes(ptc, tp, pp), r
        assert r["copies"] > 0 and r["extents"] > 0, r
    return r


def check_byte_counters(r: dict) -> None:
    """The new layout's bytes are each remapped (served from old blobs), compacted (copied) or padding."""
    for k in ("bytes_remapped", "bytes_compacted", "bytes_fill"):
        assert 0 <= r[k] <= r["bytes_total"], f"{k} = {r[k]} outside 0..bytes_total ({r['bytes_total']}): {r}"
    assert r["bytes_remapped"] + r["bytes_compacted"] + r["bytes_fill"] == r["bytes_total"], r
    assert 0 <= r["compacted_slices"] and (r["compacted_slices"] == 0) == (r["bytes_compacted"] == 0), r


def step_version(d: Daemon, job: str, step: str) -> int:
    return d.cli_json("ls", f"{job}/{step}", "--json")["version"]


def check_current(d: Daemon, job: str, step: str, ck: Checkpoint, version: int, full_views: bool = True) -> None:
    """The step shows exactly `ck`'s layout, and `ls` says so, at `version`."""
    verify_step(d, job, step, ck, full_views=full_views)
    check_ls_step(d, job, step, ck)
    assert step_version(d, job, step) == version


def blobs_dir(d: Daemon) -> str:
    return os.path.join(d.data, "blobs")


def blob_usage(d: Daemon) -> Tuple[int, int, Dict[str, int]]:
    """(count, total bytes, {name: size}) of the daemon's blob files."""
    sizes = {}
    for name in os.listdir(blobs_dir(d)):
        try:
            sizes[name] = os.stat(os.path.join(blobs_dir(d), name)).st_size
        except FileNotFoundError:
            continue  # removed while we listed
    return len(sizes), sum(sizes.values()), sizes


def wait_for(pred: Callable[[], object], timeout: float, what: Callable[[], str] | str, interval: float = 0.1):
    """Polls pred() until it returns something true; fails with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            pytest.fail(f"after {timeout} s: {what() if callable(what) else what}", pytrace=False)
        time.sleep(interval)


def reference_blob_usage(root: str, ck: Checkpoint, chain, job: str = "j", step: str = "1",
                         like: Optional[Daemon] = None) -> Tuple[int, int]:
    """(count, bytes) of the blobs of a fresh daemon under `root` (with the flags of `like`) that imported
    `ck`, repartitioned it through `chain` with nothing open, and restarted (a start keeps only blobs the
    current version uses)."""
    ref = Daemon(root, name="ref", extra_flags=like.extra_flags if like else None)
    try:
        ref.start()
        import_step(ref, ck, job, step)
        frm, v = par_of(ck.ptc), 1
        for to in chain:
            repartition(ref, job, step, to, frm=frm, ptc=ck.ptc, version=v)
            frm, v = tuple(to), v + 1
        ref.restart()
        assert step_version(ref, job, step) == v
        return blob_usage(ref)[:2]
    finally:
        ref.stop()


def read_ptc_json(d: Daemon, job: str, step: str) -> dict:
    with open(os.path.join(d.step_dir(job, step), "ptc.json")) as f:
        return json.load(f)


def content_snapshot(root: str) -> Dict[str, Tuple[str, int]]:
    """{relative path: (sha256 or 'dir', size)}: the tree and its bytes, without inode numbers."""
    from ptcfs_harness import snapshot
    return {k: (h, size) for k, (h, _, size) in snapshot(root).items()}


def import_step(d: Daemon, ck: Checkpoint, job: str, step: str) -> None:
    out = d.cli_json("import", ck.path, "--job", job, "--step", step, "--json")
    for k, v in ck.expected_import(job, step).items():
        assert out.get(k) == v, (k, out)


__all__ = ["Par", "PLAN_KEYS", "BLOB_NAME", "Oracles", "par_of", "par_str", "par_dict", "retarget", "padding_bytes",
           "repartition", "check_byte_counters", "step_version", "check_current", "blobs_dir", "blob_usage",
           "wait_for", "read_ptc_json", "content_snapshot", "import_step", "reference_blob_usage"]
