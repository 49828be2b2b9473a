"""Helpers for the ptcfs integration tests: a real daemon under test, and checks of every view
of an imported step against the oracle in tests/tools/ptcgen.py."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

import ptcgen

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("PTCFS_BUILD") or os.path.join(REPO, "build"))
PTCFSD = os.path.join(BUILD, "daemon", "ptcfsd")
PTCFS = os.path.join(BUILD, "cli", "ptcfs")

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 300.0


# --------------------------------------------------------------------------------------
# mounts

def _unescape_mount_field(s: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mount_entries(path: str) -> List[Tuple[str, str]]:
    """(fstype, source) of every mount at `path` (an absolute path without symlinks) in /proc/mounts."""
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and _unescape_mount_field(fields[1]) == path:
                out.append((fields[2], fields[0]))
    return out


def is_mounted(path: str) -> bool:
    return bool(mount_entries(path))


def force_unmount(path: str) -> None:
    """Lazily unmounts every mount stacked at `path` (best effort)."""
    for _ in range(8):
        if not is_mounted(path):
            return
        subprocess.run(["fusermount3", "-u", "-z", path], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)
        if is_mounted(path):
            subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: str, n: int = 8000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<no log: {e}>"


# --------------------------------------------------------------------------------------
# the daemon under test

def require_binaries() -> None:
    missing = [p for p in (PTCFSD, PTCFS) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"ptcfs binaries missing: {missing} (build first, or set PTCFS_BUILD)", pytrace=False)
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: the integration tests need FUSE", pytrace=False)


class Daemon:
    """One ptcfsd process on its own data dir, mount point and port."""

    def __init__(self, root: str, name: str = "d0", secret_file: Optional[str] = None,
                 listen_host: str = "127.0.0.1", port: Optional[int] = None,
                 flags: Optional[List[str]] = None, extra_flags: Optional[List[str]] = None):
        """secret_file: the daemon requires the cluster secret, and cli() gives it.
        flags: ptcfsd flags instead of --listen/--secret-file (e.g. --cluster F --node N)."""
        self.flags = flags
        self.extra_flags = extra_flags or []
        root = os.path.realpath(root)
        self.secret_file = secret_file
        self.root = root
        self.data = os.path.join(root, "data")
        self.mnt = os.path.join(root, "mnt")
        os.makedirs(self.data, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        self.log_path = os.path.join(root, f"{name}.log")
        self.port = port if port is not None else free_port()
        self.listen = f"{listen_host}:{self.port}"
        # The address clients use: the listen address, or loopback when it listens on every address.
        self.addr = f"{'127.0.0.1' if listen_host in ('0.0.0.0', '') else listen_host}:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.env: Dict[str, str] = {}  # added to the daemon's environment at the next start()
        # A command the daemon and cli() run under (e.g. nsenter into a network namespace).
        self.wrap: List[str] = []

    # -- control

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "daemon already running"
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== start #{self.starts}: {time.strftime('%H:%M:%S')} =====\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                [*self.wrap, PTCFSD, "--data", self.data, "--mount", self.mnt,
                 *(self.flags if self.flags is not None else
                   ["--listen", self.listen, *(["--secret-file", self.secret_file] if self.secret_file else [])]),
                 *self.extra_flags],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, **self.env})
        finally:
            log.close()
        self.wait_ready()

    def _mount_live(self) -> bool:
        if not any(fs.startswith("fuse") for fs, _ in mount_entries(self.mnt)):
            return False
        try:
            os.listdir(self.mnt)  # ENOTCONN while a stale mount is on top
            return True
        except OSError:
            return False

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"ptcfsd exited with status {self.proc.returncode} while starting; log:\n"
                            f"{tail(self.log_path)}", pytrace=False)
            try:
                r = subprocess.run([*self.wrap, PTCFS, "--daemon", self.addr, *self._secret_args(), "status", "--json"],
                                   capture_output=True, text=True, timeout=5)
                last = r
                if r.returncode == 0 and self._mount_live():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.1)
        detail = f"last status: rc={last.returncode} stderr={last.stderr!r}" if last else "no status reply"
        pytest.fail(f"ptcfsd not ready after {timeout} s ({detail}; mounted={is_mounted(self.mnt)}); log:\n"
                    f"{tail(self.log_path)}", pytrace=False)

    def stop(self, cleanup_mount: bool = True) -> Optional[int]:
        """SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status (None if not running)."""
        rc = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.send_signal(signal.SIGTERM)
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
            rc = self.proc.returncode
            self.proc = None
        if cleanup_mount:
            force_unmount(self.mnt)
        return rc

    def kill9(self) -> None:
        """SIGKILL: the daemon dies without unmounting (a stale mount may remain)."""
        assert self.proc is not None and self.proc.poll() is None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def restart(self) -> Optional[int]:
        rc = self.stop(cleanup_mount=False)
        self.start()
        return rc

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_log(self, text: str, timeout: float = 60.0) -> None:
        """Waits until the log of the current start holds `text` (e.g. "failpoint commit.before reached")."""
        deadline = time.time() + timeout
        marker = f"===== start #{self.starts}:"
        while time.time() < deadline:
            with open(self.log_path, errors="replace") as f:
                log = f.read()
            if text in log[log.rfind(marker):]:
                return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.02)
        pytest.fail(f"the daemon's log never showed {text!r}; log:\n{self.log_tail()}", pytrace=False)

    def log_tail(self, n: int = 8000) -> str:
        return tail(self.log_path, n)

    # -- CLI

    def _secret_args(self) -> List[str]:
        return ["--secret-file", self.secret_file] if self.secret_file else []

    def cli(self, *args, check: bool = True, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        cmd = [*self.wrap, PTCFS, "--daemon", self.addr, *self._secret_args(), *[str(a) for a in args]]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}\n"
                        f"daemon log:\n{self.log_tail()}", pytrace=False)
        return r

    def cli_json(self, *args):
        r = self.cli(*args)
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError as e:
            pytest.fail(f"ptcfs {' '.join(map(str, args))}: stdout is not JSON ({e}):\n{r.stdout}", pytrace=False)

    def step_dir(self, job: str, step: str) -> str:
        return os.path.join(self.mnt, job, step)


# --------------------------------------------------------------------------------------
# checkpoints

class Checkpoint:
    """A generated checkpoint directory plus its oracle."""

    def __init__(self, path: str, style="gpt", tp=2, pp=2, dp=1, layers=4, hidden=256, vocab=1000,
                 seed=0, ptc: Optional[dict] = None):
        self.path = path
        self.ptc = ptc if ptc is not None else ptcgen.make_ptc(style, tp, pp, dp, layers, hidden, vocab)
        self.tp = self.ptc["parallelism"]["tp"]
        self.pp = self.ptc["parallelism"]["pp"]
        self.full = ptcgen.full_tensors(self.ptc, seed)
        self.summary = ptcgen.write_checkpoint(path, self.ptc, self.full)
        self.slices = ptcgen.shard_slices(self.ptc, tensors=self.full)

    def shard_path(self, t: int, p: int) -> str:
        return os.path.join(self.path, ptcgen.shard_file(t, p))

    def expected_import(self, job: str, step: str) -> dict:
        return {"job": job, "step": step, "shards": self.summary["shards"],
                "tensors": self.summary["tensors"], "bytes": self.summary["bytes"]}


def sha256(path: str, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                return h.hexdigest()
            h.update(b)


def snapshot(root: str) -> Dict[str, Tuple[str, int, int]]:
    """{relative path: (sha256 or 'dir', inode, size)} of everything below root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for d in dirnames:
            p = os.path.join(dirpath, d)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = ("dir", st.st_ino, 0)
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (sha256(p), st.st_ino, st.st_size)
    return out


