"""Saving into the mount (docs/FORMATS.md "Saving into the mount"), on one node: a checkpoint copied in with
`cp -r`, written per tensor with numpy, or by several writers of disjoint ranges, commits as one version
that every view reads exactly and a repartition works on; bad writes get a clear error and leave committed
steps untouched; a killed writer or daemon never leaves a half-committed step."""

import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ptcgen
from ptcfs_harness import PTCFS, Daemon, errno_of, ls_jobs, verify_step
from repartition_util import Oracles, blob_usage, wait_for


def step_info(d, job, step):
    return d.cli_json("ls", f"{job}/{step}", "--json")


def wait_committed(d, job, step, timeout=30):
    def committed():
        info = step_info(d, job, step)
        return info if info["state"] == "committed" else None
    return wait_for(committed, timeout,
                    lambda: f"{job}/{step} never committed: {step_info(d, job, step)}\n{d.log_tail()}", interval=0.05)


def copy_in(ck, sd, order=None):
    """cp of every file of a checkpoint directory into the step folder `sd`, in `order` (default cp -r)."""
    if order is None:
        subprocess.run(["cp", "-r", ck.path + "/.", sd], check=True)
        return
    for name in order:
        shutil.copyfile(os.path.join(ck.path, name), os.path.join(sd, name))


def test_cp_r_saves_a_checkpoint_that_reads_like_an_import_and_repartitions(daemon, make_ckpt, tmp_path):
    ck = make_ckpt(tp=2, pp=2, layers=4, hidden=256, vocab=1000)
    os.mkdir(os.path.join(daemon.mnt, "gpt"))
    sd = os.path.join(daemon.mnt, "gpt", "100")
    os.mkdir(sd)
    assert step_info(daemon, "gpt", "100") == {"job": "gpt", "step": "100", "state": "pending", "bytes_written": 0,
                                               "bytes_total": 0, "files": 0, "errors": []}
    copy_in(ck, sd)
    info = wait_committed(daemon, "gpt", "100")
    assert info["version"] == 1 and info["bytes"] == ck.summary["bytes"], info
    verify_step(daemon, "gpt", "100", ck)
    for (t, p) in ck.slices:  # byte for byte what was written (ptcgen writes the canonical form)
        with open(ck.shard_path(t, p), "rb") as a, open(os.path.join(sd, f"tp{t}-pp{p}.safetensors"), "rb") as b:
            assert a.read() == b.read()
    # One blob per shard file; a repartition works on it like on an imported step.
    assert blob_usage(daemon)[0] == 4
    r = daemon.cli_json("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=4,dp=1", "--json")
    assert r["version"] == 2
    verify_step(daemon, "gpt", "100", Oracles(str(tmp_path / "o"), ck, 0)((1, 4, 1)), full_views=False)
    # The step is read-only once committed.
    assert errno_of(open, os.path.join(sd, "ptc.json"), "w") in (errno.EROFS, errno.EACCES, errno.EPERM)
    assert errno_of(os.mkdir, os.path.join(sd, "x")) == errno.EROFS


def test_files_in_any_order_and_pending_progress(daemon, make_ckpt):
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "j", "7"))
    sd = daemon.step_dir("j", "7")
    copy_in(ck, sd, ["tp1-pp0.safetensors"])  # a shard before ptc.json
    info = step_info(daemon, "j", "7")
    assert info["state"] == "pending" and info["bytes_total"] == 0 and info["files"] == 1, info
    copy_in(ck, sd, ["ptc.json"])
    info = step_info(daemon, "j", "7")
    half = sum(a.nbytes for a in ck.slices[(1, 0)].values())
    assert info["state"] == "pending" and info["bytes_total"] == ck.summary["bytes"], info
    assert info["bytes_written"] == half, info
    assert "7" in ls_jobs(daemon)["j"]
    assert daemon.cli_json("ls", "j", "--json")["pending"] == ["7"]
    # Committed steps of other jobs do not change meanwhile; the pending files are not readable.
    assert errno_of(lambda p: open(p, "rb").read(), os.path.join(sd, "tp1-pp0.safetensors")) == errno.EACCES
    copy_in(ck, sd, ["tp0-pp0.safetensors"])
    wait_committed(daemon, "j", "7")
    verify_step(daemon, "j", "7", ck)


