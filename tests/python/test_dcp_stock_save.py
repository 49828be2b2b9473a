"""Stock dcp.save into the mount with torch's own FileSystemWriter (docs/FORMATS.md "Stock
dcp.save into the mount"): gloo processes save a 2-D mesh of DTensors, a nested optimizer state and
non-tensor entries with `dcp.save(sd, checkpoint_id=MNT/job/step)` (and dcp.async_save); the step
commits when .metadata lands; stock dcp.load of MNT/job/step itself then returns every tensor and
every bytes item bit for bit at other world sizes and placements, before and after `ptcfs
repartition`. Crafted metadata written the same way is refused at the rename, nothing in it runs,
and no step is committed."""

import errno
import json
import os
import pickle
import shutil
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp_worker  # noqa: E402
from test_dcp import check_saved_step, huge, lying_length, overlapping, rewrite_metadata, run, transformed  # noqa: E402,F401,E501


def top_files(step):
    return sorted(n for n in os.listdir(step) if not os.path.isdir(os.path.join(step, n)))


def test_stock_dcp_save_into_the_mount_loads_at_any_mesh_before_and_after_a_repartition(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "300")
    run(tmp_path, 4, "stock_save", step, "mesh2x2")
    check_saved_step(daemon, "llama/300")  # as ptcfs.dcp.StorageWriter saves it
    assert top_files(step) == [".metadata", "ptc.json", "tp0-pp0.distcp", "tp0-pp0.safetensors"]

    # Stock dcp.load of the step folder itself, and through ptcfs.dcp.StorageReader.
    for world, layout in ((1, "plain"), (3, "shard1"), (2, "shard0")):
        for rec in run(tmp_path, world, "stock_load", step, layout):
            assert rec["differ"] == [], (world, layout, rec)
    for rec in run(tmp_path, 2, "load", step, "shard1"):
        assert rec["differ"] == [], rec

    daemon.cli("repartition", "--job", "llama", "--step", "300", "--to", "tp=2,pp=1,dp=2")
    assert json.load(open(os.path.join(step, "ptc.json")))["parallelism"] == {"tp": 2, "pp": 1, "dp": 2}
    for world, layout in ((4, "mesh2x2"), (3, "shard0")):
        for rec in run(tmp_path, world, "stock_load", step, layout):
            assert rec["differ"] == [], ("after repartition", world, layout, rec)


def test_stock_dcp_async_save_into_the_mount(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "llama", "301")
    run(tmp_path, 2, "stock_async_save", step, "shard0")
    assert daemon.cli_json("ls", "llama/301", "--json")["state"] == "committed"
    for rec in run(tmp_path, 1, "stock_load", step, "plain"):
        assert rec["differ"] == [], rec


def test_a_committed_step_is_not_saved_over(tmp_path, daemon, capfd):
    step = os.path.join(daemon.mnt, "llama", "302")
    run(tmp_path, 1, "stock_save", step, "plain")
    before = open(os.path.join(step, "full", "model.pos.npy"), "rb").read()
    again = tmp_path / "again"  # run()'s output folder, new for the second run
    again.mkdir()
    capfd.readouterr()
    with pytest.raises(Exception):
        run(again, 1, "stock_save", step, "plain")
    # The rank's save failed at its first file, with EROFS (its traceback is on the child's stderr).
    err = capfd.readouterr().err
    assert "Read-only file system" in err and "302/__0_0.distcp" in err, err[-2000:]
    assert open(os.path.join(step, "full", "model.pos.npy"), "rb").read() == before
    assert daemon.cli_json("ls", "llama/302", "--json")["state"] == "committed"


# --- crafted saves: the files torch writes, copied into the mount by hand, with a changed .metadata

def plain_save(tmp_path, name="src"):
    """A one-process stock save; "wt" is a view (w.t()), which torch saves with its strides (1, 4)."""
    import torch.distributed.checkpoint as dcp
    d = tmp_path / name
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    dcp.save({"w": w, "wt": (w * 2).t(), "step": 3}, checkpoint_id=str(d), no_dist=True)
    return d


def write_by_hand(src, step, metadata=None):
    """What FileSystemWriter does: the .distcp files, .metadata.tmp, then the rename."""
    os.makedirs(step)
    for name in sorted(os.listdir(src)):
        if name.endswith(".distcp"):
            shutil.copyfile(src / name, os.path.join(step, name))
    with open(os.path.join(step, ".metadata.tmp"), "wb") as f:
        f.write(metadata if metadata is not None else (src / ".metadata").read_bytes())
    os.rename(os.path.join(step, ".metadata.tmp"), os.path.join(step, ".metadata"))


def test_by_hand_like_torch_commits_and_loads(tmp_path, daemon):
    import torch.distributed.checkpoint as dcp
    step = os.path.join(daemon.mnt, "hand", "1")
    write_by_hand(plain_save(tmp_path), step)
    sd = {"w": torch.zeros(3, 4), "wt": torch.zeros(4, 3), "step": 0}
    dcp.load(sd, checkpoint_id=step, no_dist=True)
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert torch.equal(sd["w"], w) and sd["step"] == 3
    assert torch.equal(sd["wt"], (w * 2).t())
    assert np.array_equal(np.load(os.path.join(step, "full", "wt.npy")), (w * 2).t().numpy())


@pytest.mark.parametrize("change, text", [
    (lying_length, "of __0_0.distcp, which holds"),
    (overlapping, "overlap"),
    (huge, "holds 2^63 bytes or more"),
    (transformed, "transform"),
])
def test_crafted_metadata_fails_the_rename_and_nothing_commits(tmp_path, daemon, change, text):
    src = plain_save(tmp_path)
    rewrite_metadata(src, change)
    step = os.path.join(daemon.mnt, "bad", "1")
    with pytest.raises(OSError) as e:
        write_by_hand(src, step)
    assert e.value.errno in (errno.EINVAL, errno.EIO), e.value
    info = daemon.cli_json("ls", "bad/1", "--json")
    assert info["state"] == "pending", info
    assert text in json.dumps(info), info
    assert not os.path.exists(os.path.join(step, "ptc.json"))
    daemon.cli("rm", "bad/1")
    assert not os.path.exists(step)


def test_code_in_a_saved_metadata_is_never_run(tmp_path, daemon):
    src = plain_save(tmp_path)
    mark = tmp_path / "ran"
    step = os.path.join(daemon.mnt, "bad", "2")
    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {mark}",)
    evil = pickle.dumps(Evil(), protocol=4)
    with pytest.raises(OSError):
        write_by_hand(src, step, metadata=evil)
    assert not mark.exists()
    assert "global posix.system is not allowed" in json.dumps(daemon.cli_json("ls", "bad/2", "--json"))


def test_metadata_written_without_the_rename_and_other_renames_are_refused(tmp_path, daemon):
    step = os.path.join(daemon.mnt, "bad", "3")
    os.makedirs(step)
    with pytest.raises(OSError) as e:
        open(os.path.join(step, ".metadata"), "wb").close()
    assert e.value.errno == errno.EINVAL
    with open(os.path.join(step, "__0_0.distcp"), "wb") as f:
        f.write(b"x" * 10)
    with pytest.raises(OSError) as e:
        os.rename(os.path.join(step, "__0_0.distcp"), os.path.join(step, "__1_0.distcp"))
    assert e.value.errno == errno.EPERM
    # A step written by torch takes no ptcfs files, and the other way round.
    with pytest.raises(OSError) as e:
        open(os.path.join(step, "ptc.json"), "wb").close()
    assert e.value.errno == errno.EINVAL

