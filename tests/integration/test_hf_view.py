"""The hf/ view (docs/FORMATS.md "The Hugging Face view"): stock transformers loads a step from
MNT/<job>/<step>/hf, every parameter bit for bit, after any repartition; safetensors' safe_open reads
its files with mmap and with pread; a step without a config.json has no hf/."""

import json
import math
import os

import pytest

from hf_util import digests, load_digests, make_llama
from ptcfs_harness import Daemon, require_binaries

pytest.importorskip("transformers")


@pytest.fixture
def hf_daemon(tmp_path):
    """A daemon whose hf/ views start a new safetensors file past 100 kB: the small models here
    then span several files, as large ones do at 5 GB."""
    require_binaries()
    d = Daemon(str(tmp_path / "daemon"), extra_flags=["--hf-shard-size", "100000"])
    try:
        d.start()
        yield d
    finally:
        d.stop(cleanup_mount=True)


def hf_dir(d, job="j", step="1"):
    return os.path.join(d.step_dir(job, step), "hf")


def import_llama(d, src, job="j", step="1", *extra):
    return d.cli_json("import", src, "--format", "hf", "--template", "llama", "--job", job, "--step", step,
                      *extra, "--json")


def test_from_pretrained_loads_every_parameter_after_every_repartition(hf_daemon, tmp_path):
    src = str(tmp_path / "llama")
    want = make_llama(src, seed=3)
    import_llama(hf_daemon, src)
    hf = hf_dir(hf_daemon)

    # The folder: the config as saved, an index naming every tensor once, files of at most 100 kB
    # but for a larger tensor alone.
    names = sorted(os.listdir(hf))
    shards = [n for n in names if n.endswith(".safetensors")]
    assert names == sorted(["config.json", "model.safetensors.index.json", *shards]), names
    assert len(shards) > 3 and shards == [f"model-{k:05d}-of-{len(shards):05d}.safetensors"
                                          for k in range(1, len(shards) + 1)], shards
    assert json.load(open(os.path.join(hf, "config.json"))) == json.load(open(os.path.join(src, "config.json")))
    index = json.load(open(os.path.join(hf, "model.safetensors.index.json")))
    assert sorted(index["weight_map"]) == sorted(want)
    assert set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(4 * math.prod(shape) for _, shape, _ in want.values())
    for n in shards:
        size = os.path.getsize(os.path.join(hf, n))
        held = [t for t, f in index["weight_map"].items() if f == n]
        assert len(held) == 1 or size < 100000 + 8 + 4096, (n, size, held)

    assert load_digests(hf) == want
    for to in ("tp=2,pp=2,dp=1", "tp=1,pp=4,dp=1", "tp=2,pp=1,dp=3", "tp=1,pp=1,dp=1"):
        hf_daemon.cli("repartition", "--job", "j", "--step", "1", "--to", to)
        assert load_digests(hf) == want, to


def test_threaded_and_sequential_loading_and_bfloat16(hf_daemon, tmp_path):
    """transformers 5 loads with a thread pool by default (there is no HF_ENABLE_PARALLEL_LOADING
    any more; HF_DEACTIVATE_ASYNC_LOAD=1 makes it sequential): both, on a bf16 model re-cut to tp=2."""
    src = str(tmp_path / "llama")
    want = make_llama(src, seed=5, dtype="bfloat16")
    import_llama(hf_daemon, src, "j", "1", "--to", "tp=2,pp=2,dp=1")
    hf = hf_dir(hf_daemon)
    assert load_digests(hf, HF_ENABLE_PARALLEL_LOADING="1") == want
    assert load_digests(hf, HF_DEACTIVATE_ASYNC_LOAD="1") == want


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_safe_open_reads_every_tensor(hf_daemon, tmp_path, backend):
    import torch
    from safetensors import safe_open
    src = str(tmp_path / "llama")
    make_llama(src, seed=7)
    import_llama(hf_daemon, src, "j", "1", "--to", "tp=2,pp=2,dp=1")
    with safe_open(os.path.join(src, "model.safetensors"), framework="pt") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}
    hf = hf_dir(hf_daemon)
    got = {}
    for n in sorted(os.listdir(hf)):
        if n.endswith(".safetensors"):
            with safe_open(os.path.join(hf, n), framework="pt", backend=backend) as f:
                assert f.metadata() == {"format": "pt"}
                for k in f.keys():
                    assert k not in got
                    got[k] = f.get_tensor(k)
    assert digests(got) == digests(want)
    assert torch.equal(got["lm_head.weight"], want["lm_head.weight"])


def test_a_step_without_a_config_has_no_hf_folder(hf_daemon, make_ckpt, tmp_path):
    ck = make_ckpt(tp=1, pp=1, layers=2, hidden=64, vocab=100)
    hf_daemon.cli_json("import", ck.path, "--job", "m", "--step", "1", "--json")
    assert "hf" not in os.listdir(hf_daemon.step_dir("m", "1"))
    assert not os.path.exists(hf_dir(hf_daemon, "m", "1"))
    # An HF directory without config.json imports, and has no hf/ either (nothing to give from_pretrained).
    src = str(tmp_path / "llama")
    make_llama(src, seed=2)
    os.remove(os.path.join(src, "config.json"))
    import_llama(hf_daemon, src, "n", "1")
    assert "hf" not in os.listdir(hf_daemon.step_dir("n", "1"))


def test_many_concurrent_from_pretrained_while_the_step_is_repartitioned(tmp_path):
    """The shape of transformers#45547 (a FUSE mount deadlocked under mmap, readahead and the
    threaded loader): 6 processes load one step at once, each with its 4 loader threads, while the step
    is repartitioned again and again under them. No load may hang (each is bounded by its timeout) or
    read a wrong byte: the hf/ view's bytes do not depend on the layout."""
    import concurrent.futures
    import itertools
    require_binaries()
    src = str(tmp_path / "llama")
    want = make_llama(src, seed=11, vocab_size=5000, hidden_size=256, intermediate_size=704, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=4)
    d = Daemon(str(tmp_path / "daemon"), extra_flags=["--hf-shard-size", "4000000"])
    try:
        d.start()
        import_llama(d, src, "j", "1", "--to", "tp=2,pp=2,dp=1")
        hf = hf_dir(d)
        assert len([n for n in os.listdir(hf) if n.endswith(".safetensors")]) >= 8
        layouts = itertools.cycle(("tp=4,pp=1,dp=1", "tp=1,pp=2,dp=2", "tp=2,pp=4,dp=1", "tp=1,pp=1,dp=1"))
        changes = 0
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            loads = [pool.submit(load_digests, hf, 600) for _ in range(6)]
            while not all(f.done() for f in loads):  # until the last load ends
                d.cli("repartition", "--job", "j", "--step", "1", "--to", next(layouts))
                changes += 1
            for f in loads:
                assert f.result() == want
        assert changes >= 4
    finally:
        d.stop(cleanup_mount=True)


def test_export_hf_writes_the_config_and_from_pretrained_loads_the_export(hf_daemon, tmp_path):
    src = str(tmp_path / "llama")
    want = make_llama(src, seed=13)
    import_llama(hf_daemon, src, "j", "1", "--to", "tp=2,pp=1,dp=2")
    out = tmp_path / "out"
    r = hf_daemon.cli_json("export", "j/1", str(out), "--format", "hf", "--json")
    assert r["config"] is True and r["files"] == ["model.safetensors"], r
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    assert (out / "config.json").read_bytes() == open(os.path.join(hf_dir(hf_daemon), "config.json"), "rb").read()
    assert load_digests(str(out)) == want