def test_per_tensor_npy_files_and_a_zero_style_range_per_writer(daemon, make_ckpt):
    ck = make_ckpt(tp=2, pp=2, layers=4, hidden=128, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "z", "1"))
    sd = daemon.step_dir("z", "1")
    with open(os.path.join(sd, "ptc.json"), "w") as f:
        json.dump(ck.ptc, f)
    # Shards tp0-pp*: one np.save per tensor. Shards tp1-pp*: every tensor file written by 3 processes at
    # once, each its contiguous third of the data (pwrite), the first also the header.
    for (t, p), tensors in ck.slices.items():
        for name, arr in tensors.items():
            path = os.path.join(sd, f"tp{t}-pp{p}", name + ".npy")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if t == 0:
                np.save(path, arr)
                continue
            header = npy_header(arr)
            data = np.ascontiguousarray(arr).tobytes()
            cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
            with open(path, "wb"):
                pass
            procs = [multiprocessing.Process(target=pwrite_range, args=(path, header if i == 0 else b"",
                                                                          len(header) + cuts[i], data[cuts[i]:cuts[i + 1]]))
                     for i in range(3)]
            for pr in procs:
                pr.start()
            for pr in procs:
                pr.join()
                assert pr.exitcode == 0
    wait_committed(daemon, "z", "1")
    verify_step(daemon, "z", "1", ck)


def npy_header(arr):
    import io
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, np.lib.format.header_data_from_array_1_0(arr))
    return b.getvalue()


