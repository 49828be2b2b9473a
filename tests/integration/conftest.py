"""Fixtures for the ptcfs integration tests: real daemons on real FUSE mounts.

Binaries: $PTCFS_BUILD/daemon/ptcfsd and $PTCFS_BUILD/cli/ptcfs (PTCFS_BUILD defaults to <repo>/build).
Run: PTCFS_BUILD=$PWD/build /usr/bin/python3 -m pytest -q tests/integration
"""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tools"))  # ptcgen
sys.path.insert(0, _HERE)  # ptcfs_harness
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # ptcfs (the package)

from ptcfs_harness import Checkpoint, Daemon, require_binaries  # noqa: E402


def _daemon(root, **kw):
    require_binaries()
    d = Daemon(str(root), **kw)
    try:
        d.start()
        yield d
    finally:
        d.stop(cleanup_mount=True)


@pytest.fixture
def daemon(tmp_path):
    """A started daemon, private to the test; stopped (and its mount removed) afterwards."""
    yield from _daemon(tmp_path / "daemon")


@pytest.fixture
def remap_daemon(tmp_path):
    """A daemon that never compacts re-cut slices (--compact-below 1): they stay strided."""
    yield from _daemon(tmp_path / "daemon", extra_flags=["--compact-below", "1"])


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory):
    """A started daemon shared by the tests of one module."""
    yield from _daemon(tmp_path_factory.mktemp("daemon"))


@pytest.fixture
def make_ckpt(tmp_path):
    """make_ckpt(name, **make_ptc args) -> Checkpoint written under tmp_path/name."""
    def make(name="ckpt", **kw):
        return Checkpoint(str(tmp_path / name), **kw)
    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Daemon):
                rep.sections.append((f"ptcfsd log ({name}, tail)", value.log_tail()))
