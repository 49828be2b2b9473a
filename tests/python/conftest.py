"""Fixtures for the Python package's tests. Run: $PTCFS_PYTHON -m pytest -q tests/python
(daemon tests need root, /dev/fuse and the binaries: see ptcfs_daemon.py)."""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_REPO, "python"))        # ptcfs
sys.path.insert(0, os.path.join(_REPO, "tests", "tools"))  # ptcgen, ptcds: independent oracles
sys.path.insert(0, _HERE)

from ptcfs_daemon import Daemon  # noqa: E402


@pytest.fixture
def daemon(tmp_path):
    """A started daemon private to the test, stopped and unmounted afterwards."""
    d = Daemon(str(tmp_path / "daemon"))
    try:
        yield d.start()
    finally:
        d.stop()


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory):
    d = Daemon(str(tmp_path_factory.mktemp("daemon")))
    try:
        yield d.start()
    finally:
        d.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Daemon):
                rep.sections.append((f"ptcfsd log ({name})", value.log_tail()))
