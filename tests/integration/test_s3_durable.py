"""The write-through S3 tier (ptcfsd --s3-durable, docs/OPERATIONS.md "The S3 tier") against a real S3
server (SeaweedFS, s3_util.py): every committed step is written to S3 in the background as the export
format, ptc.json last; `ptcfs ls` says how far it is; a copy is imported back bit for bit by a daemon
that never saw the step; a repartition or a restart keeps a step durable without sending it again;
a stopped, killed or refusing server delays the copy but never a read or a save, and the copy is
finished (a multipart upload going on from the parts S3 holds) once the server answers again."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from cluster_util import Cluster
from ptcfs_harness import PTCFS, Checkpoint, Daemon, assert_error, force_unmount, require_binaries, verify_step
from repartition_util import Oracles, wait_for
from s3_util import READER, S3Server, credentials_file

BUCKET = "tier"


def tier_server(tmp_path):
    """A started S3 server holding the tier's bucket, closed after the test (the fixture `s3`)."""
    s = S3Server(str(tmp_path / "s3"))
    s.start()
    s.bucket(BUCKET)
    try:
        yield s
    finally:
        s.close()


s3 = pytest.fixture(tier_server, name="s3")


def tier_flags(tmp_path, s3, key=None, prefix="ck", part_mib=None, budget_mib=None):
    creds = credentials_file(str(tmp_path / f"aws-{(key or ('w',))[0]}"), *([key] if key else []))
    flags = ["--s3-endpoint", s3.endpoint, "--s3-credentials", creds, "--s3-durable", f"s3://{BUCKET}/{prefix}"]
    flags += ["--disk-budget-mib", str(budget_mib)] if budget_mib is not None else []
    return flags + (["--s3-part-mib", str(part_mib)] if part_mib else [])


@contextlib.contextmanager
def tier_daemon(tmp_path, s3, name="d", env=None, **flags):
    """A started daemon writing through to s3://tier/ck, stopped (and unmounted) however the block ends."""
    d = Daemon(str(tmp_path / name), extra_flags=tier_flags(tmp_path, s3, **flags))
    d.env.update(env or {})
    d.start()
    try:
        yield d
    finally:
        d.stop(cleanup_mount=True)


def write_through(tmp_path, s3, ck, job, step):
    """Imports `ck` as job/step on a daemon writing through, and stops it once the step is durable."""
    with tier_daemon(tmp_path, s3) as d:
        d.cli("import", ck.path, "--job", job, "--step", step)
        wait_durable(d, job, step)


def durable(d, job, step):
    return d.cli_json("ls", f"{job}/{step}", "--json")["durable"]


def wait_durable(d, job, step, timeout=90):
    wait_for(lambda: durable(d, job, step)["state"] == "durable", timeout,
             lambda: f"{job}/{step} on {d.root} to be durable: {durable(d, job, step)}\n{d.log_tail(3000)}")


def folder_export(d, job, step, path):
    d.cli("export", f"{job}/{step}", path, "--format", "ptc")
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


def copy_of(s3, prefix):
    """The copy's files (rank files, ptc.json) and its manifest, from S3 as boto3 reads them."""
    got = s3.objects(BUCKET, prefix)
    files = {k[len(prefix):]: v for k, v in got.items() if "/" not in k[len(prefix):]}
    manifest = json.loads(files.pop("ptcfs-export.json"))
    return files, manifest


def import_elsewhere(tmp_path, s3, url, job, step, ck, name="reader"):
    """A daemon that never had the step imports the copy (a new cluster starting from the bucket)."""
    creds = credentials_file(str(tmp_path / f"aws-{name}"), READER)
    d = Daemon(str(tmp_path / name), extra_flags=["--s3-endpoint", s3.endpoint, "--s3-credentials", creds])
    d.start()
    try:
        d.cli("import", url, "--job", job, "--step", step)
        verify_step(d, job, step, ck)
    finally:
        d.stop(cleanup_mount=True)


