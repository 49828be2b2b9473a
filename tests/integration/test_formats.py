"""Checkpoint formats in and out. In: `ptcfs ptc infer` and `ptcfs import --format hf` with the
shipped llama template, against an oracle written independently (the expected ptc.json by hand,
every shard's slices by ptcgen), read back through the real mount, and the errors of bad input.
Out: `ptcfs export --format hf|ptc`, compared tensor by tensor and imported again."""

import json
import os

import numpy as np

import ptcgen
from ptcfs_harness import PTCFS, Checkpoint, assert_error, require_binaries, verify_step

import subprocess
import time

LAYERS, HIDDEN, KV, FFN, VOCAB = 2, 64, 32, 128, 1000  # vocab is no multiple of 128: padded
HEADS, KV_HEADS = 4, 2  # heads of 16: k and v hold 2 key/value heads in their 32 rows
CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "num_attention_heads": HEADS,
          "num_key_value_heads": KV_HEADS, "intermediate_size": FFN, "vocab_size": VOCAB, "num_hidden_layers": LAYERS,
          "tie_word_embeddings": False, "pad_token_id": -1, "rope_theta": 10000.0}


def expected_ptc(tp, pp):
    """What the llama template must give with CONFIG: written out by hand, not by the code under test."""
    t = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [VOCAB, HIDDEN], "tp_dim": 0, "pad_to": 128,
                                       "stage": "first"},
         "model.norm.weight": {"dtype": "F32", "shape": [HIDDEN], "stage": "last"},
         "lm_head.weight": {"dtype": "BF16", "shape": [VOCAB, HIDDEN], "tp_dim": 0, "pad_to": 128, "stage": "last"}}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = {"dtype": "BF16", "shape": [HIDDEN, HIDDEN], "tp_dim": 0, "heads": HEADS,
                                            "layer": i}
        t[p + "self_attn.k_proj.weight"] = {"dtype": "BF16", "shape": [KV, HIDDEN], "tp_dim": 0, "heads": KV_HEADS,
                                            "layer": i}
        t[p + "self_attn.v_proj.weight"] = {"dtype": "BF16", "shape": [KV, HIDDEN], "tp_dim": 0, "heads": KV_HEADS,
                                            "layer": i}
        t[p + "self_attn.o_proj.weight"] = {"dtype": "BF16", "shape": [HIDDEN, HIDDEN], "tp_dim": 1, "heads": HEADS,
                                            "layer": i}
        t[p + "mlp.gate_proj.weight"] = {"dtype": "BF16", "shape": [FFN, HIDDEN], "tp_dim": 0, "layer": i}
        t[p + "mlp.up_proj.weight"] = {"dtype": "BF16", "shape": [FFN, HIDDEN], "tp_dim": 0, "layer": i}
        t[p + "mlp.down_proj.weight"] = {"dtype": "BF16", "shape": [HIDDEN, FFN], "tp_dim": 1, "layer": i}
        t[p + "input_layernorm.weight"] = {"dtype": "F32", "shape": [HIDDEN], "layer": i}
        t[p + "post_attention_layernorm.weight"] = {"dtype": "F32", "shape": [HIDDEN], "layer": i}
    return {"parallelism": {"tp": tp, "pp": pp, "dp": 1}, "num_layers": LAYERS, "tensors": t}


