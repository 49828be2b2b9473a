"""A real ptcfsd under test for the Python package's tests: its own data dir, mount point and
port; stopped and unmounted afterwards whatever happens.

Binaries: $PTCFS_BIN_DIR/ptcfsd and $PTCFS_BIN_DIR/ptcfs when PTCFS_BIN_DIR is set (e.g.
/opt/ptcfs-v1), else $PTCFS_BUILD/daemon/ptcfsd and $PTCFS_BUILD/cli/ptcfs, PTCFS_BUILD
defaulting to <repo>/build. FUSE mounts need root and /dev/fuse.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import ptcfs  # noqa: E402


def binaries():
    """(ptcfsd, ptcfs) paths."""
    bin_dir = os.environ.get("PTCFS_BIN_DIR")
    if bin_dir:
        return os.path.join(bin_dir, "ptcfsd"), os.path.join(bin_dir, "ptcfs")
    build = os.path.abspath(os.environ.get("PTCFS_BUILD") or os.path.join(REPO, "build"))
    return os.path.join(build, "daemon", "ptcfsd"), os.path.join(build, "cli", "ptcfs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mounted(path: str) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f if len(line.split()) > 2)


def unmount(path: str) -> None:
    """Lazily unmounts whatever is stacked at `path` (a daemon that died leaves its mount)."""
    for _ in range(4):
        if not mounted(path):
            return
        subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True, timeout=30)
        if mounted(path):
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


class Daemon:
    def __init__(self, root: str, secret_file: Optional[str] = None, extra: Optional[List[str]] = None):
        self.root = os.path.realpath(root)
        self.data = os.path.join(self.root, "data")
        self.mnt = os.path.join(self.root, "mnt")
        self.log = os.path.join(self.root, "ptcfsd.log")
        os.makedirs(self.data, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.secret_file = secret_file
        self.extra = extra or []
        self.ptcfsd, self.ptcfs = binaries()
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 20.0) -> "Daemon":
        for b in (self.ptcfsd, self.ptcfs):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} is missing: build first, or set PTCFS_BIN_DIR / PTCFS_BUILD")
        cmd = [self.ptcfsd, "--data", self.data, "--mount", self.mnt, "--listen", self.addr, *self.extra]
        if self.secret_file:
            cmd += ["--secret-file", self.secret_file]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ptcfsd exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with self.client() as c:
                    c.status()
                if mounted(self.mnt):
                    os.listdir(self.mnt)
                    return self
            except (ptcfs.Error, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ptcfsd not ready after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        unmount(self.mnt)

    def client(self, **kw) -> "ptcfs.Client":
        return ptcfs.Client(self.addr, self.secret_file, **kw)

    def cli(self, *args, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [self.ptcfs, "--daemon", self.addr]
        if self.secret_file:
            cmd += ["--secret-file", self.secret_file]
        r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd + list(map(str, args)))} exited {r.returncode}:\n{r.stderr}\n"
                               f"{self.log_tail()}")
        return r

    def cli_json(self, *args):
        return json.loads(self.cli(*args, "--json").stdout)

    def log_tail(self, n: int = 6000) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError as e:
            return f"<no log: {e}>"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