def pwrite_range(path, header, off, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        if header:
            os.pwrite(fd, header, 0)
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def test_bad_writes_get_clear_errors_and_nothing_commits(daemon, make_ckpt):
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    before = blob_usage(daemon)[2]
    mnt = daemon.mnt
    # No job: ENOENT; a second mkdir of a step: EEXIST; a step over a committed one: EEXIST.
    assert errno_of(os.mkdir, os.path.join(mnt, "nojob", "1")) == errno.ENOENT
    assert errno_of(os.mkdir, os.path.join(mnt, "j", "1")) == errno.EEXIST
    os.mkdir(os.path.join(mnt, "j", "2"))
    assert errno_of(os.mkdir, os.path.join(mnt, "j", "2")) == errno.EEXIST
    assert errno_of(os.mkdir, os.path.join(mnt, "j", "data")) == errno.EINVAL
    sd = daemon.step_dir("j", "2")
    # Files that are not part of a checkpoint, and files beside jobs.
    assert errno_of(open, os.path.join(sd, "notes.txt"), "w") == errno.EINVAL
    assert errno_of(open, os.path.join(mnt, "j", "x.safetensors"), "w") == errno.EPERM
    # Writes into a committed step.
    assert errno_of(open, os.path.join(daemon.step_dir("j", "1"), "tp0-pp0.safetensors"), "r+b") in (errno.EROFS,
                                                                                                      errno.EACCES)
    # An invalid ptc.json fails its close, and the log names the file.
    with pytest.raises(OSError) as e:
        with open(os.path.join(sd, "ptc.json"), "w") as f:
            f.write('{"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "tensors": {}, "bogus": 1}')
    assert e.value.errno == errno.EINVAL
    assert "j/2/ptc.json" in daemon.log_tail()
    os.unlink(os.path.join(sd, "ptc.json"))
    copy_in(ck, sd, ["ptc.json"])
    # A shard that contradicts ptc.json (a shard of a smaller model under this name): its close fails,
    # the error names the file and the tensor, and `ls` shows it.
    other = make_ckpt("other", tp=2, pp=1, layers=2, hidden=64, vocab=500)
    with pytest.raises(OSError) as e:
        shutil.copyfile(other.shard_path(0, 0), os.path.join(sd, "tp0-pp0.safetensors"))
    assert e.value.errno == errno.EINVAL
    info = step_info(daemon, "j", "2")
    assert info["state"] == "pending" and len(info["errors"]) == 1, info
    assert "j/2/tp0-pp0.safetensors: tensor '" in info["errors"][0] and "has shape" in info["errors"][0], info
    # A shard file cut short.
    with pytest.raises(OSError):
        with open(ck.shard_path(1, 0), "rb") as src, open(os.path.join(sd, "tp1-pp0.safetensors"), "wb") as dst:
            dst.write(src.read()[:-10])
    # A shard the layout does not have; a shard written both ways.
    assert errno_of(open, os.path.join(sd, "tp5-pp0.safetensors"), "w") == errno.EINVAL
    assert errno_of(os.mkdir, os.path.join(sd, "tp0-pp0")) == errno.EINVAL
    # Nothing committed; once the bad files are replaced, it commits.
    assert step_info(daemon, "j", "2")["state"] == "pending"
    for name in ("tp0-pp0.safetensors", "tp1-pp0.safetensors"):
        os.unlink(os.path.join(sd, name))
        copy_in(ck, sd, [name])
    wait_committed(daemon, "j", "2")
    verify_step(daemon, "j", "2", ck)
    verify_step(daemon, "j", "1", ck)
    assert set(before) <= set(blob_usage(daemon)[2])


def test_npy_writes_past_the_end_and_wrong_shapes_are_refused(daemon, make_ckpt):
    ck = make_ckpt(tp=1, pp=1, layers=1, hidden=64, vocab=128)
    os.makedirs(os.path.join(daemon.mnt, "n", "1"))
    sd = daemon.step_dir("n", "1")
    copy_in(ck, sd, ["ptc.json"])
    name, arr = next(iter(ck.slices[(0, 0)].items()))
    path = os.path.join(sd, "tp0-pp0", name + ".npy")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    header = npy_header(arr)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, header, 0)
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"x" * 16, len(header) + arr.nbytes - 8)
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    name2, arr2 = list(ck.slices[(0, 0)].items())[1]
    with pytest.raises(OSError) as e:
        np.save(os.path.join(sd, "tp0-pp0", name2 + ".npy"), np.zeros((3, 5), dtype=arr2.dtype))
    assert e.value.errno == errno.EINVAL
    assert "has shape [3, 5]" in json.dumps(step_info(daemon, "n", "1")["errors"])


def test_a_killed_writer_leaves_the_step_pending_and_rm_removes_it(daemon, make_ckpt):
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=512, vocab=4000)
    os.makedirs(os.path.join(daemon.mnt, "k", "1"))
    sd = daemon.step_dir("k", "1")
    copy_in(ck, sd, ["ptc.json"])
    # A writer that stops half way and is killed.
    code = (f"import os,signal\nsrc=open({ck.shard_path(0, 0)!r},'rb').read()\n"
            f"f=open({os.path.join(sd, 'tp0-pp0.safetensors')!r},'wb')\nf.write(src[:len(src)//2]); f.flush()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    p = subprocess.run([sys.executable, "-c", code])
    assert p.returncode == -signal.SIGKILL
    info = step_info(daemon, "k", "1")
    assert info["state"] == "pending" and info["errors"], info
    blobs_while = blob_usage(daemon)[0]
    assert blobs_while == 1
    r = daemon.cli_json("rm", "k/1", "--json")
    assert r == {"job": "k", "step": "1", "removed": "pending"}
    assert not os.path.exists(sd)
    wait_for(lambda: blob_usage(daemon)[0] == 0, 10, "the removed step's blob is still there")
    # The name is free again.
    os.mkdir(sd)
    copy_in(ck, sd)
    wait_committed(daemon, "k", "1")
    verify_step(daemon, "k", "1", ck)


def test_the_daemon_killed_mid_save_keeps_committed_steps_and_drops_the_pending_one(daemon, make_ckpt):
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "d", "1"))
    copy_in(ck, daemon.step_dir("d", "1"))
    wait_committed(daemon, "d", "1")
    os.mkdir(daemon.step_dir("d", "2"))
    copy_in(ck, daemon.step_dir("d", "2"), ["ptc.json", "tp0-pp0.safetensors"])
    daemon.kill9()
    daemon.stop(cleanup_mount=True)
    daemon.start()
    assert ls_jobs(daemon) == {"d": ["1"]}
    verify_step(daemon, "d", "1", ck)
    assert blob_usage(daemon)[0] == 2  # the committed step's; the pending step's blobs are gone


