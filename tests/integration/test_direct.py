"""The direct data path: processes on the node read files of the mount without FUSE through
the daemon's Unix socket (descriptors passed with SCM_RIGHTS, mapped by libptcfs_client), with
ptcfs.direct from Python. Every byte is checked against the generator's oracle and against the
same file read through the mount; bad input gets an error, not a crash."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import ptcgen
from cluster_util import Cluster
from ptcfs_harness import PTCFS, Checkpoint, Daemon, read_all, require_binaries
from repartition_util import Oracles, wait_for

import ptcfs
from ptcfs import direct

PY = "/usr/bin/python3"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blobs(d):
    return set(os.listdir(os.path.join(d.data, "blobs")))


def check_file(path: str, want: dict, *, zero_copy: bool):
    """Opens `path` directly; its bytes equal the mount's, its tensors the oracle's."""
    with direct.open(path, fallback=False) as f:
        assert f.direct and f.version >= 1, (path, f.why_not)
        assert bytes(f.read()) == read_all(path), path
        got = f.tensors()
        assert sorted(got) == sorted(want), path
        for name, arr in want.items():
            a = got[name]
            assert a.dtype == arr.dtype and a.shape == arr.shape and np.array_equal(a, arr), (path, name)
            assert not a.flags.writeable, (path, name)
            if zero_copy:
                assert not a.flags.owndata, f"{path}: {name} was copied, not mapped"
    return got


def test_every_view_reads_the_same_directly_and_zero_copy(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=2, pp=2, layers=2, hidden=128, vocab=1000)  # a padded vocabulary: zero pieces
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    sd = daemon.step_dir("j", "1")
    kept = {}
    for (t, p), want in ck.slices.items():
        # Imported slices lie whole in a blob: every tensor is a view of the mapping.
        kept[(t, p)] = check_file(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want, zero_copy=True)
        for name, arr in want.items():
            check_file(os.path.join(sd, f"tp{t}-pp{p}", ptcgen.npy_relpath(name)), {name.split("/")[-1]: arr},
                       zero_copy=True)
    for name, arr in ck.full.items():  # assembled from the pieces of several shards
        check_file(os.path.join(sd, "full", ptcgen.npy_relpath(name)), {name.split("/")[-1]: arr}, zero_copy=False)
    with direct.open(os.path.join(sd, "ptc.json")) as f:
        assert f.direct and json.loads(bytes(f.read())) == ck.ptc
    # torch tensors share the arrays.
    with direct.open(os.path.join(sd, "tp0-pp0.safetensors")) as f:
        for name, tt in f.torch().items():
            assert tuple(tt.shape) == ck.slices[(0, 0)][name].shape
    # Arrays outlive their File: the mapping goes with the last of them.
    a = kept[(0, 0)]
    assert all(np.array_equal(a[n], ck.slices[(0, 0)][n]) for n in a)
    # The package reads shards through it.
    got = ptcfs.load_shard(sd, 1, 1, ptc=ck.ptc)
    assert all(np.array_equal(got[n], ck.slices[(1, 1)][n]) for n in ck.slices[(1, 1)])


def test_a_file_held_open_keeps_its_version_across_rm_and_repartition(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=2, pp=2, layers=2, hidden=128, vocab=512)
    oracles = Oracles(str(tmp_path), ck, 0)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    sd = daemon.step_dir("j", "1")
    path = os.path.join(sd, "tp0-pp0.safetensors")
    held = direct.open(path, fallback=False)
    assert held.version == 1
    daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=2,dp=1")
    check_file(os.path.join(sd, "tp0-pp1.safetensors"), oracles((1, 2, 1)).slices[(0, 1)], zero_copy=False)
    daemon.cli("rm", "j/1")
    # The step is gone from the mount; the held file still reads version 1, byte for byte.
    assert not os.path.exists(sd)
    got = held.tensors()
    assert all(np.array_equal(got[n], ck.slices[(0, 0)][n]) for n in ck.slices[(0, 0)])
    assert blobs(daemon), "blobs of a held version were removed"
    del got
    held.close()
    wait_for(lambda: not blobs(daemon), 15, lambda: f"blobs left after the last holder let go: {blobs(daemon)}")


def test_strided_slices_are_gathered(tmp_path, remap_daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=4, pp=1, layers=2, hidden=512, vocab=512)
    oracles = Oracles(str(tmp_path), ck, 0)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    r = remap_daemon.cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=1", "--json")
    assert r["bytes_remapped"] > 0, r  # re-cut slices left strided (large enough not to be copied)
    sd = remap_daemon.step_dir("j", "1")
    gathered = 0
    for (t, p), want in oracles((2, 1, 1)).slices.items():
        got = check_file(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want, zero_copy=False)
        gathered += sum(a.flags.owndata for a in got.values())
    assert gathered > 0, "no tensor was strided: the gather path went untested"


def raw_request(sock_path: str, payload: bytes) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    s.sendall(payload)
    head = b""
    while len(head) < 16:
        chunk = s.recv(16 - len(head))
        assert chunk, "the daemon closed without an answer"
        head += chunk
    assert head[:4] == b"PTCD", head
    jlen, blen, nfds = struct.unpack("<III", head[4:])
    body = b""
    while len(body) < jlen:
        body += s.recv(jlen - len(body))
    assert (blen, nfds) == (0, 0)
    s.close()
    return json.loads(body)


def message(obj) -> bytes:
    j = json.dumps(obj).encode()
    return b"PTCD" + struct.pack("<III", len(j), 0, 0) + j


def test_bad_requests_get_errors_and_nothing_breaks(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=64, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    sd = daemon.step_dir("j", "1")
    # The mount names its socket in a hidden file that no listing shows.
    with open(os.path.join(daemon.mnt, ".ptcfs-direct")) as f:
        sock = f.read()
    assert sock == os.path.join(os.path.realpath(daemon.data), "direct.sock")
    assert ".ptcfs-direct" not in os.listdir(daemon.mnt)
    assert not os.path.exists(os.path.join(sd, ".ptcfs-direct"))  # at the root only

    def refused(path, code, text, **kw):
        with pytest.raises(ptcfs.Error) as e:
            direct.open(path, fallback=False, **kw)
        assert e.value.code == code and text in e.value.message, e.value

    refused(sd, "invalid_argument", "is a folder")
    refused(os.path.join(sd, "tp9-pp0.safetensors"), "not_found", "No such file")
    refused("/etc/hostname", "invalid_argument", "is not inside the mount", socket=sock)
    refused(os.path.join(sd, "tp0-pp0.safetensors"), "unavailable", "connecting", socket=str(tmp_path / "nosock"))
    # A step being saved: its files are read once it commits.
    os.makedirs(os.path.join(daemon.mnt, "j", "2"))
    with open(os.path.join(daemon.mnt, "j", "2", "ptc.json"), "w") as f:
        json.dump(ck.ptc, f)
    refused(os.path.join(daemon.mnt, "j", "2", "ptc.json"), "failed_precondition", "still being saved")
    # Not this protocol, a malformed open, an unknown operation.
    for payload, text in [(b"hello, daemon!!!", "not a ptcfs message"),
                          (message({"op": "open", "path": 5}), "'path'"),
                          (message({"op": "rm"}), "unknown direct socket operation 'rm'"),
                          (b"PTCD" + struct.pack("<III", 1 << 30, 0, 0), "larger than allowed")]:
        r = raw_request(sock, payload)
        assert r["ok"] is False and text in r["error"], (payload[:20], r)
    # The daemon serves on, directly and through the mount.
    check_file(os.path.join(sd, "tp1-pp0.safetensors"), ck.slices[(1, 0)], zero_copy=True)
    assert "j" in os.listdir(daemon.mnt)


def test_another_uid_is_refused_and_falls_back_to_the_mount(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    # The other uid must reach the mount, and the socket itself (so that the daemon's check of
    # its credentials is what refuses it, not the file's mode): open them to it.
    p = daemon.data
    while p not in ("/", "/tmp"):
        os.chmod(p, os.stat(p).st_mode | 0o055)
        p = os.path.dirname(p)
    os.chmod(os.path.join(daemon.data, "direct.sock"), 0o777)
    script = f"""
