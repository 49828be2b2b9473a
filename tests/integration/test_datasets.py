"""Elastic datasets on one daemon: per-DP-rank views that keep the global sample order across
progress and dp changes, Megatron indexed datasets read back by an independent reader, and
bad input refused with nothing left behind."""

import errno
import json
import os

import numpy as np
import pytest

import ptcds
import ptcfs
from dataset_util import check_jsonl_views, interleave, jsonl_lines, state, write_jsonl
from ptcfs_harness import Checkpoint, assert_error, errno_of, read_all


def add(d, job, name, files, *extra, fmt="jsonl", seed=11, batch=12):
    return d.cli_json("dataset", "add", "--job", job, "--name", name, "--format", fmt, "--seed", seed,
                      "--global-batch", batch, *extra, *files, "--json")


def test_jsonl_views_hold_each_ranks_samples_in_the_global_order(daemon, tmp_path):
    src = str(tmp_path / "train.jsonl")
    samples = write_jsonl(src, 103, seed=1, blank_every=17, final_newline=False)
    r = add(daemon, "gpt", "train", [src], "--dp", 4)
    assert r["num_samples"] == 103 and r["dropped"] == 103 - 96 and r["samples_per_epoch"] == 96
    assert r["bytes_copied"] == 0
    st = state(daemon, "gpt", "train")
    assert {k: st[k] for k in ("num_samples", "seed", "global_batch", "dp", "epoch", "consumed", "dropped")} == \
        {"num_samples": 103, "seed": 11, "global_batch": 12, "dp": 4, "epoch": 0, "consumed": 0, "dropped": 7}
    merged = check_jsonl_views(daemon, "gpt", "train", samples, 11, 12, 4, 0, 0)
    assert len(set(merged)) == 96  # no sample twice in an epoch
    # Reads at odd offsets and sizes return the same bytes as one whole read.
    path = os.path.join(daemon.mnt, "gpt", "data", "train", "dp1.jsonl")
    whole = read_all(path)
    with open(path, "rb", buffering=0) as f:
        parts = []
        while chunk := f.read(777):
            parts.append(chunk)
    assert b"".join(parts) == whole
    ls = daemon.cli_json("dataset", "ls", "--json")["datasets"]
    assert [(x["job"], x["name"], x["dp"]) for x in ls] == [("gpt", "train", 4)]