def test_rm_of_a_committed_step_keeps_open_files_readable(daemon, make_ckpt):
    ck = make_ckpt(tp=1, pp=1, layers=1, hidden=64, vocab=128)
    daemon.cli("import", ck.path, "--job", "r", "--step", "1")
    f = open(os.path.join(daemon.step_dir("r", "1"), "tp0-pp0.safetensors"), "rb")
    try:
        assert daemon.cli_json("rm", "r/1", "--json")["removed"] == "committed"
        assert not os.path.exists(daemon.step_dir("r", "1"))
        with open(ck.shard_path(0, 0), "rb") as want:
            assert f.read() == want.read()
    finally:
        f.close()
    wait_for(lambda: blob_usage(daemon)[0] == 0, 15, "the removed step's blob is still there")
    r = daemon.cli("rm", "r/1", check=False)
    assert r.returncode == 1 and "no job 'r'" in r.stderr, r.stderr


def _write_shard_per_tensor(sd, slices):
    for name, arr in slices.items():
        path = os.path.join(sd, name + ".npy")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, arr)


def test_many_writers_creating_files_in_one_step_at_once(daemon, make_ckpt):
    """Creates from several processes at once swap the mount's tree under each other (a use-after-free
    of the tree once crashed the daemon here)."""
    ck = make_ckpt(tp=2, pp=2, layers=8, hidden=64, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "m", "1"))
    sd = daemon.step_dir("m", "1")
    copy_in(ck, sd, ["ptc.json"])
    procs = [multiprocessing.Process(target=_write_shard_per_tensor, args=(os.path.join(sd, f"tp{t}-pp{p}"), sl))
             for (t, p), sl in ck.slices.items()]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0
    assert daemon.running()
    wait_committed(daemon, "m", "1")
    verify_step(daemon, "m", "1", ck)


def test_a_full_disk_gives_the_writer_enospc_and_commits_nothing(tmp_path, make_ckpt):
    """The daemon's data directory on a 24 MB tmpfs; a 40 MB shard does not fit."""
    from ptcfs_harness import Daemon, require_binaries
    require_binaries()
    root = tmp_path / "tiny-disk"
    (root / "data").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(root / "data")], check=True)
    d = Daemon(str(root))
    try:
        d.start()
        ck = make_ckpt(tp=1, pp=1, layers=2, hidden=1024, vocab=4000)
        assert os.path.getsize(ck.shard_path(0, 0)) > 30e6
        os.makedirs(os.path.join(d.mnt, "f", "1"))
        sd = d.step_dir("f", "1")
        copy_in(ck, sd, ["ptc.json"])
        with open(ck.shard_path(0, 0), "rb") as f:
            data = f.read()
        fd = os.open(os.path.join(sd, "tp0-pp0.safetensors"), os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError) as e:
                for off in range(0, len(data), 1 << 20):
                    os.write(fd, data[off:off + (1 << 20)])
            assert e.value.errno == errno.ENOSPC
        finally:
            errno_of(os.close, fd)  # the close reports the file as incomplete too
        assert "is full" in d.log_tail()
        assert step_info(d, "f", "1")["state"] == "pending"
        # Removing it frees the space; a step that fits then saves.
        d.cli("rm", "f/1")
        small = make_ckpt("small", tp=1, pp=1, layers=1, hidden=64, vocab=128)
        os.mkdir(sd)
        copy_in(small, sd)
        wait_committed(d, "f", "1")
        verify_step(d, "f", "1", small)
        # Names the store would refuse.
        assert errno_of(os.mkdir, os.path.join(d.mnt, "f", "a b")) == errno.EINVAL
        assert errno_of(os.mkdir, os.path.join(d.mnt, ".hidden")) == errno.EINVAL
    finally:
        d.stop(cleanup_mount=True)
        subprocess.run(["umount", "-l", str(root / "data")], check=False)


