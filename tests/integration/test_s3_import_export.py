"""`ptcfs export JOB/STEP s3://...` and `ptcfs import s3://...` against a real S3 server (SeaweedFS,
s3_util.py), checked with boto3 (the client users run) and through the mount: the objects are the
folder export's bytes, an import of them is bit for bit the step, and damaged, cut-short, refused
or foreign uploads are told apart with clear errors that leave the store as it was."""

import os
import shutil
import subprocess
import sys

import pytest

from ptcfs_harness import Checkpoint, Daemon, assert_error, ls_jobs, require_binaries, verify_step
from repartition_util import Oracles
from s3_util import READER, S3Server, credentials_file


@pytest.fixture
def s3(tmp_path):
    s = S3Server(str(tmp_path / "s3"))
    s.start()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def s3_daemon(tmp_path, s3):
    """A daemon with S3 access (--s3-endpoint, --s3-credentials) and the CLI flags that go with it."""
    require_binaries()
    creds = credentials_file(str(tmp_path / "aws-credentials"))
    d = Daemon(str(tmp_path / "daemon"), extra_flags=["--s3-endpoint", s3.endpoint, "--s3-credentials", creds])
    d.s3_flags = ["--s3-endpoint", s3.endpoint, "--s3-credentials", creds]
    try:
        d.start()
        yield d
    finally:
        d.stop(cleanup_mount=True)


def folder_bytes(path: str) -> dict:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def test_export_is_the_folder_export_and_imports_back_bit_for_bit(tmp_path, s3, s3_daemon):
    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=2)
    d.cli("import", ck.path, "--job", "gpt", "--step", "100")
    s3.bucket("ckpt")
    r = d.cli_json("export", "gpt/100", "s3://ckpt/runs/a", *d.s3_flags, "--json")
    assert r["format"] == "ptc" and r["manifest"] == "ptcfs-export.json"

    d.cli("export", "gpt/100", str(tmp_path / "folder"), "--format", "ptc")
    want = folder_bytes(str(tmp_path / "folder"))
    got = s3.objects("ckpt", "runs/a/")
    manifest = got.pop("runs/a/ptcfs-export.json")
    assert {k.removeprefix("runs/a/"): v for k, v in got.items()} == want
    assert b'"format": "ptcfs-export/1"' in manifest

    r = d.cli_json("import", "s3://ckpt/runs/a", "--job", "gpt", "--step", "200", "--json")
    assert r["shards"] == 4 and r["bytes"] == ck.summary["bytes"]
    verify_step(d, "gpt", "200", ck)
    # Straight into another layout (one daemon: the repartition remaps the imported blobs).
    r = d.cli_json("import", "s3://ckpt/runs/a", "--job", "gpt", "--step", "300", "--to", "tp=1,pp=2,dp=1", "--json")
    assert r["shards"] == 2 and r["repartition"]["version"] == 2, r
    verify_step(d, "gpt", "300", Oracles(str(tmp_path), ck, 0)((1, 2, 1)))


def test_import_reads_a_folder_uploaded_by_another_tool(tmp_path, s3, s3_daemon):
    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=2)
    s3.bucket("foreign")
    c = s3.client()
    for name in os.listdir(ck.path):  # no ptcfs-export.json: only the headers are checked
        c.upload_file(os.path.join(ck.path, name), "foreign", f"x/y/{name}")
    d.cli("import", "s3://foreign/x/y", "--job", "job", "--step", "1")
    verify_step(d, "job", "1", ck)