def read_all(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    return data


def cmp_files(a: str, b: str) -> None:
    r = subprocess.run(["cmp", a, b], capture_output=True, text=True)
    assert r.returncode == 0, f"cmp {a} {b}: {r.stdout}{r.stderr}"


def check_npy(path: str, want: np.ndarray, what: str) -> None:
    data = read_all(path)
    assert os.stat(path).st_size == len(data), f"{what}: st_size {os.stat(path).st_size} != {len(data)} bytes read"
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        assert version == (1, 0), f"{what}: npy version {version}, want 1.0"
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        start = f.tell()
    assert not fortran, f"{what}: fortran_order"
    assert dtype == want.dtype, f"{what}: dtype {dtype} != {want.dtype}"
    assert shape == want.shape, f"{what}: shape {shape} != {want.shape}"
    assert len(data) - start == want.nbytes, f"{what}: {len(data) - start} data bytes, want {want.nbytes}"
    arr = np.load(path, allow_pickle=False)
    assert arr.dtype == want.dtype and arr.shape == want.shape, what
    assert np.array_equal(arr, want), f"{what}: values differ"


def npy_tree(root: str) -> List[str]:
    """Tensor names of every .npy below root (relative path minus .npy)."""
    names = []
    for dirpath, _, filenames in os.walk(root):
        for fn in filenames:
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            assert rel.endswith(".npy"), f"unexpected file {rel} in {root}"
            names.append(rel[:-4])
    return sorted(names)


def verify_step(d: Daemon, job: str, step: str, ck: Checkpoint, full_views: bool = True,
                hf_config: Optional[dict] = None) -> None:
    """Every view of an imported step against the oracle; `hf_config`: the config.json the step
    carries (an HF import's), which its ptc.json holds and its hf/ view shows."""
    sd = d.step_dir(job, step)
    expect = {"ptc.json", "full", "dcp"} | ({"hf"} if hf_config is not None else set())
    for (t, p) in ck.slices:
        expect.add(f"tp{t}-pp{p}.safetensors")
        expect.add(f"tp{t}-pp{p}")
    # The DCP view (its contents: tests/python/test_dcp_view.py), in dcp/ and at the top as well.
    dcp_files = os.listdir(os.path.join(sd, "dcp"))
    assert ".metadata" in dcp_files
    assert sorted(os.listdir(sd)) == sorted(expect | set(dcp_files))

    with open(os.path.join(sd, "ptc.json")) as f:
        got_ptc = json.load(f)
    with open(os.path.join(ck.path, "ptc.json")) as f:
        assert got_ptc == {**json.load(f), **({"hf_config": hf_config} if hf_config is not None else {})}
    if hf_config is not None:
        with open(os.path.join(sd, "hf", "config.json")) as f:
            assert json.load(f) == hf_config
    assert os.stat(os.path.join(sd, "ptc.json")).st_size == len(read_all(os.path.join(sd, "ptc.json")))

    for (t, p), want in ck.slices.items():
        mfile = os.path.join(sd, f"tp{t}-pp{p}.safetensors")
        data = read_all(mfile)
        assert os.stat(mfile).st_size == len(data), mfile
        cmp_files(mfile, ck.shard_path(t, p))
        got = ptcgen.parse_safetensors(data, where=mfile, canonical=True)
        assert sorted(got) == sorted(want), mfile
        for name, arr in want.items():
            dt, a = got[name]
            assert dt == ck.ptc["tensors"][name]["dtype"], (mfile, name)
            assert a.dtype == arr.dtype and a.shape == arr.shape, (mfile, name, a.shape, arr.shape)
            assert np.array_equal(a, arr), (mfile, name)

        vdir = os.path.join(sd, f"tp{t}-pp{p}")
        assert npy_tree(vdir) == sorted(want), vdir
        for name, arr in want.items():
            check_npy(os.path.join(vdir, ptcgen.npy_relpath(name)), arr, f"tp{t}-pp{p}/{name}")

    if full_views:
        fdir = os.path.join(sd, "full")
        assert npy_tree(fdir) == sorted(ck.ptc["tensors"]), fdir
        for name, arr in ck.full.items():
            check_npy(os.path.join(fdir, ptcgen.npy_relpath(name)), arr, f"full/{name}")


def check_ls_step(d: Daemon, job: str, step: str, ck: Checkpoint) -> None:
    info = d.cli_json("ls", f"{job}/{step}", "--json")
    assert info["job"] == job and info["step"] == step, info
    assert info["parallelism"] == ck.ptc["parallelism"], info
    assert info["tensors"] == len(ck.ptc["tensors"]), info
    assert info["bytes"] == ck.summary["bytes"], info
    got = {s["name"]: (s["tensors"], s["bytes"]) for s in info["shards"]}
    assert len(got) == len(info["shards"]), "duplicate shard names"
    want = {f"tp{t}-pp{p}": (len(sl), sum(a.nbytes for a in sl.values())) for (t, p), sl in ck.slices.items()}
    assert got == want


def ls_jobs(d: Daemon) -> Dict[str, List[str]]:
    out = d.cli_json("ls", "--json")
    jobs = {}
    for j in out["jobs"]:
        assert j["job"] not in jobs, f"job {j['job']} listed twice"
        jobs[j["job"]] = sorted(j["steps"])
    return jobs


def assert_error(r: subprocess.CompletedProcess, *names: str, any_of: Tuple[str, ...] = ()) -> None:
    """A refused command: non-zero exit, a `ptcfs: error:` message naming every one of `names`
    and at least one of `any_of`."""
    assert r.returncode != 0, f"expected failure, got exit 0\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    err = r.stderr
    assert any(line.startswith("ptcfs: error:") for line in err.splitlines()), \
        f"stderr has no 'ptcfs: error:' line:\n{err}"
    for n in names:
        assert n in err, f"stderr does not name {n!r}:\n{err}"
    if any_of:
        assert any(n in err for n in any_of), f"stderr names none of {any_of}:\n{err}"


def errno_of(fn, *args) -> Optional[int]:
    try:
        fn(*args)
        return None
    except OSError as e:
        return e.errno


__all__ = ["Daemon", "Checkpoint", "verify_step", "check_ls_step", "ls_jobs", "snapshot", "sha256",
           "cmp_files", "check_npy", "assert_error", "is_mounted", "force_unmount", "require_binaries",
           "errno", "errno_of", "read_all", "PTCFS", "PTCFSD", "BUILD", "REPO"]