def _write_in_two_halves(path, data, opened, go):
    """Writer A: opens the file, writes its first half, says so, waits for `go`, writes the rest."""
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
        f.flush()
        opened.set()
        assert go.wait(60)
        f.write(data[len(data) // 2:])


def _write_whole_every_way(path, data, out):
    """Writer B, while A holds the file: every way of opening it for writing, each followed by writing other
    bytes front to back. Puts, per way, the errno of the open (0: it opened and wrote)."""
    got = []
    for flags in (os.O_WRONLY | os.O_CREAT | os.O_TRUNC, os.O_WRONLY, os.O_RDWR):
        try:
            fd = os.open(path, flags)
        except OSError as e:
            got.append(e.errno)
            continue
        try:
            os.write(fd, data)
        finally:
            errno_of(os.close, fd)
        got.append(0)
    out.put(got)


def _two_writers_at_once(path, first, second):
    """A writes `first` in two halves; B, while A has the file open, tries to write `second`. Returns B's errnos."""
    ctx = multiprocessing.get_context("fork")
    opened, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    a = ctx.Process(target=_write_in_two_halves, args=(path, first, opened, go))
    a.start()
    try:
        assert opened.wait(30)
        b = ctx.Process(target=_write_whole_every_way, args=(path, second, out))
        b.start()
        b.join(60)
        assert b.exitcode == 0
        got = out.get(timeout=5)
    finally:
        go.set()
        a.join(60)
    assert a.exitcode == 0
    return got


def test_a_second_writer_of_a_whole_file_is_refused_and_no_mix_commits(daemon, make_ckpt):
    """Two processes writing one shard file at once (once committed 8 tensors of each): the second
    opener gets EBUSY however it opens it, the first writer's bytes stay; a writer that closes the file and
    opens it again at once (its release still on the way) is not refused, and neither is the next writer.
    ptc.json is the one file several writers may write at once (test_every_rank_writes_the_same_ptc_json)."""
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    other = make_ckpt("other", tp=2, pp=1, layers=2, hidden=128, vocab=500, seed=7)  # same sizes, other bytes
    os.makedirs(os.path.join(daemon.mnt, "x", "1"))
    sd = daemon.step_dir("x", "1")
    copy_in(ck, sd, ["ptc.json"])
    path = os.path.join(sd, "tp0-pp0.safetensors")
    mine, theirs = (open(c.shard_path(0, 0), "rb").read() for c in (ck, other))
    assert len(mine) == len(theirs) and mine != theirs
    assert _two_writers_at_once(path, mine, theirs) == [errno.EBUSY] * 3
    assert "x/1/tp0-pp0.safetensors is open for writing by another writer" in daemon.log_tail()
    assert step_info(daemon, "x", "1")["errors"] == []
    # Closed and opened again at once, many times: never refused. The last writer's bytes are the file's.
    for i in range(20):
        with open(path, "wb") as f:
            f.write(theirs if i % 2 else mine)
    with open(path, "r+b") as f:  # the next writer, without O_TRUNC, over the whole file
        f.write(theirs)
    copy_in(other, sd, ["tp1-pp0.safetensors"])
    wait_committed(daemon, "x", "1")
    verify_step(daemon, "x", "1", other)


def _write_when_all_have_opened(path, data, barrier, out):
    """Opens `path`, waits until every writer has opened it, writes `data` and closes; puts the errno of
    the write or the close (0: none)."""
    try:
        with open(path, "wb") as f:
            barrier.wait(30)
            f.write(data)
        out.put(0)
    except OSError as e:
        out.put(e.errno)


def test_every_rank_writes_the_same_ptc_json_at_once_and_a_different_one_fails_alone(daemon, make_ckpt):
    """Four processes open ptc.json of a new step together, then write the same bytes: all succeed (each
    got EBUSY once, and ptcfs.save_ptc a bare OSError). A fifth writes another valid ptc.json: its close
    fails with EINVAL naming the file, and the step keeps the first and commits with its shards."""
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "r", "1"))
    sd = daemon.step_dir("r", "1")
    path = os.path.join(sd, "ptc.json")
    text = open(os.path.join(ck.path, "ptc.json"), "rb").read()
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_write_when_all_have_opened, args=(path, text, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == [0, 0, 0, 0]
    other = json.loads(text)
    other["parallelism"]["tp"] = 1
    with pytest.raises(OSError) as e:
        with open(path, "w") as f:
            json.dump(other, f)
    assert e.value.errno == errno.EINVAL
    assert "r/1/ptc.json: differs from the ptc.json this step was written with" in daemon.log_tail()
    assert step_info(daemon, "r", "1")["errors"] == []
    copy_in(ck, sd, ["tp0-pp0.safetensors", "tp1-pp0.safetensors"])
    wait_committed(daemon, "r", "1")
    assert json.loads(open(path).read())["parallelism"]["tp"] == 2  # the first ptc.json, not the fifth
    verify_step(daemon, "r", "1", ck)


def test_the_copies_of_ptc_json_open_at_once_are_bounded(daemon):
    """Each open handle of ptc.json holds its own copy, sized by its furthest write: together they may
    take at most 256 MiB of the daemon's memory (a fifth copy of 60 MiB is ENOSPC), closing one gives
    its share back, and truncate(2) by path, which cuts no handle's copy, is refused."""
    os.makedirs(os.path.join(daemon.mnt, "m", "1"))
    path = os.path.join(daemon.step_dir("m", "1"), "ptc.json")
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT, 0o644) for _ in range(5)]
    for fd in fds[:4]:
        os.pwrite(fd, b"x", 60 << 20)
    assert errno_of(os.pwrite, fds[4], b"x", 60 << 20) == errno.ENOSPC
    assert "the copies of ptc.json open at once would hold more than 268435456 bytes" in daemon.log_tail()
    assert errno_of(os.close, fds.pop(0)) == errno.EINVAL  # its copy is not a ptc.json (holes, then "x")
    # The kernel sends the handle's release, which gives its copy back, after close(2) has returned.
    wait_for(lambda: errno_of(os.pwrite, fds[-1], b"x", 60 << 20) is None, 10, "no room after a close")
    assert [errno_of(os.close, fd) for fd in fds] == [errno.EINVAL] * 4
    assert errno_of(os.truncate, path, 0) == errno.EACCES
    assert step_info(daemon, "m", "1")["state"] == "pending"