def test_damaged_deleted_or_cut_short_exports_are_refused_and_nothing_is_imported(tmp_path, s3, s3_daemon):
    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=2, pp=1)
    d.cli("import", ck.path, "--job", "gpt", "--step", "1")
    s3.bucket("bad")
    c = s3.client()
    for prefix in ("flip", "gone", "short"):
        d.cli("export", "gpt/1", f"s3://bad/{prefix}", *d.s3_flags)

    # One byte of tensor data flipped behind ptcfs's back (same size: only the digest tells).
    key = "flip/tp1-pp0.safetensors"
    data = bytearray(c.get_object(Bucket="bad", Key=key)["Body"].read())
    data[-100] ^= 0x01
    c.put_object(Bucket="bad", Key=key, Body=bytes(data))
    r = d.cli("import", "s3://bad/flip", "--job", "gpt", "--step", "2", check=False)
    assert_error(r)
    assert "s3://bad/flip/tp1-pp0.safetensors" in r.stderr and "XXH3-64 differs" in r.stderr

    c.delete_object(Bucket="bad", Key="gone/tp0-pp0.safetensors")
    r = d.cli("import", "s3://bad/gone", "--job", "gpt", "--step", "3", check=False)
    assert_error(r)
    assert "missing rank file for shard tp0-pp0" in r.stderr

    c.delete_object(Bucket="bad", Key="short/ptc.json")  # an export cut short has no ptc.json
    r = d.cli("import", "s3://bad/short", "--job", "gpt", "--step", "4", check=False)
    assert_error(r)
    assert "s3://bad/short/ptc.json" in r.stderr

    assert ls_jobs(d) == {"gpt": ["1"]}


def test_export_refusals_leave_the_bucket_as_it_was(tmp_path, s3, s3_daemon):
    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1)
    d.cli("import", ck.path, "--job", "gpt", "--step", "1")
    s3.bucket("guarded")
    s3.client().put_object(Bucket="guarded", Key="taken/ptc.json", Body=b"{}")

    r = d.cli("export", "gpt/1", "s3://guarded/taken", *d.s3_flags, check=False)
    assert_error(r)
    assert "s3://guarded/taken is not empty" in r.stderr

    ro = credentials_file(str(tmp_path / "reader-credentials"), READER)
    r = d.cli("export", "gpt/1", "s3://guarded/new", "--s3-endpoint", s3.endpoint, "--s3-credentials", ro,
              check=False)
    assert_error(r)
    assert "AccessDenied" in r.stderr and READER[1] not in r.stderr
    assert set(s3.objects("guarded")) == {"taken/ptc.json"}

    r = d.cli("export", "gpt/1", "s3://guarded/new", "--format", "hf", *d.s3_flags, check=False)
    assert_error(r, "gpt/1 has no Hugging Face view (hf/)")
    assert set(s3.objects("guarded")) == {"taken/ptc.json"}
    r = d.cli("export", "gpt/1", "s3://guarded/new", check=False)  # no endpoint for the CLI
    assert r.returncode != 0 and "needs an S3 endpoint" in r.stderr


def test_a_daemon_without_s3_access_says_so(tmp_path, daemon):
    r = daemon.cli("import", "s3://ckpt/runs/a", "--job", "gpt", "--step", "1", check=False)
    assert_error(r)
    assert "no S3 access" in r.stderr and "--s3-endpoint" in r.stderr


def test_a_hugging_face_folder_in_s3_imports_as_the_local_one_does(tmp_path, s3, s3_daemon):
    """`--format hf` from s3://: the listing, the index and config.json, each header by ranged GETs, then
    each file's tensors; the step is bit for bit the one a local import of the same folder makes, at
    the asked layout. A file cut short behind ptcfs's back is refused naming its object."""
    from test_formats import CONFIG, expected_ptc, write_hf

    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(2, 1))
    hf = str(tmp_path / "hf")
    write_hf(hf, ck.full)
    s3.bucket("models")
    c = s3.client()
    for name in os.listdir(hf):
        c.upload_file(os.path.join(hf, name), "models", f"llama/{name}")
    r = d.cli_json("import", "s3://models/llama", "--format", "hf", "--template", "llama", "--job", "j", "--step",
                   "1", "--to", "tp=2,pp=1,dp=1", "--json")
    assert r["format"] == "hf" and r["shards"] == 2, r
    verify_step(d, "j", "1", ck, hf_config=CONFIG)
    d.cli("import", hf, "--format", "hf", "--template", "llama", "--job", "j", "--step", "2", "--to",
          "tp=2,pp=1,dp=1")
    for name in sorted(os.listdir(os.path.join(d.mnt, "j", "1"))):
        a, b = os.path.join(d.mnt, "j", "1", name), os.path.join(d.mnt, "j", "2", name)
        if os.path.isfile(a):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                assert fa.read() == fb.read(), name

    key = "llama/model-00002-of-00002.safetensors"
    body = c.get_object(Bucket="models", Key=key)["Body"].read()
    c.put_object(Bucket="models", Key=key, Body=body[:-100])
    before = d.cli_json("ls", "--json")
    r = d.cli("import", "s3://models/llama", "--format", "hf", "--template", "llama", "--job", "j", "--step", "3",
              check=False)
    assert_error(r, "s3://models/llama/model-00002-of-00002.safetensors")
    assert d.cli_json("ls", "--json") == before



