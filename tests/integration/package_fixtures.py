"""The Python package as users install it (pyproject.toml): a wheel that pip builds from this
repository with no download, and fresh virtual environments it is installed into.

The build backend and numpy come from the wheelhouse that deploy/python-env.sh keeps beside the
project's venv (the interpreter running these tests), so pip runs with --no-index: its build
isolation, CMake build of libptcfs_client and install are the real ones, offline."""

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEELHOUSE = os.path.join(sys.prefix, "wheelhouse")

# What the package's commands see: none of the source tree's ways to find the package or library.
_SOURCE_TREE_VARS = ("PYTHONPATH", "PTCFS_BUILD", "PTCFS_CLIENT_LIB", "PIP_FIND_LINKS")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SOURCE_TREE_VARS}
    return {**env, **extra}


def pip(python: str, *args, timeout=900) -> subprocess.CompletedProcess:
    r = subprocess.run([python, "-m", "pip", *args, "--no-index", "--find-links", WHEELHOUSE,
                        "--disable-pip-version-check"], capture_output=True, text=True, timeout=timeout,
                       env=clean_env(PIP_NO_CACHE_DIR="1"), cwd="/")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r


@pytest.fixture(scope="session")
def ptcfs_wheel(tmp_path_factory) -> str:
    """The wheel `pip wheel <repo>` builds (once a session)."""
    if not os.path.isdir(WHEELHOUSE):
        pytest.fail(f"{WHEELHOUSE} is missing: the tests run on the project's venv (make integration; "
                    "docs/PYTHON.md)", pytrace=False)
    out = tmp_path_factory.mktemp("wheel")
    pip(sys.executable, "wheel", "--no-deps", "-w", str(out), REPO)
    (whl,) = glob.glob(str(out / "ptcfs-*.whl"))
    return whl


def fresh_venv(path: str) -> str:
    """A new venv of Debian's python3, with nothing installed: its python's path."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", path], check=True, timeout=300)
    return os.path.join(path, "bin", "python")