def _save_ptc_together(sd, ptc, barrier):
    import builtins
    import ptcfs
    real_open = builtins.open

    def opened_together(path, *a, **kw):  # save_ptc's own open, then the wait for the others
        f = real_open(path, *a, **kw)
        if str(path).endswith("ptc.json"):
            barrier.wait(30)
        return f
    builtins.open = opened_together
    ptcfs.save_ptc(sd, ptc)


def test_ptcfs_save_ptc_from_every_rank_at_once_and_its_error_is_a_ptcfs_error(daemon, make_ckpt):
    import ptcfs
    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=128, vocab=500)
    ptc = json.load(open(os.path.join(ck.path, "ptc.json")))
    sd = ptcfs.step_dir(daemon.mnt, "s", "1", create=True)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4)  # all four at once: each opens while the others have it open
    procs = [ctx.Process(target=_save_ptc_together, args=(sd, ptc, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    other = ptcfs.ptc.with_parallelism(ptc, 1, 1, 1)
    with pytest.raises(ptcfs.Error) as e:
        ptcfs.save_ptc(sd, other)
    assert e.value.code == "invalid_argument" and e.value.message == f"{sd}/ptc.json: Invalid argument"
    for t in range(2):
        ptcfs.save_shard(sd, ptc, t, 0, ck.slices[(t, 0)])
    wait_committed(daemon, "s", "1")


def test_a_process_started_while_a_whole_file_is_written_does_not_spoil_it(daemon, make_ckpt):
    """A writer that starts a process half way through ptc.json or a shard file: the child's copy of the
    descriptor is closed at its exec, which the daemon sees as a close of the half-written file. The writer
    writes on and closes; the file is checked at that close and the step commits. The child's close once
    marked the file short for good, and every later write of it failed with EINVAL."""
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=128, vocab=500)
    os.makedirs(os.path.join(daemon.mnt, "c", "1"))
    sd = daemon.step_dir("c", "1")
    for name, src in (("ptc.json", os.path.join(ck.path, "ptc.json")),
                      ("tp0-pp0.safetensors", ck.shard_path(0, 0))):
        data = open(src, "rb").read()
        with open(os.path.join(sd, name), "wb") as f:
            f.write(data[:len(data) // 2])
            f.flush()
            subprocess.run(["true"], check=True)
            # Meanwhile the file is open and not written: another writer of the shard still waits its
            # turn; one of ptc.json opens (and, writing nothing, changes nothing at its close).
            want = None if name == "ptc.json" else errno.EBUSY
            assert errno_of(open, os.path.join(sd, name), "r+b") == want
            f.write(data[len(data) // 2:])
    wait_committed(daemon, "c", "1")
    verify_step(daemon, "c", "1", ck)


def _save_npy_with_late_header(path, arr):
    """The data first (more than 1 MiB of it), the npy header last: what a ZeRO rank that does
    not write the header may do before the one that does."""
    header = npy_header(arr)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, np.ascontiguousarray(arr).tobytes(), len(header))
        os.pwrite(fd, header, 0)
    finally:
        os.close(fd)


def test_tensor_files_of_every_size_and_order_read_back_exactly(daemon):
    """The paths a tensor file's bytes take (daemon/save/pending_step.h): kept in memory until its
    header is known, then a region of its shard's pack (small files), or a blob of its own (over
    4 MiB, or over 1 MiB written before its header); and a file saved again over itself (O_TRUNC).
    Every view reads back exactly what was written last, and the step holds one pack per shard."""
    rng = np.random.default_rng(27)
    shapes = {"small.a": [16], "small.b": [3, 5], "scalar": [], "mid": [300, 1000],  # 1.2 MB: packed
              "big": [1100, 1024],  # 4.5 MB: its own blob
              "late": [500, 1000],  # 2 MB, header last: its own blob
              "again": [64, 64], "again.big": [1200, 1024]}  # saved twice
    tensors = {name: {"dtype": "F32", "shape": shape} for name, shape in shapes.items()}
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": tensors}
    want = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    os.makedirs(os.path.join(daemon.mnt, "sizes", "1", "tp0-pp0"))
    sd = daemon.step_dir("sizes", "1")
    blobs_before = blob_usage(daemon)[0]
    for name, arr in want.items():
        path = os.path.join(sd, "tp0-pp0", name + ".npy")
        if name == "late":
            _save_npy_with_late_header(path, arr)
            continue
        if name.startswith("again"):
            np.save(path, np.zeros_like(arr) - 1)  # saved, then saved again over it
        np.save(path, arr)
    with open(os.path.join(sd, "ptc.json"), "w") as f:
        json.dump(ptc, f)
    wait_committed(daemon, "sizes", "1")
    for name, arr in want.items():
        for rel in (f"tp0-pp0/{name}.npy", f"full/{name}.npy"):
            got = np.load(os.path.join(sd, rel))
            assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr), rel
    with open(os.path.join(sd, "tp0-pp0.safetensors"), "rb") as f:
        st = ptcgen.parse_safetensors(f.read(), where="tp0-pp0.safetensors", canonical=True)
    assert {n: a.tobytes() for n, (_, a) in st.items()} == {n: a.tobytes() for n, a in want.items()}
    # One pack (every file of at most 4 MiB) and big, late and again.big on their own.
    assert blob_usage(daemon)[0] - blobs_before == 4


def test_a_step_saved_as_many_tensor_files_commits_as_one_version(daemon):
    """3,000 tensor files of one shard, one np.save each (a create, a write and a close per file), then
    ptc.json: one version, every file exactly as written, the small files in one blob. The save costs
    about the same per file at any count (bench/bench_mount.py measures 5,000 to 100,000)."""
    n = 3000
    tensors = {f"layers.{i // 100}.t{i % 100:02d}": {"dtype": "F32", "shape": [4 + i % 7]} for i in range(n)}
    ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": tensors}
    os.makedirs(os.path.join(daemon.mnt, "many", "5", "tp0-pp0"))
    sd = daemon.step_dir("many", "5")
    blobs_before = blob_usage(daemon)[0]
    with open(os.path.join(sd, "ptc.json"), "w") as f:
        json.dump(ptc, f)
    want = {}
    for i, name in enumerate(tensors):
        want[name] = np.arange(4 + i % 7, dtype=np.float32) + i
        np.save(os.path.join(sd, "tp0-pp0", name + ".npy"), want[name])
    info = wait_committed(daemon, "many", "5")
    assert info["version"] == 1 and info["bytes"] == sum(a.nbytes for a in want.values()), info
    assert sorted(os.listdir(os.path.join(sd, "tp0-pp0"))) == sorted(name + ".npy" for name in tensors)
    for name, arr in want.items():
        assert np.array_equal(np.load(os.path.join(sd, "tp0-pp0", name + ".npy")), arr), name
    with open(os.path.join(sd, "tp0-pp0.safetensors"), "rb") as f:
        st = ptcgen.parse_safetensors(f.read(), where="tp0-pp0.safetensors", canonical=True)
    assert len(st) == n and all(np.array_equal(st[name][1], arr) for name, arr in want.items())
    assert blob_usage(daemon)[0] - blobs_before == 1  # one pack, not a blob per tensor


def test_a_file_opened_right_after_its_step_commits_reads_the_committed_bytes(tmp_path):
    """`ptcfs ls` reports a save committed before the mount's tree shows it (a failpoint holds every
    refresh for 1 s): a read opened then waits for that tree and reads the committed file (it was
    EACCES, as for a pending file, once in five runs of the 3,000-file save above)."""
    d = Daemon(str(tmp_path / "d"))
    d.env = {"PTCFS_FAILPOINT": "mount.refresh:1"}
    d.start()
    try:
        os.makedirs(os.path.join(d.mnt, "j", "1", "tp0-pp0"))
        sd = d.step_dir("j", "1")
        ptc = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0,
               "tensors": {"w": {"dtype": "F32", "shape": [3]}}}
        np.save(os.path.join(sd, "tp0-pp0", "w.npy"), np.arange(3, dtype=np.float32))
        with open(os.path.join(sd, "ptc.json"), "w") as f:
            json.dump(ptc, f)
        wait_committed(d, "j", "1")
        t0 = time.monotonic()
        assert np.array_equal(np.load(os.path.join(sd, "tp0-pp0", "w.npy")), np.arange(3, dtype=np.float32))
        assert time.monotonic() - t0 < 10
        assert "failpoint mount.refresh reached" in d.log_tail()
    finally:
        d.stop()