def write_hf(dirpath, full, sharded=True, extra=None, config=CONFIG):
    """A Hugging Face directory of the full tensors: two shards and an index, or one file, and
    config.json (none when `config` is None). Each layer also carries rotary inverse
    frequencies, which the template skips."""
    os.makedirs(dirpath, exist_ok=True)
    if config is not None:
        with open(os.path.join(dirpath, "config.json"), "w") as fh:
            json.dump(config, fh)
    spec = expected_ptc(1, 1)["tensors"]
    tensors = {n: (spec[n]["dtype"], a) for n, a in full.items()}
    for i in range(LAYERS):
        tensors[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = ("F32", np.arange(8, dtype=np.float32))
    tensors.update(extra or {})
    if not sharded:
        ptcgen.write_safetensors(os.path.join(dirpath, "model.safetensors"), tensors)
        return
    names = sorted(tensors)
    files = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for f, ns in files.items():
        ptcgen.write_safetensors(os.path.join(dirpath, f), {n: tensors[n] for n in ns})
        weight_map.update({n: f for n in ns})
    with open(os.path.join(dirpath, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, fh)


def without_heads(ptc):
    """The PTC the template gives without config.json: no head counts."""
    out = json.loads(json.dumps(ptc))
    for spec in out["tensors"].values():
        spec.pop("heads", None)
    return out


def run_cli(*args, check_rc=0):
    require_binaries()
    r = subprocess.run([PTCFS, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert r.returncode == check_rc, (args, r.stdout, r.stderr)
    return r


def test_ptc_infer_prints_the_templates_ptc_json(tmp_path):
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(2, 2))
    write_hf(str(tmp_path / "hf"), ck.full)
    out = run_cli("ptc", "infer", "--template", "llama", tmp_path / "hf", "--to", "tp=2,pp=2,dp=1").stdout
    assert json.loads(out) == expected_ptc(2, 2)
    one = json.loads(run_cli("ptc", "infer", "--template", "llama", tmp_path / "hf").stdout)
    assert one == expected_ptc(1, 1)
    names = run_cli("ptc", "templates").stdout.split()
    assert {"llama", "gpt2", "neox", "megatron-gpt", "megatron-swiglu"} <= set(names)
    # Without config.json no head counts: the shapes alone decide.
    write_hf(str(tmp_path / "bare"), ck.full, config=None)
    bare = run_cli("ptc", "infer", "--template", "llama", tmp_path / "bare", "--to", "tp=4,pp=1,dp=1").stdout
    assert json.loads(bare) == without_heads(expected_ptc(4, 1))


KV_SPLIT = ("model.layers.0.self_attn.k_proj.weight': dimension 0 holds 2 heads, which tp={tp} does not divide "
            "(a rank would hold part of a head)")


def test_grouped_query_heads_refuse_a_tp_that_splits_a_head(daemon, tmp_path):
    """2 key/value heads of 16 rows: tp=4 and tp=8 divide every shape (k and v have 32 rows) but would
    give each rank part of a head, so infer --to, import --to, repartition and plan --from refuse or
    skip them, naming the tensor and the count; tp=2 works."""
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(2, 1))
    write_hf(str(tmp_path / "hf"), ck.full)
    NOTHING = daemon.cli_json("ls", "--json")
    for tp in (4, 8):
        r = run_cli("ptc", "infer", "--template", "llama", tmp_path / "hf", "--to", f"tp={tp},pp=1,dp=1",
                    check_rc=1)
        assert_error(r, f"at tp={tp},pp=1,dp=1", KV_SPLIT.format(tp=tp))
        r = daemon.cli("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j",
                       "--step", "1", "--to", f"tp={tp},pp=1,dp=1", check=False)
        assert_error(r, f"cannot be laid out at tp={tp},pp=1,dp=1", KV_SPLIT.format(tp=tp))
        assert daemon.cli_json("ls", "--json") == NOTHING
    daemon.cli("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j", "--step", "1",
               "--to", "tp=2,pp=1,dp=1")
    verify_step(daemon, "j", "1", ck, hf_config=CONFIG)
    # The count lives in the stored PTC: a later repartition (and its dry run) refuses too.
    version = daemon.cli_json("ls", "j/1", "--json")["version"]
    for extra in ((), ("--dry-run",)):
        r = daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1,dp=1", *extra, check=False)
        assert_error(r, KV_SPLIT.format(tp=4))
    assert daemon.cli_json("ls", "j/1", "--json")["version"] == version
    verify_step(daemon, "j", "1", ck, hf_config=CONFIG)
    # ... and in the metadata: after a restart too.
    daemon.restart()
    r = daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=8,pp=1,dp=1", check=False)
    assert_error(r, KV_SPLIT.format(tp=8))
    verify_step(daemon, "j", "1", ck, hf_config=CONFIG)
    # plan --from skips the candidates the step cannot take (tp=4 here), saying why, and keeps the rest.
    model = tmp_path / "m.json"
    model.write_text(json.dumps({
        "layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "ffn": FFN, "vocab": VOCAB, "seq": 128,
        "global_batch": 8, "gpu": {"memory_gb": 1000, "tflops": 100, "per_node": 4, "intra_node_gbps": 800,
                                   "inter_node_gbps": 100}}))
    plain = json.loads(run_cli("plan", "--model", model, "--gpus", 4, "--json").stdout)
    assert {c["tp"] for c in plain} == {1, 2, 4}
    r = daemon.cli("plan", "--model", str(model), "--gpus", 4, "--from", "j/1", "--json")
    got = json.loads(r.stdout)
    assert [(c["tp"], c["pp"], c["dp"], c["micro_batch"]) for c in got] == \
        [(c["tp"], c["pp"], c["dp"], c["micro_batch"]) for c in plain if c["tp"] != 4]
    assert all(c["bytes_moved"] == 0 for c in got)  # one node: nothing moves between nodes
    assert f"ptcfs: skipped tp=4,pp=1,dp=1, where j/1 cannot be laid out: " in r.stderr, r.stderr
    assert KV_SPLIT.format(tp=4) in r.stderr, r.stderr
    top = daemon.cli("plan", "--model", str(model), "--gpus", 4, "--from", "j/1", "--top", "3", "--json")
    assert json.loads(top.stdout) == got[:3]


def test_import_hf_refuses_shapes_that_disagree_with_config_json(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(1, 1))
    NOTHING = daemon.cli_json("ls", "--json")
    # config.json says every head has its own key/value head: k and v should have 64 rows.
    write_hf(str(tmp_path / "mha"), ck.full, config={**CONFIG, "num_key_value_heads": HEADS})
    r = daemon.cli("import", str(tmp_path / "mha"), "--format", "hf", "--template", "llama", "--job", "j", "--step",
                   "1", check=False)
    assert_error(r, "4 tensors disagree with config.json (template 'llama')",
                 "model.layers.1.self_attn.v_proj.weight: [32, 64] (config.json: [64, 64] = "
                 "[num_key_value_heads*head_dim, hidden_size])")
    r = run_cli("ptc", "infer", "--template", "llama", tmp_path / "mha", check_rc=1)
    assert_error(r, "4 tensors disagree with config.json")
    # Heads that no number of key/value groups divides; an untied model without its output layer.
    write_hf(str(tmp_path / "odd"), ck.full, config={**CONFIG, "num_key_value_heads": 3})
    r = daemon.cli("import", str(tmp_path / "odd"), "--format", "hf", "--template", "llama", "--job", "j", "--step",
                   "1", check=False)
    assert_error(r, "config.json: num_attention_heads (4) is not a multiple of num_key_value_heads (3)")
    headless = {n: a for n, a in ck.full.items() if n != "lm_head.weight"}
    write_hf(str(tmp_path / "headless"), headless)
    r = daemon.cli("import", str(tmp_path / "headless"), "--format", "hf", "--template", "llama", "--job", "j",
                   "--step", "1", check=False)
    assert_error(r, "config.json says tie_word_embeddings is false, but the checkpoint has no tensor matching "
                    "'lm_head.weight'")
    assert daemon.cli_json("ls", "--json") == NOTHING


def test_import_hf_straight_to_a_layout_gives_every_shard_exactly(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(2, 2))
    write_hf(str(tmp_path / "hf"), ck.full)
    r = daemon.cli_json("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j",
                        "--step", "1", "--to", "tp=2,pp=2,dp=1", "--json")
    assert r["format"] == "hf" and r["template"] == "llama" and r["shards"] == 4, r
    assert r["tensors"] == len(ck.ptc["tensors"])
    assert r["bytes"] == sum(a.nbytes for a in ck.full.values())  # every source byte once (skipped ones not)
    assert r["repartition"]["to"] == {"tp": 2, "pp": 2, "dp": 1}, r
    verify_step(daemon, "j", "1", ck, hf_config=CONFIG)


def test_import_hf_one_file_unsharded_then_repartition(daemon, tmp_path):
    ck1 = Checkpoint(str(tmp_path / "oracle1"), ptc=expected_ptc(1, 1))
    write_hf(str(tmp_path / "hf"), ck1.full, sharded=False)
    r = daemon.cli_json("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j",
                        "--step", "1", "--json")
    assert r["shards"] == 1 and "repartition" not in r
    verify_step(daemon, "j", "1", ck1, hf_config=CONFIG)
    # The padded vocabulary: the single shard holds 1024 rows, zeros after the 1000th.
    ck4 = Checkpoint(str(tmp_path / "oracle4"), ptc=expected_ptc(2, 2), seed=0)
    daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=2,dp=1")
    verify_step(daemon, "j", "1", ck4, hf_config=CONFIG)


def test_import_hf_with_a_template_file(daemon, tmp_path):
    full = {"w": np.arange(24, dtype=np.float32).reshape(6, 4), "b": np.ones(4, dtype=np.float32)}
    os.makedirs(tmp_path / "hf")
    ptcgen.write_safetensors(str(tmp_path / "hf" / "model.safetensors"), {n: ("F32", a) for n, a in full.items()})
    tmpl = tmp_path / "mine.json"
    tmpl.write_text(json.dumps({"name": "mine", "rules": [{"match": "w", "tp_dim": 0}, {"match": "*"}]}))
    r = daemon.cli_json("import", str(tmp_path / "hf"), "--format", "hf", "--template", str(tmpl), "--job", "j",
                        "--step", "1", "--to", "tp=2,pp=1,dp=1", "--json")
    assert r["template"] == "mine"
    sd = daemon.step_dir("j", "1")
    got = ptcgen.read_safetensors(os.path.join(sd, "tp1-pp0.safetensors"))
    assert np.array_equal(got["w"][1], full["w"][3:]) and np.array_equal(got["b"][1], full["b"])
    assert np.array_equal(np.load(os.path.join(sd, "full", "w.npy")), full["w"])


def test_import_hf_refuses_bad_input_and_imports_nothing(daemon, tmp_path):
    ck = Checkpoint(str(tmp_path / "oracle"), ptc=expected_ptc(1, 1))
    NOTHING = daemon.cli_json("ls", "--json")

    def refused(d, *needles, extra_args=()):
        r = daemon.cli("import", str(d), "--format", "hf", "--template", "llama", "--job", "j", "--step", "1",
                       *extra_args, check=False)
        assert_error(r, *needles)
        assert daemon.cli_json("ls", "--json") == NOTHING

    # Names no rule matches: all of them listed.
    write_hf(str(tmp_path / "alien"), ck.full, extra={"vision.patch.weight": ("F32", np.zeros(2, np.float32)),
                                                      "model.layers.0.self_attn.q_norm.weight":
                                                          ("F32", np.zeros(2, np.float32))})
    refused(tmp_path / "alien", "2 tensors match no rule of template 'llama'", "vision.patch.weight",
            "model.layers.0.self_attn.q_norm.weight")
    # An index naming a missing file.
    write_hf(str(tmp_path / "gone"), ck.full)
    os.remove(tmp_path / "gone" / "model-00002-of-00002.safetensors")
    refused(tmp_path / "gone", "model.safetensors.index.json names model-00002-of-00002.safetensors, which is not in")
    # A tensor in two files: file 1 gets a copy of one of file 2's.
    write_hf(str(tmp_path / "twice"), ck.full)
    first, second = (str(tmp_path / "twice" / f"model-0000{k}-of-00002.safetensors") for k in (1, 2))
    dup, held = next(iter(ptcgen.read_safetensors(second).items()))
    ptcgen.write_safetensors(first, {**ptcgen.read_safetensors(first), dup: held})
    refused(tmp_path / "twice", f"tensor {dup} is in both")
    # Shapes that do not divide by the asked tp (k and v have 32 rows: tp=3 does not divide them).
    write_hf(str(tmp_path / "ok"), ck.full)
    refused(tmp_path / "ok", "cannot be laid out at tp=3,pp=1,dp=1", "not divisible by tp=3",
            extra_args=("--to", "tp=3,pp=1,dp=1"))
    # A FIFO for config.json: refused at once (opening it waited for a writer forever, holding the
    # step's claim, and the daemon then ignored SIGTERM); once it is a file, the import goes through.
    write_hf(str(tmp_path / "fifo"), ck.full)
    os.remove(tmp_path / "fifo" / "config.json")
    os.mkfifo(tmp_path / "fifo" / "config.json")
    refused(tmp_path / "fifo", f"{tmp_path / 'fifo' / 'config.json'}: not a regular file")
    # Names the mount cannot show side by side ('a' is the file a.npy, 'a.npy/b' needs it as a
    # folder): refused (the step was committed and never shown), nothing stored.
    clash = {"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0,
             "tensors": {"a": {"dtype": "F32", "shape": [2]}, "a.npy/b": {"dtype": "F32", "shape": [2]}}}
    ptcgen.write_checkpoint(str(tmp_path / "clash"), clash, ptcgen.full_tensors(clash))
    r = daemon.cli("import", str(tmp_path / "clash"), "--job", "j", "--step", "1", check=False)
    assert_error(r, "tensor names 'a' and 'a.npy/b' clash: 'a' is shown as the file a.npy")
    assert daemon.cli_json("ls", "--json") == NOTHING
    # Not a Hugging Face directory; an unknown template.
    os.makedirs(tmp_path / "empty")
    refused(tmp_path / "empty", "no model.safetensors and no model.safetensors.index.json")
    r = daemon.cli("import", str(tmp_path / "ok"), "--format", "hf", "--template", "bert", "--job", "j", "--step",
                   "1", check=False)
    assert_error(r, "no template named 'bert'")
    r = daemon.cli("import", str(tmp_path / "ok"), "--format", "hf", "--job", "j", "--step", "1", check=False)
    assert_error(r, "--format hf needs --template")


# ptcfs export


def test_export_hf_in_shards_brings_back_every_tensor_and_imports_again(daemon, tmp_path):
    ck1 = Checkpoint(str(tmp_path / "oracle1"), ptc=expected_ptc(1, 1))
    write_hf(str(tmp_path / "hf"), ck1.full)
    daemon.cli("import", str(tmp_path / "hf"), "--format", "hf", "--template", "llama", "--job", "j", "--step", "1",
               "--to", "tp=2,pp=2,dp=1")
    out = tmp_path / "out"
    # 100kB as ptcfs prints sizes (100KB and 100kb are the same: units ignore case).
    r = daemon.cli_json("export", "j/1", str(out), "--format", "hf", "--max-shard-size", "100kB", "--json")
    files = sorted(os.listdir(out))
    n = len(r["files"])
    assert n > 2 and files == sorted(r["files"] + ["model.safetensors.index.json", "config.json"]), (r, files)
    assert r["config"] is True and json.loads((out / "config.json").read_text()) == CONFIG
    assert r["files"] == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(ck1.full)
    assert index["metadata"]["total_size"] == r["bytes"] == sum(a.nbytes for a in ck1.full.values())
    got = {}
    for f in r["files"]:
        held = ptcgen.read_safetensors(str(out / f))
        # At most the limit of tensor bytes, or one tensor bigger than it alone.
        assert sum(a.nbytes for _, a in held.values()) <= 100_000 or len(held) == 1, f
        for name, (dt, a) in held.items():
            assert index["weight_map"][name] == f
            got[name] = a
    assert sorted(got) == sorted(ck1.full)
    for name, a in ck1.full.items():
        assert got[name].shape == a.shape and np.array_equal(got[name], a), name
    # Back in, with the model's config.json the export wrote beside the files: the same step, byte for byte.
    daemon.cli("import", str(out), "--format", "hf", "--template", "llama", "--job", "j", "--step", "2")
    verify_step(daemon, "j", "2", ck1, hf_config=CONFIG)


def test_export_ptc_writes_the_checkpoint_import_reads_byte_for_byte(daemon, make_ckpt, tmp_path):
    ck = make_ckpt("ck", tp=2, pp=2)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    out = tmp_path / "out"
    text = daemon.cli("export", "j/1", str(out), "--format", "ptc").stdout
    assert text.startswith(f"exported j/1 to {out} (ptc): 5 files, {len(ck.ptc['tensors'])} tensors"), text
    assert sorted(os.listdir(out)) == sorted(os.listdir(ck.path))
    for f in os.listdir(ck.path):
        if f == "ptc.json":  # the mount's is canonical (keys sorted): the same document
            assert json.loads((out / f).read_text()) == ck.ptc
        else:
            assert (out / f).read_bytes() == open(os.path.join(ck.path, f), "rb").read(), f
    daemon.cli("import", str(out), "--job", "j", "--step", "2")
    verify_step(daemon, "j", "2", ck)
    # The same step as one Hugging Face file: logical tensors (vocabulary padding dropped), names with
    # a slash included.
    hf = tmp_path / "hf"
    r = daemon.cli_json("export", "j/1", str(hf), "--format", "hf", "--json")
    assert r["files"] == ["model.safetensors"] and os.listdir(hf) == ["model.safetensors"]
    got = ptcgen.read_safetensors(str(hf / "model.safetensors"))
    assert sorted(got) == sorted(ck.full) and "extra/rng_state" in got
    for name, a in ck.full.items():
        assert got[name][0] == ck.ptc["tensors"][name]["dtype"] and np.array_equal(got[name][1], a), name


def test_export_ptc_during_repartitions_writes_one_layout(daemon, tmp_path):
    """Exports of 128 MB while the step is repartitioned between tp=2 and tp=4: every export is
    one layout, which imports again with exactly the step's tensors (it could write tp=2's
    ptc.json beside a rank file cut for tp=4, and say it was done)."""
    ptc = {"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "num_layers": 0,
           "tensors": {f"w{i}": {"dtype": "F32", "shape": [1024, 4096], "tp_dim": 0, "stage": "first"}
                       for i in range(8)}}
    oracle = {tp: Checkpoint(str(tmp_path / f"ck{tp}"), ptc=dict(ptc, parallelism={"tp": tp, "pp": 1, "dp": 1}))
              for tp in (2, 4)}
    daemon.cli("import", oracle[2].path, "--job", "j", "--step", "1")
    for k in range(4):
        out = tmp_path / f"out{k}"
        export = subprocess.Popen([PTCFS, "--daemon", daemon.addr, "export", "j/1", str(out), "--format", "ptc"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.05 * (k + 1))
        daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1,dp=1" if k % 2 == 0 else
                   "tp=2,pp=1,dp=1")
        _, err = export.communicate(timeout=300)
        assert export.returncode == 0, err
        tp = json.loads((out / "ptc.json").read_text())["parallelism"]["tp"]
        assert sorted(os.listdir(out)) == ["ptc.json"] + [f"tp{t}-pp0.safetensors" for t in range(tp)]
        daemon.cli("import", str(out), "--job", "k", "--step", str(k))
        verify_step(daemon, "k", str(k), oracle[tp], full_views=False)
        daemon.cli("rm", f"k/{k}")


def test_export_refuses_a_non_empty_dir_an_unknown_step_and_a_bad_size(daemon, make_ckpt, tmp_path):
    ck = make_ckpt("ck", tp=1, pp=1)
    daemon.cli("import", ck.path, "--job", "j", "--step", "1")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert_error(daemon.cli("export", "j/1", str(tmp_path / "full"), check=False), "is not empty")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert_error(daemon.cli("export", "j/9", str(tmp_path / "x"), check=False), "job 'j' has no step '9'")
    assert not (tmp_path / "x").exists()
    assert_error(daemon.cli("export", "j/1", str(tmp_path / "y"), "--max-shard-size", "5 apples", check=False),
                 "--max-shard-size", "is not a size")
    assert not (tmp_path / "y").exists()
    # Lower-case units and binary ones are sizes too.
    for size in ("5gb", "1GiB", "10 MiB"):  # the step is 9 MB: one file
        r = daemon.cli_json("export", "j/1", str(tmp_path / size.replace(" ", "")), "--max-shard-size", size, "--json")
        assert r["files"] == ["model.safetensors"], (size, r)