def view_files(path: str) -> dict:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))
            if os.path.isfile(os.path.join(path, n))}


def test_hf_and_dcp_exports_upload_the_mounts_views_which_import_and_load_back(tmp_path, s3, s3_daemon):
    """`ptcfs export --format hf|dcp` to s3:// uploads the step's hf/ or dcp/ view byte for byte; the hf
    export imports back (`--format hf` from s3://) as the same step, and stock torch.distributed.checkpoint
    loads the dcp export straight from S3 (FsspecReader over s3fs) at the tensors' full shapes."""
    from test_formats import CONFIG, expected_ptc, write_hf

    d = s3_daemon
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(2, 1))
    write_hf(str(tmp_path / "hf"), ck.full)
    d.cli("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j", "--step", "1",
          "--to", "tp=2,pp=1,dp=1")
    s3.bucket("views")
    r = d.cli_json("export", "j/1", "s3://views/hf", "--format", "hf", *d.s3_flags, "--json")
    assert r["format"] == "hf" and r["files"][-1] == "config.json", r
    step = os.path.join(d.mnt, "j", "1")
    got = {k.removeprefix("hf/"): v for k, v in s3.objects("views", "hf/").items()}
    assert got == view_files(os.path.join(step, "hf"))
    d.cli("import", "s3://views/hf", "--format", "hf", "--template", "llama", "--job", "j", "--step", "2", "--to",
          "tp=2,pp=1,dp=1")
    verify_step(d, "j", "2", ck, hf_config=CONFIG)

    r = d.cli_json("export", "j/1", "s3://views/dcp", "--format", "dcp", *d.s3_flags, "--json")
    assert r["files"][-1] == ".metadata", r
    got = {k.removeprefix("dcp/"): v for k, v in s3.objects("views", "dcp/").items()}
    assert got == view_files(os.path.join(step, "dcp"))
    script = """
import os, sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FsspecReader
endpoint, key, secret, out = sys.argv[1:]
reader = FsspecReader("s3://views/dcp", key=key, secret=secret, client_kwargs={"endpoint_url": endpoint})
meta = reader.read_metadata()
sd = {name: torch.empty(m.size, dtype=m.properties.dtype) for name, m in meta.state_dict_metadata.items()
      if hasattr(m, "size")}
dcp.load(sd, storage_reader=reader)
torch.save(sd, out)
"""
    from s3_util import WRITER
    out = str(tmp_path / "loaded.pt")
    p = subprocess.run([sys.executable, "-c", script, s3.endpoint, WRITER[0], WRITER[1], out], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    import torch
    loaded = torch.load(out)
    assert set(loaded) == set(ck.full)
    for name, want in ck.full.items():
        got_t = loaded[name]
        if got_t.dtype == torch.bfloat16:
            got_t = got_t.view(torch.int16)
        assert got_t.numpy().tobytes() == want.tobytes(), name


def _stock_dcp_folder(path):
    """A folder as stock `dcp.save` writes it in one process (torch's own FileSystemWriter): tensors
    of several dtypes, one of them saved transposed (other strides), and a bytes item; and the values."""
    import io

    import torch
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(7)
    sd = {
        "model": {"embed": torch.randn(40, 16, generator=g),
                  "w": torch.randn(16, 24, generator=g).to(torch.bfloat16),
                  "wt": torch.randn(24, 16, generator=g).t(),
                  "pos": torch.arange(30, dtype=torch.int64).reshape(5, 6)},
        "step": torch.tensor(12.0),
        "extra": io.BytesIO(b"loader position 3"),
    }
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(path))
    return sd


