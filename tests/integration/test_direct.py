"""The direct data path: processes on the node read files of the mount without FUSE through
the daemon's Unix socket (descriptors passed with SCM_RIGHTS, mapped by libptcfs_client), with
ptcfs.direct from Python. Every byte is checked against the generator's oracle and against the
same file read through the mount; bad input gets an error, not a crash."""

import ctypes
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

PY = sys.executable
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
            assert not f.gathered, f"{path}: {f.gathered} were copied, not mapped"
        assert set(f.gathered) <= set(want)
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


def test_each_mapped_file_stays_open_for_pread_until_the_file_is_closed(tmp_path, daemon, make_ckpt):
    """libptcfs_client keeps the read-only descriptor of every file it maps (ptcfs_mapping_fd: the
    pread staging of a GPU load, PTCFS_GPU_STAGE): it reads the mapping's bytes, and goes with
    the handle."""
    require_binaries()
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=1000)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    sd = daemon.step_dir("j", "1")
    name = next(n for n in ck.full if ck.full[n].shape != ck.slices[(0, 0)].get(n, np.empty(0)).shape)
    lib = direct.library()
    lib.ptcfs_mapping_fd.restype = ctypes.c_int
    lib.ptcfs_mapping_fd.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    # A shard (one blob) and a full tensor assembled from both shards' blobs (several files).
    for path, least in ((os.path.join(sd, "tp0-pp0.safetensors"), 1),
                        (os.path.join(sd, "full", ptcgen.npy_relpath(name)), 2)):
        held = []
        with direct.open(path, fallback=False) as f:
            assert f.direct, f.why_not
            maps = f._mappings(f._h)
            n = lib.ptcfs_mapping_count(f._h.ptr)
            assert n == len(maps) >= least, (path, n)
            assert lib.ptcfs_mapping_fd(f._h.ptr, n) == -1
            for i, m in enumerate(maps):
                fd = lib.ptcfs_mapping_fd(f._h.ptr, i)
                assert fd >= 0, (path, i)
                st = os.fstat(fd)
                held.append((fd, st.st_dev, st.st_ino))
                assert st.st_size == (0 if m is None else len(m)), (path, i)
                if m is not None:
                    assert os.pread(fd, len(m), 0) == m.tobytes(), (path, i)
                    assert os.pread(fd, 100, 4097) == m[4097:4197].tobytes(), (path, i)
                with pytest.raises(OSError):
                    os.write(fd, b"x")
            del maps, m
        for fd, dev, ino in held:  # closed with the handle (the number may be reused since)
            try:
                st = os.fstat(fd)
            except OSError:
                continue
            assert (st.st_dev, st.st_ino) != (dev, ino), (path, fd)