import os, sys, json
sys.path.insert(0, {os.path.join(REPO, 'python')!r})
os.setgid(65534); os.setuid(65534)
import numpy as np, ptcfs
from ptcfs import direct
try:
    direct.open({path!r}, fallback=False)
    print("opened")
except ptcfs.Error as e:
    print(e.code, e.message)
f = direct.open({path!r})
print(json.dumps({{"direct": f.direct, "why": f.why_not,
                   "sums": {{n: float(np.asarray(a, dtype=np.float64).sum()) for n, a in f.tensors().items()}}}}))
"""
    r = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PTCFS_CLIENT_LIB": os.path.join(os.environ.get("PTCFS_BUILD", ""),
                                                                             "transport", "libptcfs_client.so")})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()[:2]
    assert first.startswith("permission_denied") and "uid 65534" in first, first
    out = json.loads(second)
    assert out["direct"] is False and "permission_denied" in out["why"], out
    want = {n: float(np.asarray(a, dtype=np.float64).sum()) for n, a in ck.slices[(0, 0)].items()}
    assert out["sums"] == want


def test_a_client_killed_holding_a_file_releases_its_version(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    script = f"""
import sys, time
sys.path.insert(0, {os.path.join(REPO, 'python')!r})
from ptcfs import direct
f = direct.open({path!r}, fallback=False)
a = f.tensors()
print("held", flush=True)
time.sleep(600)
"""
    proc = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert proc.stdout.readline().strip() == "held"
        daemon.cli("rm", "j/1")
        time.sleep(6)  # a collection pass runs every 5 s: the held blobs stay
        assert blobs(daemon)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    wait_for(lambda: not blobs(daemon), 15, lambda: f"blobs left after the client died: {blobs(daemon)}")


def test_a_blob_cut_short_is_an_error_not_a_crash(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    for blob in blobs(daemon):
        with open(os.path.join(daemon.data, "blobs", blob), "r+b") as f:
            f.truncate(os.fstat(f.fileno()).st_size // 2)
    script = f"""
