"""ptcfs.torch_pickle reads what torch.save writes as torch.load reads it: values, dtypes, views
(offsets, strides, storages shared between tensors), parameters and tensors with attributes (how
Megatron's fp32 master copies are pickled), numpy arrays and args; and the shape checks of
ptcfs.megatron_shapes against a Megatron run's args."""

import argparse
import collections

import numpy as np
import pytest
import torch

from ptcfs import Error, megatron_shapes, torch_pickle


def _same(a, b, path=""):
    assert type(a) is type(b) or isinstance(b, torch.Tensor), (path, type(a), type(b))
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor), path
        assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (b.dtype, b.shape, b.stride(), b.storage_offset()), path
        assert torch.equal(a, b), path
    elif isinstance(b, dict):
        assert list(a) == list(b), path
        for k in b:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}.{i}")
    elif isinstance(b, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    else:
        assert a == b, path


def test_what_torch_save_writes_loads_as_torch_load_reads_it(tmp_path):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    master = torch.randn(4, 4, generator=g)
    master.tensor_model_parallel, master.partition_dim = True, 0  # pickled via _rebuild_from_type_v2
    obj = {"args": argparse.Namespace(hidden_size=8, params_dtype=torch.bfloat16),
           "model": collections.OrderedDict(
               w=base, rows=base[2:5], cols=base[:, 3], t=base.t(),          # views of one storage
               bf16=torch.randn(3, 5, generator=g).to(torch.bfloat16), half=torch.arange(7, dtype=torch.float16),
               i64=torch.tensor([1000]), flags=torch.tensor([True, False]), empty=torch.zeros(0, 3),
               scalar=torch.tensor(2.5)),
           "param": torch.nn.Parameter(torch.ones(2, 2)), "master": master,
           "np": np.random.RandomState(0).get_state(), "rng": torch.get_rng_state(), "iteration": 7}
    f = tmp_path / "x.pt"
    torch.save(obj, f)
    # torch.load as Megatron-LM loads its own checkpoints (the file is this test's, trusted):
    # weights_only=False, since torch 2.6's default refuses argparse.Namespace.
    got, want = torch_pickle.load(str(f)), torch.load(f, weights_only=False)
    _same({k: v for k, v in got.items() if k != "param"}, {k: v for k, v in want.items() if k != "param"})
    _same(got["param"], want["param"].detach())
    m = got["model"]
    assert m["rows"].data_ptr() == m["w"].data_ptr() + 2 * 8 * 4 and m["t"].stride() == (1, 8)
    with pytest.raises(RuntimeError, match="not resizable"):  # a view cannot grow its storage
        m["w"].set_(m["w"], 0, (100, 100), (100, 1))


def test_a_call_the_loader_refuses_becomes_a_placeholder_naming_it(tmp_path):
    class Evil:
        def __reduce__(self):
            return print, ("ran",)

    f = tmp_path / "x.pt"
    torch.save({"hook": Evil()}, f)
    hook = torch_pickle.load(str(f))["hook"]
    assert isinstance(hook, torch_pickle.Opaque) and hook.args == ("ran",)
    assert torch_pickle.describe(hook) == "builtins.print(...), a call the loader refused (not on its allowlist)"


def test_a_storage_record_larger_than_its_member_names_the_tensor(tmp_path):
    f = tmp_path / "x.pt"
    torch.save({"a": {"b": torch.ones(4, dtype=torch.float16)}}, f)
    import zipfile
    with zipfile.ZipFile(f) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(f, "w") as z:
        for info, blob in members:
            z.writestr(info, blob[:2] if info.filename.endswith("/data/0") else blob)
    with pytest.raises(Error) as e:
        torch_pickle.load(str(f))
    assert e.value.message == (f"{f}: tensor 'a.b': its storage '0' claims 4 elements of torch.float16 (8 bytes); "
                               "member data/0 holds 2 bytes")


GQA = argparse.Namespace(hidden_size=64, num_attention_heads=8, kv_channels=8, group_query_attention=True,
                         num_query_groups=2, ffn_hidden_size=176, swiglu=True, padded_vocab_size=256,
                         max_position_embeddings=32)


@pytest.mark.parametrize("name,shape", [
    ("embedding.word_embeddings.weight", [256, 64]), ("output_layer.weight", [256, 64]),
    ("embedding.position_embeddings.weight", [32, 64]),
    ("decoder.layers.3.self_attention.linear_qkv.weight", [96, 64]),   # (8 + 2 x 2) x 8
    ("decoder.layers.3.self_attention.linear_qkv.bias", [96]),
    ("decoder.layers.3.self_attention.linear_proj.weight", [64, 64]),
    ("decoder.layers.3.mlp.linear_fc1.weight", [352, 64]),             # 2 x 176 (swiglu)
    ("decoder.layers.3.mlp.linear_fc2.weight", [64, 176]), ("decoder.layers.3.mlp.linear_fc2.bias", [64]),
    ("decoder.layers.3.self_attention.q_layernorm.weight", [8]),
    ("decoder.layers.3.mlp.linear_fc1.layer_norm_weight", [64]), ("decoder.final_layernorm.bias", [64])])
def test_megatron_shapes_follow_the_args(name, shape):
    assert megatron_shapes.expected(name, GQA) == shape
    megatron_shapes.check(name, shape, GQA, "w")
    with pytest.raises(Error, match=r"^invalid_argument: w has shape \[.*\]; the checkpoint's args .* say "):
        megatron_shapes.check(name, shape[:-1] + [shape[-1] + 1], GQA, "w")


def test_megatron_shapes_leave_open_what_the_args_do_not_say():
    a = argparse.Namespace(hidden_size=64)
    assert megatron_shapes.expected("embedding.word_embeddings.weight", a) == [None, 64]
    megatron_shapes.check("embedding.word_embeddings.weight", [1000, 64], a, "w")
    with pytest.raises(Error, match=r"w has shape \[1000\]; .* say \[\?, 64\]"):
        megatron_shapes.check("embedding.word_embeddings.weight", [1000], a, "w")
    megatron_shapes.check("embedding.word_embeddings.weight", [1000], None, "w")  # no args: nothing checked


def test_a_storage_key_that_names_a_path_is_no_member(tmp_path):
    """A storage record whose key climbs out of data/ ('../../version') reads no member."""
    import io
    import pickle
    import zipfile

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            return ("storage", torch.ByteStorage, "../../version", "cpu", 2) if o == "S" else None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"t": _Call(torch._utils._rebuild_tensor_v2, "S", 0, (2,), (1,), False, {})})
    f = tmp_path / "x.pt"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/version", "3\n")
    with pytest.raises(Error) as e:
        torch_pickle.load(str(f))
    assert e.value.message == f"{f}: tensor 't': its storage '../../version' has no member data/../../version in the zip"


class _Call:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_the_storages_go_when_the_caller_drops_the_tensors(tmp_path):
    """Nothing but the returned object holds a storage, even on the load that first imports torch
    (torch.fx keeps the frames of its import): the memory comes back without the cycle collector."""
    import subprocess
    import sys
    f = tmp_path / "x.pt"
    torch.save({"w": torch.ones(16 << 20)}, f)  # 64 MiB
    script = ("import gc, sys; gc.disable()\n"
              "from ptcfs import torch_pickle\n"
              "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 >> 20\n"
              "x = torch_pickle.load(sys.argv[1])\n"
              "before = rss(); del x\n"
              "print(before - rss())\n")
    r = subprocess.run([sys.executable, "-c", script, str(f)], capture_output=True, text=True,
                       env={"PYTHONPATH": torch_pickle.__file__.rsplit("/ptcfs/", 1)[0]})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 64, r.stdout
