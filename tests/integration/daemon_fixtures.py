"""The fixtures that start daemons and write checkpoints, for tests/integration and tests/gpu
(each conftest imports them)."""

import pytest

from ptcfs_harness import Checkpoint, Daemon, require_binaries


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