import sys
sys.path.insert(0, {os.path.join(REPO, 'python')!r})
import ptcfs
from ptcfs import direct
try:
    direct.open({path!r}, fallback=False).tensors()
    print("read")
except ptcfs.Error as e:
    print(e.code, e.message)
"""
    r = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60, env=os.environ)
    assert r.returncode == 0, f"the client died: {r.returncode} {r.stderr}"  # not SIGBUS
    # The daemon finds it (the blob's size now) or the client does (before it maps anything).
    assert r.stdout.startswith("corrupt") and "blob" in r.stdout, r.stdout


def test_without_the_socket_the_same_calls_read_through_the_mount(tmp_path, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=64, vocab=256)
    d = Daemon(str(tmp_path / "d"), extra_flags=["--direct-socket", "none"])
    d.start()
    try:
        d.cli("import", ck.path, "--job", "j", "--step", "1")
        path = os.path.join(d.step_dir("j", "1"), "tp1-pp0.safetensors")
        assert not os.path.exists(os.path.join(d.mnt, ".ptcfs-direct"))
        f = direct.open(path)
        assert not f.direct and "no direct socket" in f.why_not, f.why_not
        assert bytes(f.read()) == read_all(path)
        got = f.tensors()
        assert all(np.array_equal(got[n], a) for n, a in ck.slices[(1, 0)].items())
    finally:
        d.stop()


def test_a_shard_held_by_another_node_comes_through_the_local_daemon(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=128, vocab=512)
    with Cluster(root, 2) as c:  # 2 GPUs each: stage 0 on n0, stage 1 on n1
        c[0].cli("import", ck.path, "--job", "j", "--step", "1")
        sd = c[0].step_dir("j", "1")
        def sent_by_n1():
            nodes = c[0].cli_json("status", "--json")["cluster"]["nodes"]
            return next(n["bytes_sent"] for n in nodes if n["id"] == "n1")
        before = sent_by_n1()
        for (t, p), want in ck.slices.items():
            # Stage 1's bytes come from n1 into a sealed memfd of n0: still one mapped piece.
            check_file(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), want, zero_copy=True)
        stage1 = sum(a.nbytes for (t, p), sl in ck.slices.items() if p == 1 for a in sl.values())
        assert sent_by_n1() - before >= stage1  # n1 served them (the mount's reads of them may add more)


def test_dataset_views_read_directly_from_the_dataset_files(tmp_path, daemon):
    require_binaries()
    from dataset_util import write_jsonl
    src = str(tmp_path / "train.jsonl")
    write_jsonl(src, 103, seed=1, final_newline=False)  # the last record gets a newline supplied
    daemon.cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 11,
               "--global-batch", 12, "--dp", 2, src)
    for d in range(2):
        path = os.path.join(daemon.mnt, "gpt", "data", "train", f"dp{d}.jsonl")
        with direct.open(path, fallback=False) as f:
            assert f.direct and f.version >= 1
            assert bytes(f.read()) == read_all(path)
            with pytest.raises(ptcfs.Error):
                f.tensors()  # not a tensor file


def test_past_the_connection_limit_files_are_read_through_the_mount(tmp_path, daemon, make_ckpt):
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    held = [direct.open(path) for _ in range(260)]  # the daemon serves 256 connections at once
    assert [f.direct for f in held] == [True] * 256 + [False] * 4
    assert "resource_exhausted" in held[-1].why_not and "256 connections" in held[-1].why_not
    for f in held[-4:] + held[:2]:  # the same values either way
        got = f.tensors()
        assert all(np.array_equal(got[n], a) for n, a in ck.slices[(0, 0)].items())
    for f in held[:10]:
        f.close()
    wait_for(lambda: direct.open(path).direct, 10, "closed connections were not given back")


def test_without_a_gpu_the_gpu_path_says_why_and_the_host_path_still_loads(daemon, make_ckpt):
    """Where there is no GPU (CI), ptcfs.direct says why not, naming the cause, and torch(device="cpu")
    is the host path; on a GPU machine tests/gpu covers the device (make test-gpu)."""
    import torch
    ok, why = direct.gpu_available()
    if torch.cuda.is_available():
        assert ok, why
        return
    assert not ok
    assert why.startswith("unavailable: ") and ("GPU" in why or "CUDA" in why or "driver" in why), why
    ck = make_ckpt(tp=1, pp=1, layers=1, hidden=128, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    got = ptcfs.load_shard(daemon.step_dir("j", "1"), 0, 0, ptc=ck.ptc, device="cpu")
    for name, arr in ck.slices[(0, 0)].items():
        t = got[name]
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
        assert t.contiguous().view(torch.uint8).numpy().tobytes() == np.ascontiguousarray(arr).tobytes(), name
