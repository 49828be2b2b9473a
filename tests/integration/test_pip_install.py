"""`pip install <repo>` into a fresh virtual environment (pyproject.toml, docs/PYTHON.md): the
package carries libptcfs_client, so `import ptcfs.direct` reads a mounted view without FUSE with no
.pth file, no PTCFS_CLIENT_LIB and no source tree on the path; its version is ptcfsd's; and
`python -m ptcfs --help` answers."""

import glob
import hashlib
import json
import os
import subprocess
import zipfile

from package_fixtures import clean_env, fresh_venv, pip
from ptcfs_harness import PTCFSD, require_binaries

# Run in the fresh venv: the file's bytes and tensors through ptcfs.direct, and where it got them.
_READ = r"""
import hashlib, json, sys
import ptcfs, ptcfs.direct as d
lib = d.library()
with d.open(sys.argv[1], fallback=False) as f:
    data = bytes(f.read())
    tensors = {n: [a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
               for n, a in f.tensors().items()}
    print(json.dumps({"version": ptcfs.__version__, "file": ptcfs.__file__, "lib": lib and lib._name,
                      "direct": f.direct, "sha256": hashlib.sha256(data).hexdigest(), "tensors": tensors}))
"""


def test_wheel_holds_the_package_the_library_and_the_one_version(ptcfs_wheel):
    require_binaries()
    version = subprocess.run([PTCFSD, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.basename(ptcfs_wheel) == f"ptcfs-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(ptcfs_wheel) as z:
        names = set(z.namelist())
        assert {"ptcfs/__init__.py", "ptcfs/direct.py", "ptcfs/__main__.py", "ptcfs/libptcfs_client.so",
                "ptcfs/_version.py"} <= names
        assert z.read("ptcfs/_version.py").decode() == f'__version__ = "{version}"\n'
        assert not [n for n in names if n.endswith(".pth")]
        meta = z.read(f"ptcfs-{version}.dist-info/METADATA").decode()
    assert f"Version: {version}\n" in meta and "Requires-Dist: numpy" in meta


def test_pip_install_into_a_fresh_venv_reads_a_view_directly(tmp_path, ptcfs_wheel, daemon, make_ckpt):
    require_binaries()
    py = fresh_venv(str(tmp_path / "venv"))
    pip(py, "install", ptcfs_wheel)  # numpy from the wheelhouse, as from PyPI
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert not [p for p in glob.glob(os.path.join(site, "*.pth")) if "ptcfs" in open(p).read()]

    ck = make_ckpt(tp=2, pp=1, layers=2, hidden=64, vocab=500)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    path = os.path.join(daemon.step_dir("j", "1"), "tp1-pp0.safetensors")
    r = subprocess.run([py, "-c", _READ, path], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=clean_env())
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    version = subprocess.run([PTCFSD, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert got["version"] == version
    assert got["file"] == os.path.join(site, "ptcfs", "__init__.py")
    assert got["lib"] == os.path.join(site, "ptcfs", "libptcfs_client.so")
    assert got["direct"] is True
    with open(path, "rb") as f:
        assert got["sha256"] == hashlib.sha256(f.read()).hexdigest()
    want = {n: [a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
            for n, a in ck.slices[(1, 0)].items()}
    assert got["tensors"] == want

    h = subprocess.run([py, "-m", "ptcfs", "--help"], capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
                       env=clean_env())
    assert h.returncode == 0, h.stderr
    assert h.stdout.startswith("usage:") and "import-megatron" in h.stdout