def test_a_committed_step_is_written_through_and_a_new_daemon_imports_it_bit_for_bit(tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    with tier_daemon(tmp_path, s3) as d:
        assert d.cli_json("status", "--json")["s3_durable"] == f"s3://{BUCKET}/ck/"
        d.cli("import", ck.path, "--job", "gpt", "--step", "100")
        wait_durable(d, "gpt", "100")
        st = durable(d, "gpt", "100")
        assert st["version"] == 1 and st["bytes_uploaded"] == st["bytes_total"] > 0, st
        assert st["where"] == f"s3://{BUCKET}/ck/gpt/100/", st
        assert d.cli_json("ls", "gpt", "--json")["durable"] == {"100": "durable"}
        text = d.cli("ls", "gpt/100").stdout
        assert f"s3  durable  s3://{BUCKET}/ck/gpt/100/" in text, text

        want = folder_export(d, "gpt", "100", str(tmp_path / "folder"))
        files, manifest = copy_of(s3, "ck/gpt/100/")
        assert files == want  # the rank files and ptc.json, byte for byte
        assert manifest["format"] == "ptcfs-export/1" and manifest["version"] == 1
        assert {f["name"]: f["size"] for f in manifest["files"]} == {
            n: len(b) for n, b in want.items() if n != "ptc.json"}
        assert st["bytes_total"] == sum(f["size"] for f in manifest["files"])
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/100", "gpt", "100", ck)


def test_a_repartition_or_a_restart_keeps_a_step_durable_without_sending_it_again(tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    oracles = Oracles(str(tmp_path), ck, 0)
    with tier_daemon(tmp_path, s3) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        c = s3.client()
        before = {o["Key"]: o["ETag"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="ck/")["Contents"]}
        d.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=2,dp=1")
        st = durable(d, "gpt", "1")
        assert st["state"] == "durable", st
        verify_step(d, "gpt", "1", oracles((1, 2, 1)))
        d.restart()
        assert durable(d, "gpt", "1")["state"] in ("durable", "local")  # the tier's first pass may not have run
        wait_durable(d, "gpt", "1", 10)
        time.sleep(1.5)  # a pass or two more: nothing is sent
        after = {o["Key"]: o["ETag"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="ck/")["Contents"]}
        assert after == before
        assert "is durable in" not in d.log_tail(100000).split("===== start #2")[1]
    # The copy is at the layout it was written at; imported, it is that layout's bytes.
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/1", "gpt", "1", ck)


def test_a_stopped_server_delays_the_copy_never_a_read_or_a_save(tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=1)
    with tier_daemon(tmp_path, s3) as d:
        s3.stop()  # SIGSTOP: requests hang until the client's stall timeout
        try:
            t0 = time.monotonic()
            d.cli("import", ck.path, "--job", "gpt", "--step", "7")
            verify_step(d, "gpt", "7", ck)
            st = durable(d, "gpt", "7")
            assert st["state"] in ("local", "uploading"), st
            assert time.monotonic() - t0 < 15, "the import or the reads waited for S3"
        finally:
            s3.cont()
        wait_durable(d, "gpt", "7", 180)
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/7", "gpt", "7", ck)


def test_a_bucket_refusing_writes_leaves_the_step_local_saying_why_and_a_restart_with_rights_finishes_it(
        tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=2)
    with tier_daemon(tmp_path, s3, key=READER) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "3")
        wait_for(lambda: durable(d, "gpt", "3").get("failures", 0) >= 1, 60,
                 lambda: f"a refused upload: {durable(d, 'gpt', '3')}")
        st = durable(d, "gpt", "3")
        assert st["state"] == "local", st
        assert "AccessDenied" in st["note"] or "permission" in st["note"].lower(), st
        assert READER[1] not in d.log_tail(100000)  # the secret is never logged
        verify_step(d, "gpt", "3", ck)  # reads go on
        assert "ck/gpt/3/ptc.json" not in s3.objects(BUCKET, "ck/")
        d.stop(cleanup_mount=True)
        d.extra_flags = tier_flags(tmp_path, s3)
        d.start()
        wait_durable(d, "gpt", "3")
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/3", "gpt", "3", ck)


def test_a_server_killed_mid_upload_is_gone_on_with_from_the_parts_it_holds(tmp_path, s3):
    require_binaries()
    # One rank file of ~18 MB: four parts of 5 MiB.
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, layers=2, hidden=512, vocab=1000)
    with tier_daemon(tmp_path, s3, part_mib=5, env={"PTCFS_FAILPOINT": "s3.part.sent:0.7"}) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "9")
        wait_for(lambda: durable(d, "gpt", "9")["bytes_uploaded"] >= 2 * (5 << 20), 60,
                 lambda: f"two parts sent: {durable(d, 'gpt', '9')}")
        s3.kill()
        wait_for(lambda: durable(d, "gpt", "9").get("failures", 0) >= 1, 120,
                 lambda: f"the upload to fail: {durable(d, 'gpt', '9')}")
        assert durable(d, "gpt", "9")["state"] == "local"
        verify_step(d, "gpt", "9", ck)
        s3.start()
        wait_durable(d, "gpt", "9", 180)
        d.wait_log("going on with the upload of tp0-pp0.safetensors")
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/9", "gpt", "9", ck)