def test_progress_and_dp_changes_4_2_3_cover_the_epoch_once_in_order(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, dp=4, layers=2, hidden=64, vocab=128)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "100")
    src = str(tmp_path / "a.jsonl")
    samples = write_jsonl(src, 150, seed=2)
    r = add(daemon, "gpt", "train", [src])  # dp from the job: 4
    assert r["dp"] == 4
    batch, seed = 12, 11
    order = ptcds.epoch_order(seed, 0, 150)
    trained = []  # what the ranks consumed, batch by batch

    def train(dp, consumed, batches):
        folder = os.path.join(daemon.mnt, "gpt", "data", "train")
        ranks = [jsonl_lines(os.path.join(folder, f"dp{r}.jsonl"))[:batches * batch // dp] for r in range(dp)]
        trained.extend(interleave(ranks, batch))
        return daemon.cli_json("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed",
                               consumed + batches * batch, "--json")

    check_jsonl_views(daemon, "gpt", "train", samples, seed, batch, 4, 0, 0)
    assert train(4, 0, 2)["consumed"] == 24
    rep = daemon.cli_json("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=2", "--json")
    assert rep["datasets"] == [{"name": "train", "from_dp": 4, "to_dp": 2, "from_global_batch": 12,
                                "to_global_batch": 12}]
    remaining = check_jsonl_views(daemon, "gpt", "train", samples, seed, batch, 2, 0, 24)
    assert trained + remaining == [samples[i] for i in order[:144]]
    assert train(2, 24, 3)["consumed"] == 60
    daemon.cli("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=3")
    assert state(daemon, "gpt", "train")["dp"] == 3
    remaining = check_jsonl_views(daemon, "gpt", "train", samples, seed, batch, 3, 0, 60)
    assert trained + remaining == [samples[i] for i in order[:144]]
    assert len(set(trained + remaining)) == 144
    # The end of the epoch starts the next one, in its own order.
    st = daemon.cli_json("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 144, "--json")
    assert (st["epoch"], st["consumed"]) == (1, 0)
    check_jsonl_views(daemon, "gpt", "train", samples, seed, batch, 3, 1, 0)
    # A restart keeps the position and the views.
    before = {n: read_all(os.path.join(daemon.mnt, "gpt", "data", "train", n)) for n in ("dp0.jsonl", "state.json")}
    daemon.restart()
    assert {n: read_all(os.path.join(daemon.mnt, "gpt", "data", "train", n)) for n in before} == before


def test_a_new_global_batch_with_dp_continues_the_single_rank_order(daemon, tmp_path):
    # 150 samples, B=12 at dp=4; then B=20 at dp=2 after 24 samples, B=9 at dp=3 after 64: the
    # ranks' reads, interleaved, are the epoch's order with nothing repeated or skipped, and
    # the tail after the last whole batch of the current B is dropped.
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, dp=4, layers=2, hidden=64, vocab=128)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "100")
    src = str(tmp_path / "a.jsonl")
    samples = write_jsonl(src, 150, seed=3)
    r = daemon.cli("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=2", "--global-batch", 20,
                   check=False)
    assert_error(r, "job 'gpt' has no dataset to take the global batch 20")
    assert daemon.cli_json("ls", "gpt/100", "--json")["parallelism"]["dp"] == 4
    add(daemon, "gpt", "train", [src])
    seed = 11
    order = ptcds.epoch_order(seed, 0, 150)
    folder = os.path.join(daemon.mnt, "gpt", "data", "train")
    trained = []

    def train(dp, batch, consumed, batches):
        ranks = [jsonl_lines(os.path.join(folder, f"dp{r}.jsonl"))[:batches * batch // dp] for r in range(dp)]
        trained.extend(interleave(ranks, batch))
        return daemon.cli_json("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed",
                               consumed + batches * batch, "--json")

    assert train(4, 12, 0, 2)["consumed"] == 24
    rep = daemon.cli_json("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=2",
                          "--global-batch", 20, "--json")
    assert rep["datasets"] == [{"name": "train", "from_dp": 4, "to_dp": 2, "from_global_batch": 12,
                                "to_global_batch": 20}]
    assert daemon.cli_json("ls", "gpt/100", "--json")["parallelism"]["dp"] == 2  # the same commit
    st = state(daemon, "gpt", "train")
    assert {k: st[k] for k in ("global_batch", "dp", "epoch", "consumed", "batch_offset", "samples_per_epoch",
                               "dropped")} == {"global_batch": 20, "dp": 2, "epoch": 0, "consumed": 24,
                                               "batch_offset": 24, "samples_per_epoch": 144, "dropped": 6}
    # Rank 0 reads order[24:34] then order[44:54] ...: batches of 20 from sample 24.
    assert jsonl_lines(os.path.join(folder, "dp0.jsonl"))[:20] == \
        [samples[i] for i in order[24:34] + order[44:54]]
    remaining = check_jsonl_views(daemon, "gpt", "train", samples, seed, 20, 2, 0, 24, batch_offset=24)
    assert trained + remaining == [samples[i] for i in order[:144]]
    # The position survives a restart (the record keeps batch_offset).
    daemon.restart()
    assert state(daemon, "gpt", "train") == st
    assert train(2, 20, 24, 2)["consumed"] == 64
    r = daemon.cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 70, check=False)
    assert_error(r, "consumed 70 is not batch_offset 24 plus a multiple of the global batch 20")
    # A dp that does not divide the new batch refuses the whole repartition and changes nothing.
    before_state = read_all(os.path.join(folder, "state.json"))
    before_step = daemon.cli_json("ls", "gpt/100", "--json")
    r = daemon.cli("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=3", "--global-batch", 10,
                   check=False)
    assert_error(r, "gpt/train", "global batch 10 is not divisible by dp=3")
    assert daemon.cli_json("ls", "gpt/100", "--json") == before_step
    assert read_all(os.path.join(folder, "state.json")) == before_state
    # The Python client asks the same; a dry run changes nothing.
    with ptcfs.Client(daemon=daemon.addr, secret_file=daemon.secret_file) as client:
        dry = client.repartition("gpt", 100, (1, 1, 3), dry_run=True, global_batch=9)
    assert dry["datasets"] == [{"name": "train", "from_dp": 2, "to_dp": 3, "from_global_batch": 20,
                                "to_global_batch": 9}]
    assert read_all(os.path.join(folder, "state.json")) == before_state
    daemon.cli("repartition", "--job", "gpt", "--step", "100", "--to", "tp=1,pp=1,dp=3", "--global-batch", 9)
    st = state(daemon, "gpt", "train")
    assert (st["global_batch"], st["dp"], st["consumed"], st["batch_offset"], st["samples_per_epoch"],
            st["dropped"]) == (9, 3, 64, 64, 145, 5)
    remaining = check_jsonl_views(daemon, "gpt", "train", samples, seed, 9, 3, 0, 64, batch_offset=64)
    assert trained + remaining == [samples[i] for i in order[:145]]
    assert len(set(trained + remaining)) == 145
    assert train(3, 9, 64, 9)["consumed"] == 0  # the whole rest of the epoch: epoch 1 starts
    assert trained == [samples[i] for i in order[:145]]
    st = state(daemon, "gpt", "train")
    assert (st["epoch"], st["consumed"], st["batch_offset"], st["global_batch"]) == (1, 0, 0, 9)
    check_jsonl_views(daemon, "gpt", "train", samples, seed, 9, 3, 1, 0)


def test_a_dp_that_does_not_divide_the_batch_refuses_the_whole_repartition(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, dp=2, layers=2, hidden=64, vocab=128)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "1")
    src = str(tmp_path / "a.jsonl")
    write_jsonl(src, 40)
    add(daemon, "gpt", "train", [src], batch=8)
    daemon.cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 16)
    before_state = read_all(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json"))
    before_step = daemon.cli_json("ls", "gpt/1", "--json")
    r = daemon.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=1,dp=3", check=False)
    assert_error(r, "gpt/train", "global batch 8 is not divisible by dp=3")
    assert daemon.cli_json("ls", "gpt/1", "--json") == before_step
    assert read_all(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json")) == before_state
    # A dry run is refused the same way.
    r = daemon.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=1,dp=3", "--dry-run", check=False)
    assert_error(r, "not divisible")


def test_megatron_views_read_back_with_an_independent_reader(daemon, tmp_path):
    rnd = np.random.default_rng(5)
    seqs_a = [rnd.integers(0, 50000, size=int(n)).tolist() for n in rnd.integers(0, 40, size=30)]
    seqs_b = [rnd.integers(0, 50000, size=int(n)).tolist() for n in rnd.integers(1, 40, size=21)]
    pa, pb = str(tmp_path / "a_text_document"), str(tmp_path / "b_text_document")
    ptcds.write_megatron(pa, seqs_a, 8, documents=[0, 3, 10, 30])  # uint16; documents of several sequences
    ptcds.write_megatron(pb, seqs_b, 8)
    r = add(daemon, "gpt", "tok", [pa + ".bin", pb], "--dp", 2, fmt="megatron", seed=3, batch=10)
    assert (r["num_samples"], r["dropped"], r["dtype"]) == (51, 1, "uint16")
    allseqs = seqs_a + seqs_b
    order = ptcds.epoch_order(3, 0, 51)
    folder = os.path.join(daemon.mnt, "gpt", "data", "tok")
    assert sorted(os.listdir(folder)) == ["dp0.bin", "dp0.idx", "dp1.bin", "dp1.idx", "state.json"]
    for rank in range(2):
        code, got, docs = ptcds.read_megatron(os.path.join(folder, f"dp{rank}"))
        want = [allseqs[i] for i in ptcds.rank_samples(order, 10, 2, rank, 0)]
        assert code == 8
        assert [g.tolist() for g in got] == want
        assert docs == list(range(len(want) + 1))
    daemon.cli("dataset", "progress", "--job", "gpt", "--name", "tok", "--consumed", 30)
    code, got, _ = ptcds.read_megatron(os.path.join(folder, "dp1"))
    assert [g.tolist() for g in got] == [allseqs[i] for i in ptcds.rank_samples(order, 10, 2, 1, 30)]


def store_files(d):
    out = set()
    for root, _, files in os.walk(os.path.join(d.data, "blobs")):
        out |= {os.path.join(root, f) for f in files}
    return out


@pytest.mark.parametrize("case", ["bad_magic", "past_end", "truncated_idx", "mixed_dtype", "empty_jsonl",
                                  "bad_json_line", "batch_too_big", "dp_not_dividing", "no_dp", "in_mount",
                                  "missing_file", "relative"])
def test_bad_input_is_refused_and_leaves_nothing(daemon, tmp_path, case):
    good = str(tmp_path / "good.jsonl")
    write_jsonl(good, 30)
    add(daemon, "gpt", "other", [good], "--dp", 2)
    blobs_before = store_files(daemon)
    p = str(tmp_path / "m")
    args, fmt, expect = [], "jsonl", []
    if case in ("bad_magic", "past_end", "truncated_idx", "mixed_dtype"):
        ptcds.write_megatron(p, [[1, 2, 3], [4, 5]] * 10, 4)
        fmt, args = "megatron", [p, "--dp", 2]
        if case == "bad_magic":
            with open(p + ".idx", "r+b") as f:
                f.write(b"NOTANIDX")
            expect = ["m.idx", "bad magic"]
        elif case == "past_end":
            os.truncate(p + ".bin", 50)
            expect = ["m.idx", "past the end of the .bin file"]
        elif case == "truncated_idx":
            os.truncate(p + ".idx", os.path.getsize(p + ".idx") - 4)
            expect = ["m.idx", "does not match"]
        else:
            ptcds.write_megatron(p + "2", [[1, 2]] * 20, 8)
            args = [p, p + "2.idx", "--dp", 2]
            expect = ["uint16", "int32", "one dtype"]
    elif case == "empty_jsonl":
        open(p, "w").close()
        args, expect = [p, "--dp", 2], ["empty"]
    elif case == "bad_json_line":
        with open(p, "w") as f:
            f.write('{"a": 1}\n{"a": 2}\n{"a": \n{"a": 4}\n')
        args, expect = [p, "--dp", 2], ["m", "line 3", "not valid JSON"]
    elif case == "batch_too_big":
        write_jsonl(p, 5)
        args, expect = [p, "--dp", 2], ["5 samples", "fewer than one global batch of 12"]
    elif case == "dp_not_dividing":
        write_jsonl(p, 30)
        args, expect = [p, "--dp", 5], ["not divisible by dp=5"]
    elif case == "no_dp":
        write_jsonl(p, 30)
        args, expect = [p], ["no checkpoint step", "--dp"]
    elif case == "in_mount":
        args, expect = [os.path.join(daemon.mnt, "gpt", "data", "other", "dp0.jsonl"), "--dp", 2], ["inside"]
    elif case == "missing_file":
        args, expect = [p + ".nope", "--dp", 2], ["m.nope", "no such file"]
    elif case == "relative":
        write_jsonl(p, 30)
        args = ["--dp", 2, os.path.relpath(p)]  # the CLI makes it absolute: this one must work
    r = daemon.cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", fmt, "--seed", 1,
                   "--global-batch", 12, *args, check=False)
    if case == "relative":
        assert r.returncode == 0, r.stderr
        assert state(daemon, "gpt", "train")["num_samples"] == 30
        return
    assert_error(r, *expect)
    assert [x["name"] for x in daemon.cli_json("dataset", "ls", "--json")["datasets"]] == ["other"]
    assert os.listdir(os.path.join(daemon.mnt, "gpt", "data")) == ["other"]
    assert store_files(daemon) == blobs_before


def test_progress_refusals_name_the_problem(daemon, tmp_path):
    src = str(tmp_path / "a.jsonl")
    write_jsonl(src, 50)
    add(daemon, "gpt", "train", [src], "--dp", 2, batch=8)
    before = read_all(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json"))
    for consumed, msg in [(12, "not a multiple of the global batch 8"), (56, "past the end of the epoch (48 samples)")]:
        r = daemon.cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", consumed, check=False)
        assert_error(r, msg)
    assert_error(daemon.cli("dataset", "progress", "--job", "gpt", "--name", "nope", "--consumed", 8, check=False),
                 "no dataset 'nope'")
    assert_error(daemon.cli("dataset", "add", "--job", "gpt", "--name", "train", "--format", "jsonl", "--seed", 1,
                            "--global-batch", 8, "--dp", 2, src, check=False), "already exists")
    assert read_all(os.path.join(daemon.mnt, "gpt", "data", "train", "state.json")) == before
    # Rewinding to an earlier checkpoint's position is allowed.
    daemon.cli("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 40)
    st = daemon.cli_json("dataset", "progress", "--job", "gpt", "--name", "train", "--consumed", 8, "--epoch", 0,
                         "--json")
    assert (st["epoch"], st["consumed"]) == (0, 8)


def test_a_changed_source_file_fails_reads_and_copy_keeps_its_own(daemon, tmp_path):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    write_jsonl(a, 40, seed=1)
    samples_b = write_jsonl(b, 40, seed=2)
    add(daemon, "gpt", "ref", [a], "--dp", 2, batch=8)
    r = add(daemon, "gpt", "copied", [b], "--dp", 2, "--copy", batch=8)
    assert r["bytes_copied"] == os.path.getsize(b)
    os.remove(b)
    write_jsonl(a, 40, seed=9)  # rewritten in place after the add
    daemon.restart()
    assert errno_of(read_all, os.path.join(daemon.mnt, "gpt", "data", "ref", "dp0.jsonl")) == errno.EIO
    assert "changed since it was added" in daemon.log_tail()
    check_jsonl_views(daemon, "gpt", "copied", samples_b, 11, 8, 2, 0, 0)


def test_a_step_named_data_is_refused(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, layers=2, hidden=64, vocab=128)
    assert_error(daemon.cli("import", ck.path, "--job", "gpt", "--step", "data", check=False), "reserved")


def test_a_job_with_only_datasets_left_is_a_job_to_ls_rm_and_dataset_ls(daemon, tmp_path):
    """Its last step removed, a job holding a dataset once listed nothing under `ls JOB` and was "no job" to
    `rm` while `dataset ls` showed it: all three (and the mount) now say it exists, with its dataset."""
    ck = Checkpoint(str(tmp_path / "ckpt"), tp=1, pp=1, layers=2, hidden=64, vocab=128)
    daemon.cli("import", ck.path, "--job", "gpt", "--step", "1")
    src = str(tmp_path / "train.jsonl")
    write_jsonl(src, 40, seed=2)
    add(daemon, "gpt", "train", [src], "--dp", 2)
    daemon.cli("rm", "gpt/1")
    assert daemon.cli_json("ls", "--json") == {"jobs": [{"job": "gpt", "steps": [], "datasets": ["train"],
                                                         "pending": []}]}
    assert daemon.cli_json("ls", "gpt", "--json") == {"job": "gpt", "steps": [], "datasets": ["train"], "pending": []}
    assert daemon.cli("ls", "gpt").stdout == "datasets: train\n"
    r = daemon.cli("rm", "gpt/1", check=False)
    assert r.returncode == 1 and "job 'gpt' has no step '1'" in r.stderr and "no job" not in r.stderr, r.stderr
    r = daemon.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=1,dp=2", check=False)
    assert r.returncode == 1 and "job 'gpt' has no step '1'" in r.stderr, r.stderr
    assert [(x["job"], x["name"]) for x in daemon.cli_json("dataset", "ls", "--job", "gpt", "--json")["datasets"]] == \
        [("gpt", "train")]
    assert sorted(os.listdir(os.path.join(daemon.mnt, "gpt"))) == ["data"]
    # A job made in the mount, with nothing in it yet, is a job too.
    os.mkdir(os.path.join(daemon.mnt, "empty"))
    assert daemon.cli("ls", "empty").stdout == "empty: no steps or datasets\n"
    r = daemon.cli("rm", "empty/1", check=False)
    assert r.returncode == 1 and "job 'empty' has no step '1'" in r.stderr, r.stderr
    r = daemon.cli("rm", "nojob/1", check=False)
    assert r.returncode == 1 and "no job 'nojob'" in r.stderr, r.stderr