def test_at_its_open_file_limit_a_process_is_told_so(tmp_path, daemon, make_ckpt):
    """An open direct file holds a descriptor per blob it maps: a process at its RLIMIT_NOFILE gets
    resource_exhausted naming the limit, not a protocol error, and can open again once it has room."""
    require_binaries()
    ck = make_ckpt(tp=1, pp=1, layers=1, hidden=128, vocab=256)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    code = r"""
import json, os, resource, sys
from ptcfs import Error, direct
direct.library()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
n = len(os.listdir("/proc/self/fd")) - 1
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1, hard))  # room for the socket, none for the blob
out = {"limit": n + 1}
try:
    direct.open(sys.argv[1], fallback=False)
    out["first"] = "opened"
except Error as e:
    out["first"] = [e.code, e.message]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
with direct.open(sys.argv[1], fallback=False) as f:
    out["again"] = f.direct
print(json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python")}
    r = subprocess.run([PY, "-c", code, path], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    code_, message = out["first"]
    assert code_ == "resource_exhausted", out
    assert message.endswith("direct socket: the descriptors of the file's blobs did not all arrive: this process "
                            f"may be at its limit of open files ({out['limit']}; each open direct file holds one "
                            "per blob it maps: close some, or raise the limit)"), message
    assert out["again"] is True


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
        path = os.path.join(sd, f"tp{t}-pp{p}.safetensors")
        check_file(path, want, zero_copy=False)
        with direct.open(path, fallback=False) as f:
            got = f.tensors()
            gathered += len(f.gathered)
            # The gathered tensors share one buffer of their own, not the mappings.
            bases = {id(got[n].base) for n in f.gathered}
            assert len(bases) <= 1 and all(got[n].base.flags.owndata for n in f.gathered)
    assert gathered > 0, "no tensor was strided: the gather path went untested"


def test_a_strided_shard_reads_back_the_mounts_bytes_range_by_range(tmp_path, remap_daemon, make_ckpt):
    """A shard whose slices a repartition left strided: the daemon sends its map as runs of rows
    (one per strided tensor) and libptcfs_client walks them. Every range read and gathered
    directly is the mount's bytes, in any order, across pieces, rows and tensors."""
    require_binaries()
    ck = make_ckpt(tp=4, pp=1, layers=2, hidden=512, vocab=512)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    r = remap_daemon.cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=1,dp=1", "--json")
    assert r["bytes_remapped"] > 0, r
    path = os.path.join(remap_daemon.step_dir("j", "1"), "tp1-pp0.safetensors")
    want = read_all(path)
    lib = direct.library()
    with direct.open(path, fallback=False) as f:
        assert f.direct and f.size == len(want)
        assert f.size > 8 << 20  # reads of 4 MiB and more go a chunk at a time, the chunk's pages populated first
        assert bytes(f.read()) == want
        # Windows of many sizes at many offsets: inside a piece, across pieces, rows and tensors.
        rng = np.random.default_rng(7)
        for n in (0, 1, 3, 64, 1000, 4096, 65537, f.size // 3):
            for off in rng.integers(0, f.size - n + 1, size=8).tolist() + [0, f.size - n]:
                assert f.read_range(off, n) == want[off:off + n], (off, n)
        # One ptcfs_read_many for ranges out of order, overlapping and empty.
        offs = [f.size - 100, 0, 50, 50, 7, f.size // 2, 0]
        lens = [100, 200, 0, 3000, f.size // 2, f.size // 2, f.size]
        outs = [np.empty(n, dtype=np.uint8) for n in lens]
        ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
        err = ctypes.create_string_buffer(256)
        o64, l64 = np.array(offs, dtype=np.uint64), np.array(lens, dtype=np.uint64)
        assert lib.ptcfs_read_many(f._h.ptr, len(offs), o64.ctypes.data, l64.ctypes.data, ptrs, err, 256) == 0
        for off, n, o in zip(offs, lens, outs):
            assert o.tobytes() == want[off:off + n], (off, n)
        # ptcfs_locate: a range one mapped piece holds is those bytes of its mapping.
        where, at = np.empty(len(offs), dtype=np.int64), np.empty(len(offs), dtype=np.uint64)
        assert lib.ptcfs_locate(f._h.ptr, len(offs), o64.ctypes.data, l64.ctypes.data, where.ctypes.data,
                                at.ctypes.data, err, 256) == 0
        maps = f._mappings(f._h)
        for off, n, m, a in zip(offs, lens, where.tolist(), at.tolist()):
            if m >= 0:
                assert maps[m][a:a + n].tobytes() == want[off:off + n], (off, n)
        assert where[2] == -1 and where[-1] == -1  # an empty range; the whole (strided) file
        # A range past the end: an error naming it, nothing read.
        l64[3] = f.size
        assert lib.ptcfs_read_many(f._h.ptr, len(offs), o64.ctypes.data, l64.ctypes.data, ptrs, err, 256) == -1
        assert err.value.decode().startswith("out_of_range: range 3: read of [50, ")
        with pytest.raises(ptcfs.Error) as e:
            f.read_range(f.size - 1, 2)
        assert e.value.code == "out_of_range"
        # Every tensor: the bytes the header gives it in the mount's file.
        (hlen,) = struct.unpack("<Q", want[:8])
        header = json.loads(want[8:8 + hlen])
        got = f.tensors()
        assert f.gathered, "nothing was gathered: the shard is not strided"
        # 8 MiB of them, into one buffer: its pages populated ahead of the copy, 2 MiB at a time.
        assert sum(got[n].nbytes for n in f.gathered) >= 4 << 20
        for name, a in got.items():
            b, e = header[name]["data_offsets"]
            assert a.tobytes() == want[8 + hlen + b:8 + hlen + e], name
    # The map on the wire: version 2 is a run per strided tensor, version 1 a span per piece of every
    # row; both say the same bytes.
    with open(os.path.join(remap_daemon.mnt, ".ptcfs-direct")) as fh:
        sock = fh.read()
    v1, bin1, fds1 = open_raw(sock, path)
    v2, bin2, fds2 = open_raw(sock, path, map=2)
    try:
        assert v1["ok"] and v2["ok"] and "map" not in v1 and v2["map"] == 2, (v1, v2)
        assert v2["runs"] <= 2 * len(header) + 2 < v1["spans"], (v2["runs"], v1["spans"], len(header))
        assert bytes_of_map(bin1, fds1, runs=False) == want
        assert bytes_of_map(bin2, fds2, runs=True) == want
    finally:
        for fd in fds1 + fds2:
            os.close(fd)


def test_a_held_file_reads_its_version_after_the_path_is_replaced(tmp_path, remap_daemon, make_ckpt):
    """read(), read_range() and tensors() of a File opened before a repartition replaced the file at
    its path give the bytes of the version it opened; a new open gives the new ones."""
    require_binaries()
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=256, vocab=512)
    oracles = Oracles(str(tmp_path), ck, 0)
    remap_daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(remap_daemon.step_dir("j", "1"), "tp0-pp0.safetensors")
    before = read_all(path)
    held = direct.open(path, fallback=False)
    remap_daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=1")
    after = read_all(path)
    assert after != before and len(after) > len(before)
    assert held.size == len(before) and held.version == 1
    assert bytes(held.read()) == before
    assert held.read_range(8, 100) == before[8:108]
    got = held.tensors()
    assert all(np.array_equal(got[n], a) for n, a in ck.slices[(0, 0)].items())
    held.close()
    with direct.open(path, fallback=False) as f:  # the new version, tp=1: its slices re-cut, strided
        assert f.version == 2 and bytes(f.read()) == after
        got = f.tensors()
        assert all(np.array_equal(got[n], a) for n, a in oracles((1, 1, 1)).slices[(0, 0)].items())
        assert f.gathered


def test_empty_shards_empty_ranges_and_zero_size_tensors(tmp_path, daemon, make_ckpt):
    """A shard that holds no tensor (its file is a header and no data), ranges of no bytes and
    tensors of no elements read directly as they do through the mount. (The mount has no file of
    zero bytes: a dataset of fewer samples than a global batch is refused.)"""
    require_binaries()
    ptc = {"parallelism": {"tp": 2, "pp": 2, "dp": 1}, "num_layers": 2, "tensors": {
        "a": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "stage": "first"},
    }}
    ck = make_ckpt("empty-stage", ptc=ptc)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp1-pp1.safetensors")
    with direct.open(path, fallback=False) as f:
        assert f.direct and f.size == len(read_all(path)) == len(ptcgen.safetensors_bytes({}))
        assert bytes(f.read()) == read_all(path)
        assert f.tensors() == {}
        assert f.read_range(0, 0) == b"" and f.read_range(f.size, 0) == b""
        with pytest.raises(ptcfs.Error):
            f.read_range(f.size, 1)
    # Zero-size tensors among others in a saved shard, through the direct path.
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": {
        "empty": {"dtype": "F32", "shape": [0, 4]},
        "w": {"dtype": "BF16", "shape": [3, 5]},
        "z": {"dtype": "F16", "shape": [2, 0]},
    }}
    tensors = {"empty": np.zeros((0, 4), np.float32), "w": np.arange(15, dtype=np.uint16).reshape(3, 5),
               "z": np.zeros((2, 0), np.float16)}
    sd = ptcfs.step_dir(daemon.mnt, "e", "1", create=True)
    ptcfs.save_ptc(sd, ptc)
    ptcfs.save_shard(sd, ptc, 0, 0, tensors)
    wait_for(lambda: os.path.exists(os.path.join(sd, "full")), 30, "the step did not commit")
    path = os.path.join(sd, "tp0-pp0.safetensors")
    with direct.open(path, fallback=False) as f:
        assert bytes(f.read()) == read_all(path)
        got = f.tensors()
        for name, a in tensors.items():
            assert got[name].shape == a.shape and got[name].dtype == a.dtype and np.array_equal(got[name], a), name
            assert not got[name].flags.writeable