def test_a_daemon_killed_mid_upload_goes_on_with_it_after_a_restart_and_leaves_no_upload_open(tmp_path, s3):
    """The daemon SIGKILLed between two parts of a multipart upload: it kept the upload's id in its
    metadata, so the restarted daemon goes on from the parts S3 holds instead of starting the file again,
    and once the step is durable no multipart upload is left open in the bucket (none orphaned)."""
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, layers=2, hidden=512, vocab=1000)
    with tier_daemon(tmp_path, s3, part_mib=5, env={"PTCFS_FAILPOINT": "s3.part.sent:0.7"}) as d:
        d.cli("import", ck.path, "--job", "gpt", "--step", "10")
        wait_for(lambda: durable(d, "gpt", "10")["bytes_uploaded"] >= 2 * (5 << 20), 60,
                 lambda: f"two parts sent: {durable(d, 'gpt', '10')}")
        d.kill9()
        (left,) = s3.client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        assert left["Key"] == "ck/gpt/10/tp0-pp0.safetensors", left
        force_unmount(d.mnt)
        d.start()
        wait_durable(d, "gpt", "10", 180)
        d.wait_log("an upload of s3://tier/ck/gpt/10/tp0-pp0.safetensors left by an earlier run goes on")
        m = re.search(r"going on with the upload of tp0-pp0.safetensors to \S+: (\d+) of its parts are there",
                      d.log_tail(100000))
        assert m and int(m.group(1)) >= 2, d.log_tail(3000)
    assert s3.client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/10", "gpt", "10", ck)


