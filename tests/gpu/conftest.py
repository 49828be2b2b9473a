"""Fixtures for the tests that need a GPU (make test-gpu): real daemons on real FUSE mounts, as
the integration tests start them, and a CUDA device. There is no skipping: without a GPU the
session fails saying why (run.sh checks before pytest starts)."""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.dirname(_HERE)
sys.path.insert(0, os.path.join(_TESTS, "tools"))  # ptcgen
sys.path.insert(0, os.path.join(_TESTS, "integration"))  # ptcfs_harness, repartition_util
sys.path.insert(0, os.path.join(_TESTS, "python"))  # live_worker
sys.path.insert(0, os.path.join(os.path.dirname(_TESTS), "python"))  # ptcfs

from daemon_fixtures import daemon, make_ckpt, remap_daemon  # noqa: E402,F401


def pytest_sessionstart(session):
    import torch

    from ptcfs import direct
    if not torch.cuda.is_available():
        pytest.exit(f"no GPU: torch {torch.__version__} sees no CUDA device", returncode=1)
    ok, why = direct.gpu_available()
    if not ok:
        pytest.exit(f"libptcfs_client cannot copy into GPU memory: {why}", returncode=1)
