"""Fixtures for the ptcfs integration tests: real daemons on real FUSE mounts.

Binaries: $PTCFS_BUILD/daemon/ptcfsd and $PTCFS_BUILD/cli/ptcfs (PTCFS_BUILD defaults to <repo>/build).
Run: make integration, or PTCFS_BUILD=$PWD/build PYTHONPATH=$PWD/python $PTCFS_PYTHON -m pytest -q tests/integration
"""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tools"))  # ptcgen
sys.path.insert(0, _HERE)  # ptcfs_harness
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python"))  # ptcfs (the package)



# The daemon and checkpoint fixtures, shared with tests/gpu.
from daemon_fixtures import daemon, make_ckpt, module_daemon, remap_daemon  # noqa: E402,F401
from package_fixtures import ptcfs_wheel  # noqa: E402,F401
from ptcfs_harness import Daemon  # noqa: E402  (a failed test's report carries its daemons' logs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Daemon):
                rep.sections.append((f"ptcfsd log ({name}, tail)", value.log_tail()))