def test_a_copy_damaged_or_cut_behind_ptcfs_is_refused_on_import(tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=1)
    write_through(tmp_path, s3, ck, "gpt", "5")
    c = s3.client()
    key = "ck/gpt/5/tp1-pp0.safetensors"
    body = bytearray(c.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[-3] ^= 0x40
    c.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    creds = credentials_file(str(tmp_path / "aws-r"), READER)
    r = Daemon(str(tmp_path / "r"), extra_flags=["--s3-endpoint", s3.endpoint, "--s3-credentials", creds])
    r.start()
    try:
        res = r.cli("import", f"s3://{BUCKET}/ck/gpt/5", "--job", "gpt", "--step", "5", check=False)
        assert_error(res, "tp1-pp0.safetensors", "nothing was imported")
        c.delete_object(Bucket=BUCKET, Key=key)
        res = r.cli("import", f"s3://{BUCKET}/ck/gpt/5", "--job", "gpt", "--step", "5", check=False)
        assert_error(res, "tp1-pp0.safetensors")
        assert r.cli_json("ls", "--json")["jobs"] == []
    finally:
        r.stop(cleanup_mount=True)


def test_a_new_step_saved_under_a_removed_steps_name_is_written_anew(tmp_path, s3):
    require_binaries()
    a = Checkpoint(str(tmp_path / "a"), tp=2, pp=1, seed=1)
    b = Checkpoint(str(tmp_path / "b"), tp=2, pp=1, seed=2)
    with tier_daemon(tmp_path, s3) as d:
        d.cli("import", a.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        d.cli("rm", "gpt/1")
        d.cli("import", b.path, "--job", "gpt", "--step", "1")
        wait_durable(d, "gpt", "1")
        d.wait_log("holds another copy than this step's files: writing it anew")
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/1", "gpt", "1", b)


def test_on_a_cluster_each_shard_is_written_once_by_its_first_holder(tmp_path, s3):
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    with Cluster(str(tmp_path / "c"), 3, extra_flags=tier_flags(tmp_path, s3)) as c:
        c[0].cli("import", ck.path, "--job", "gpt", "--step", "2")
        for d in c.nodes:
            wait_durable(d, "gpt", "2")
        sent = [durable(d, "gpt", "2")["bytes_total"] for d in c.nodes]
        files, manifest = copy_of(s3, "ck/gpt/2/")
        assert sum(sent) == sum(f["size"] for f in manifest["files"]), (sent, manifest)
        assert sorted(files) == ["ptc.json", "tp0-pp0.safetensors", "tp0-pp1.safetensors", "tp1-pp0.safetensors",
                                 "tp1-pp1.safetensors"]
        assert files == folder_export(c[1], "gpt", "2", str(tmp_path / "folder"))
    import_elsewhere(tmp_path, s3, f"s3://{BUCKET}/ck/gpt/2", "gpt", "2", ck)


def test_a_new_cluster_restores_a_durable_step_at_a_new_layout_fetching_the_copy_once(tmp_path, s3):
    """A step written through at tp=2,pp=2 from one daemon; a new 3-node cluster that never had it imports
    the copy with --to tp=1,pp=2,dp=3: each node reads only its old shards' rank files from S3 (the copy
    once in all), then the nodes pull from each other exactly the minimum the new layout lacks."""
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    write_through(tmp_path, s3, ck, "gpt", "4")
    files, manifest = copy_of(s3, "ck/gpt/4/")
    copy_bytes = sum(f["size"] for f in manifest["files"])
    creds = credentials_file(str(tmp_path / "aws-restore"), READER)
    with Cluster(str(tmp_path / "c"), 3, extra_flags=["--s3-endpoint", s3.endpoint, "--s3-credentials", creds]) as c:
        r = c[1].cli_json("import", f"s3://{BUCKET}/ck/gpt/4", "--job", "gpt", "--step", "4", "--to",
                          "tp=1,pp=2,dp=3", "--json")
        rep = r["repartition"]
        assert rep["to"] == {"tp": 1, "pp": 2, "dp": 3} and rep["version"] == 2, rep
        assert rep["bytes_moved"] == rep["bytes_min"], rep
        received = [d.cli_json("status", "--json").get("s3", {}).get("bytes_received", 0) for d in c.nodes]
        # Each rank file once (its header read first: a few KB more), by the node holding its shard.
        assert copy_bytes <= sum(received) < copy_bytes + 64 * 1024 * len(files), (received, copy_bytes)
        assert received[2] < 64 * 1024 * len(files), received  # n2 held no shard of the copy's layout
        want = Oracles(str(tmp_path), ck, 0)((1, 2, 3))
        for i, node in enumerate(c.nodes):
            verify_step(node, "gpt", "4", want, full_views=(i == 2))


def test_on_a_cluster_a_step_saved_under_a_removed_ones_name_with_one_shard_changed_gets_its_own_copy(
        tmp_path, s3):
    """Steps A and B differ in one rank file only (held by another node than the one that commits the
    copy): after `rm` of A and an import of B under its name, the copy in S3 is B's, byte for byte, on
    every node's word (the committing node's own files alone would have said A's copy was whole)."""
    require_binaries()
    a = Checkpoint(str(tmp_path / "a"), tp=2, pp=2, seed=1)
    other = Checkpoint(str(tmp_path / "other"), tp=2, pp=2, seed=2)
    b = str(tmp_path / "b")
    shutil.copytree(a.path, b)
    shutil.copy(os.path.join(other.path, "tp1-pp1.safetensors"), os.path.join(b, "tp1-pp1.safetensors"))
    with Cluster(str(tmp_path / "c"), 3, extra_flags=tier_flags(tmp_path, s3)) as c:
        c[0].cli("import", a.path, "--job", "gpt", "--step", "6")
        for d in c.nodes:
            wait_durable(d, "gpt", "6")
        a_manifest = copy_of(s3, "ck/gpt/6/")[1]
        # At once: part records are told apart from the removed step's by the version's origin (the
        # transaction that committed it), not by when they were written.
        c[0].cli("rm", "gpt/6")
        c[0].cli("import", b, "--job", "gpt", "--step", "6")
        for d in c.nodes:
            wait_durable(d, "gpt", "6")
        files, manifest = copy_of(s3, "ck/gpt/6/")
        want = {n: open(os.path.join(b, n), "rb").read() for n in os.listdir(b) if n.endswith(".safetensors")}
        assert {n: v for n, v in files.items() if n.endswith(".safetensors")} == want
        assert {f["name"]: f["size"] for f in manifest["files"]} == {n: len(v) for n, v in want.items()}
        assert manifest["version"] == a_manifest["version"] == 1
        assert a_manifest["origin"] and manifest["origin"] not in ("", a_manifest["origin"])  # their transactions


def test_ls_s3_lists_the_copies_under_a_prefix_and_says_which_are_whole(tmp_path, s3):
    """What a new cluster started against the bucket sees: `ptcfs ls s3://BUCKET/PREFIX` (no daemon) lists
    each copy with its layout, files, bytes and version, and tells a whole copy from one cut short (no
    ptc.json) and one damaged (a rank file gone), from one listing and the copies' small files."""
    require_binaries()
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    write_through(tmp_path, s3, ck, "gpt", "1")
    files, manifest = copy_of(s3, "ck/gpt/1/")
    c = s3.client()
    for name, body in files.items():
        if name != "ptc.json":
            c.put_object(Bucket=BUCKET, Key=f"ck/gpt/2/{name}", Body=body)  # cut short: no ptc.json
        if name != "tp1-pp1.safetensors":
            c.put_object(Bucket=BUCKET, Key=f"ck/gpt/3/{name}", Body=body)  # a rank file gone
    for step in ("2", "3"):
        c.put_object(Bucket=BUCKET, Key=f"ck/gpt/{step}/ptcfs-export.json", Body=json.dumps(manifest).encode())
    creds = credentials_file(str(tmp_path / "aws-ls"), READER)
    cmd = [PTCFS, "ls", f"s3://{BUCKET}/ck", "--s3-endpoint", s3.endpoint, "--s3-credentials", creds]
    got = json.loads(subprocess.run(cmd + ["--json"], check=True, capture_output=True, text=True).stdout)
    rank_bytes = sum(f["size"] for f in manifest["files"])
    common = {"files": 4, "bytes": rank_bytes, "version": 1, "origin": manifest["origin"]}
    assert got == {"where": f"s3://{BUCKET}/ck/", "copies": [
        {"path": "gpt/1", "url": f"s3://{BUCKET}/ck/gpt/1", "state": "whole",
         "parallelism": {"tp": 2, "pp": 2, "dp": 1}, **common},
        {"path": "gpt/2", "url": f"s3://{BUCKET}/ck/gpt/2", "state": "incomplete",
         "note": "no ptc.json: being written, or cut short (never imported as a whole step)", **common},
        {"path": "gpt/3", "url": f"s3://{BUCKET}/ck/gpt/3", "state": "damaged",
         "note": "tp1-pp1.safetensors is missing", "parallelism": {"tp": 2, "pp": 2, "dp": 1}, **common},
    ]}, got
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    assert re.search(rf"s3://{BUCKET}/ck/gpt/1 +whole +tp=2,pp=2,dp=1 +4 files .* version 1", text), text
    empty = subprocess.run([*cmd[:2], f"s3://{BUCKET}/none", *cmd[3:]], check=True, capture_output=True, text=True)
    assert empty.stdout == f"no step copies under s3://{BUCKET}/none/\n"
