#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into OUTDIR/<target>/, from the test generators
(tests/tools/ptcgen.py, ptcds.py), the documented formats and the files stock PyTorch wrote
(tests/fixtures/): valid inputs the fuzzer mutates.

Usage: $PTCFS_PYTHON tests/fuzz/make_seeds.py OUTDIR
"""

import base64
import io
import json
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))

import ptcds  # noqa: E402
import ptcgen  # noqa: E402

HEADER = struct.Struct("<4sHHII")  # magic, version, type, length, request id


def put(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main(out):
    # ptc.json and rank files of small checkpoints of each style.
    for style in ("gpt", "llama"):
        for tp, pp in ((1, 1), (2, 2)):
            ptc = ptcgen.make_ptc(style, tp, pp, 1, 2, 64, 300)
            put(out, "ptc_json", f"{style}-tp{tp}-pp{pp}.json", json.dumps(ptc, indent=1))
            full = ptcgen.full_tensors(ptc, 0)
            with tempfile.TemporaryDirectory() as d:
                ptcgen.write_checkpoint(d, ptc, full)
                with open(os.path.join(d, ptcgen.shard_file(tp - 1, pp - 1)), "rb") as f:
                    put(out, "safetensors", f"{style}-tp{tp}-pp{pp}.safetensors", f.read())
    put(out, "safetensors", "metadata.safetensors",
        ptcgen.safetensors_bytes({"w": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3))}))

    # npy views of each dtype family.
    for i, arr in enumerate([np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((2, 2, 2), np.uint16),
                             np.arange(5, dtype=np.int64), np.array(3.5), np.ones((0, 4), np.float16)]):
        b = io.BytesIO()
        np.save(b, arr)
        put(out, "npy", f"{i}.npy", b.getvalue())

    # Megatron .idx files, the .bin size first.
    with tempfile.TemporaryDirectory() as d:
        for code, seqs in ((4, [[1, 2, 3], [4], [5, 6]]), (8, [[7] * 10, [1, 2]])):
            prefix = os.path.join(d, f"ds{code}")
            ptcds.write_megatron(prefix, seqs, code)
            with open(prefix + ".idx", "rb") as f:
                idx = f.read()
            put(out, "mmidx", f"ds{code}", struct.pack("<Q", os.path.getsize(prefix + ".bin")) + idx)

    # Templates (the documented format), cluster.json, MODEL.json and HF config.json (first byte: 1
    # cluster, 0 model, 2 config.json).
    put(out, "template", "llama.json", json.dumps({"name": "mine", "description": "a test", "rules": [
        {"match": "model.embed_tokens.weight", "tp_dim": 0, "pad_to": 128, "stage": "first"},
        {"match": "model.layers.{layer}.self_attn.*", "tp_dim": 0},
        {"match": "model.layers.{layer}.mlp.down_proj.weight", "tp_dim": 1},
        {"match": "model.layers.{layer}.*"},
        {"match": "model.norm.weight", "stage": "last"},
        {"match": "lm_head.weight", "tp_dim": 0, "parts": 1, "pad_to": 128, "stage": "last"},
        {"match": "*.inv_freq", "skip": True}]}))
    put(out, "template", "heads.json", json.dumps({"name": "gqa", "rules": [
        {"match": "model.layers.{layer}.self_attn.q_proj.weight", "tp_dim": 0, "heads": "num_attention_heads",
         "shape": ["num_attention_heads*head_dim", "hidden_size"]},
        {"match": "model.layers.{layer}.mlp.down_proj.weight", "tp_dim": 1, "shape": [None, "intermediate_size"]},
        {"match": "lm_head.weight", "tp_dim": 0, "pad_to": 128, "stage": "last", "required_if_untied": True},
        {"match": "*", "stage": "all"}]}))
    put(out, "config_json", "hf_config", b"\x02" + json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "rope_theta": 500000.0, "pad_token_id": -1, "rope_scaling": {"factor": 8.0}}).encode())
    put(out, "config_json", "cluster", b"\x01" + json.dumps({"nodes": [
        {"id": "n0", "addr": "127.0.0.1:7070", "gpus": 4}, {"id": "n1", "addr": "10.0.0.2:7070", "gpus": 4}],
        "secret_file": "/etc/ptcfs/secret"}).encode())
    put(out, "config_json", "model", b"\x00" + json.dumps({
        "layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 50257, "seq": 2048, "global_batch": 512,
        "query_groups": 16, "dtype": "BF16", "distributed_optimizer": False, "recompute": "selective",
        "sequence_parallel": True,
        "gpu": {"memory_gb": 80, "tflops": 312, "per_node": 8, "intra_node_gbps": 2400,
                "inter_node_gbps": 200}}).encode())

    # Control and peer frames: requests, a response, a data frame.
    for i, (ftype, body) in enumerate([(1, {"op": "ls", "path": "gpt/1"}), (1, {"op": "status"}),
                                       (1, {"op": "repartition", "job": "j", "step": "1", "to": "tp=2,pp=1,dp=1"}),
                                       (2, {"ok": False, "error": {"code": "not_found", "message": "x"}})]):
        b = json.dumps(body).encode()
        put(out, "frame", f"{i}", HEADER.pack(b"PTCF", 1, ftype, len(b), 7) + b)
    j = json.dumps({"ok": True, "result": {"xxh3": 1}}).encode()
    put(out, "frame", "data", HEADER.pack(b"PTCF", 1, 3, 4 + len(j) + 8, 9) + struct.pack("<I", len(j)) + j + b"8 bytes!")

    # Peer replies and records (docs/FORMATS.md).
    put(out, "peer_reply", "stats", json.dumps({"bytes_sent": 10, "bytes_received": 20}))
    put(out, "peer_reply", "prepare_reply", json.dumps({"shards": 2, "bytes": 100, "ptc_digest": 77,
                                                         "bytes_received": 5}))
    ptc = ptcgen.make_ptc("gpt", 1, 1, 1, 2, 64, 300)
    put(out, "peer_reply", "step_state", json.dumps({"version": 3, "nodes": ["n0", "n1"], "held": ["tp0-pp0"],
                                                      "ptc": ptc}))
    put(out, "peer_reply", "save_state", json.dumps({"pending": True, "ready": False, "ptc_digest": 9,
                                                      "complete": ["tp0-pp0.safetensors"]}))
    put(out, "peer_reply", "dataset_state", json.dumps({"version": 1, "dp": 2, "epoch": 0, "consumed": 64,
                                                         "table_xxh3": 12345}))
    # Records as the etcd watch delivers them: the key, a newline, the value (docs/FORMATS.md "Keys in etcd").
    for name, key, rec in [
            ("rec_import", "/ptcfs/steps/gpt/100", {"kind": "import", "version": 1, "nodes": ["n0", "n1"],
                                                    "gpus": [2, 2], "tx": "ab12", "coordinator": "n0"}),
            ("rec_repartition", "/ptcfs/steps/gpt/100", {"kind": "repartition", "version": 2,
                                                         "parallelism": "tp=2,pp=1,dp=2", "nodes": ["n0", "n1"],
                                                         "gpus": [2, 2], "tx": "cd34", "coordinator": "n1"}),
            ("rec_save", "/ptcfs/steps/gpt/200", {"kind": "save", "version": 1, "holders": [["n0"], ["n1"]],
                                                  "tx": "ef56", "coordinator": "n0"}),
            ("rec_remove", "/ptcfs/steps/gpt/100", {"kind": "remove", "removed": True, "tx": "01", "coordinator": "n0"}),
            ("rec_fence", "/ptcfs/steps/gpt/100", {"removed": True, "fenced": "02"}),
            ("rec_dataset", "/ptcfs/datasets/gpt/web", {"kind": "dataset_progress", "version": 3, "tx": "03",
                                                        "coordinator": "n0"}),
            ("rec_node", "/ptcfs/nodes/n1", {"id": "n1", "addr": "10.0.0.2:7070", "gpus": 8}),
            ("rec_bad_tx", "/ptcfs/steps/gpt/100", {"tx": 5})]:
        put(out, "peer_reply", name, key + "\n" + json.dumps(rec))

    # Hugging Face indexes.
    put(out, "hf_index", "index.json", json.dumps({"metadata": {"total_size": 64}, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}}))

    # S3 replies, as SeaweedFS writes them.
    ns = ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    put(out, "s3_xml", "list.xml", '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult' + ns +
        '><Name>ckpt</Name><Prefix>a</Prefix><IsTruncated>true</IsTruncated><NextContinuationToken>t1'
        '</NextContinuationToken><Contents><Key>a b/c+d.txt</Key><ETag>&#34;b1946ac9&#34;</ETag><Size>6</Size>'
        '</Contents></ListBucketResult>')
    put(out, "s3_xml", "upload.xml", '<InitiateMultipartUploadResult' + ns + '><Bucket>ckpt</Bucket><Key>big</Key>'
        '<UploadId>95c4bea1_2149da14</UploadId></InitiateMultipartUploadResult>')
    put(out, "s3_xml", "parts.xml", '<ListPartsResult><IsTruncated>false</IsTruncated><Part><PartNumber>1'
        '</PartNumber><ETag>"e1"</ETag><Size>5242880</Size></Part></ListPartsResult>')
    put(out, "s3_xml", "error.xml", '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
        '<Message>Please reduce your request rate.</Message><Resource>/b/k</Resource></Error>')

    # ptcfs-export.json as `ptcfs export` and the write-through tier write it.
    put(out, "export_manifest", "export.json", json.dumps({"format": "ptcfs-export/1", "files": [
        {"name": "tp0-pp0.safetensors", "size": 123456, "xxh3": "0123456789abcdef"}]}))
    put(out, "export_manifest", "tier.json", json.dumps({"format": "ptcfs-export/1", "version": 3, "files": [
        {"name": "tp0-pp0.safetensors", "size": 1, "xxh3": "00000000000000ff"},
        {"name": "tp1-pp0.safetensors", "size": 2, "xxh3": "ffffffffffffffff"}]}))

    put(out, "export_manifest", "origin.json", json.dumps({"format": "ptcfs-export/1", "version": 1,
                                                            "origin": "5f1e0c2a9b3d4e6f", "files": []}))

    # etcd's JSON gateway: a watch stream's lines (events, a cancel), a range's key-value, an error.
    b64 = lambda t: base64.b64encode(t.encode()).decode()  # noqa: E731
    kv = {"key": b64("/ptcfs/steps/gpt/100"), "value": b64('{"version": 1}'), "create_revision": "7",
          "mod_revision": "9", "version": "2", "lease": "694d7b2c"}
    put(out, "etcd_reply", "watch.jsonl", json.dumps({"result": {"header": {"revision": "9"}, "events": [
        {"kv": kv}, {"type": "DELETE", "kv": {"key": b64("/ptcfs/nodes/n1"), "mod_revision": "10"}}]}}) + "\n" +
        json.dumps({"result": {"canceled": True, "compact_revision": "3"}}) + "\n")
    put(out, "etcd_reply", "kv.json", json.dumps(kv))
    # Members of other types than the gateway writes (json::value threw on these before 2026-11-30).
    put(out, "etcd_reply", "types.jsonl", json.dumps({"message": 5, "code": "x", "key": 3}) + "\n" +
        json.dumps({"result": {"canceled": "yes", "cancel_reason": 1, "events": {"type": 2, "kv": []}}}) + "\n")
    put(out, "etcd_reply", "error.json", json.dumps({"error": "etcdserver: requested lease not found", "code": 5,
                                                     "message": "etcdserver: requested lease not found"}))

    # What stock torch.distributed.checkpoint wrote (tests/fixtures/dcp/make_fixtures.py): each
    # .metadata, and each tensor chunk's item (a torch.save archive) cut out of its .distcp file.
    fixtures = os.path.join(os.path.dirname(HERE), "fixtures", "dcp")
    for case in sorted(os.listdir(fixtures)):
        d = os.path.join(fixtures, case)
        if not os.path.isdir(d):
            continue
        with open(os.path.join(d, ".metadata"), "rb") as f:
            put(out, "dcp_metadata", case, f.read())
        with open(os.path.join(d, "expected.json")) as f:
            expected = json.load(f)
        for item in expected["items"]:
            for k, c in enumerate(item["chunks"] if not item["bytes"] else []):
                with open(os.path.join(d, c["file"]), "rb") as f:
                    f.seek(c["offset"])
                    put(out, "torch_item", f"{case}-{item['fqn']}-{k}", f.read(c["length"]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