def open_raw(sock_path: str, path: str, **extra) -> tuple:
    """An open through the socket by hand: (reply, binary part, descriptors) (the caller closes them)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    s.sendall(message({"op": "open", "path": path, **extra}))
    head, fds = b"", []
    while len(head) < 16:
        chunk, got, _, _ = socket.recv_fds(s, 16 - len(head), 250)
        assert chunk, "the daemon closed without an answer"
        head, fds = head + chunk, fds + list(got)
    jlen, blen, nfds = struct.unpack("<III", head[4:])
    assert len(fds) == nfds <= 250, (len(fds), nfds)
    body = b""
    while len(body) < jlen + blen:
        body += s.recv(jlen + blen - len(body))
    s.close()  # the version stays held only while the connection lives; the descriptors stay valid
    return json.loads(body[:jlen]), body[jlen:], fds


def bytes_of_map(binary: bytes, fds: list, runs: bool) -> bytes:
    """The file's bytes as a map of the direct socket says (docs/FORMATS.md "Direct socket"): version 1
    spans (`runs` False) or version 2 runs of rows, read from the descriptors with os.pread."""
    out, at = [], 0

    def piece(src, off, n):
        out.append(bytes(n) if src == -1 else os.pread(fds[src], n, off))
    while at < len(binary):
        if not runs:
            src, _, off, n = struct.unpack_from("<iIQQ", binary, at)
            piece(src, off, n)
            at += 24
            continue
        rows, count, _ = struct.unpack_from("<QII", binary, at)
        pieces = [struct.unpack_from("<iIQQQ", binary, at + 16 + 32 * j) for j in range(count)]
        at += 16 + 32 * count
        for r in range(rows):
            for src, _, off, n, stride in pieces:
                piece(src, off + r * stride, n)
    return b"".join(out)


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
                                                                             "client", "libptcfs_client.so")})
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