def _upload(s3, bucket, prefix, folder):
    c = s3.client()
    for name in os.listdir(folder):
        c.upload_file(os.path.join(folder, name), bucket, f"{prefix}/{name}")


def test_a_stock_dcp_folder_in_s3_imports_through_the_save_path_and_stock_dcp_loads_it(tmp_path, s3, s3_daemon):
    """`ptcfs import s3://... --format dcp`: the daemon reads a folder stock `dcp.save` wrote (uploaded with
    boto3) through its own S3 client into the save path, as a `dcp.save` into the mount writes it;
    the step commits, and stock `dcp.load` of the mount's step folder returns every tensor bit for bit
    and the bytes item as saved. Refusals (a file DCP does not write, a .metadata that would run code,
    a .distcp cut short) leave no step and no pending save."""
    import io
    import pickle

    import torch
    import torch.distributed.checkpoint as dcp
    d = s3_daemon
    folder = str(tmp_path / "dcp")
    saved = _stock_dcp_folder(folder)
    s3.bucket("dcp")
    _upload(s3, "dcp", "runs/1", folder)
    r = d.cli_json("import", "s3://dcp/runs/1", "--format", "dcp", "--job", "llama", "--step", "1", "--json")
    sizes = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
    assert r["format"] == "dcp" and r["bytes"] == sizes and r["shards"] == 1, r
    assert d.cli_json("ls", "llama/1", "--json")["state"] == "committed"
    step = os.path.join(d.mnt, "llama", "1")
    got = {"model": {k: torch.zeros_like(v) for k, v in saved["model"].items()}, "step": torch.tensor(0.0),
           "extra": io.BytesIO()}
    dcp.load(got, storage_reader=dcp.FileSystemReader(step))
    for k, v in saved["model"].items():
        assert got["model"][k].dtype == v.dtype and torch.equal(got["model"][k], v), k
    assert got["step"].item() == 12.0
    got["extra"].seek(0)
    assert got["extra"].read() == b"loader position 3"

    # Refused before a byte is written: a file stock DCP does not write (Megatron's common.pt).
    _upload(s3, "dcp", "runs/2", folder)
    s3.client().put_object(Bucket="dcp", Key="runs/2/common.pt", Body=b"x")
    assert_error(d.cli("import", "s3://dcp/runs/2", "--format", "dcp", "--job", "llama", "--step", "2",
                       check=False), "s3://dcp/runs/2/common.pt: not a file of a stock DCP save")
    # A .metadata whose unpickling would run code: refused at the conversion, nothing runs.
    hostile = str(tmp_path / "hostile")
    shutil.copytree(folder, hostile)
    marker = str(tmp_path / "ran")

    class Run:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    with open(os.path.join(hostile, ".metadata"), "wb") as f:
        pickle.dump(Run(), f)
    _upload(s3, "dcp", "runs/3", hostile)
    assert_error(d.cli("import", "s3://dcp/runs/3", "--format", "dcp", "--job", "llama", "--step", "3",
                       check=False), "system")
    assert not os.path.exists(marker)
    # A .distcp object cut short behind the writer's back: the chunk records no longer fit.
    short = str(tmp_path / "short")
    shutil.copytree(folder, short)
    (name,) = [n for n in os.listdir(short) if n.endswith(".distcp")]
    with open(os.path.join(short, name), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(short, name)) // 2)
    _upload(s3, "dcp", "runs/4", short)
    assert_error(d.cli("import", "s3://dcp/runs/4", "--format", "dcp", "--job", "llama", "--step", "4",
                       check=False), name, "s3://dcp/runs/4/")
    assert ls_jobs(d) == {"llama": ["1"]}
    (llama,) = [j for j in d.cli_json("ls", "--json")["jobs"] if j["job"] == "llama"]
    assert llama["pending"] == [], llama
    for n in ("2", "3", "4"):  # neither committed nor left pending
        assert d.cli("ls", f"llama/{n}", check=False).returncode != 0
