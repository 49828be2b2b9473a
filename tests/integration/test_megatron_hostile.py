"""Hostile Megatron-LM checkpoints: `python3 -m ptcfs import-megatron` on files crafted as an
attacker writes them (pickles from a hand-made pickler or raw opcodes, zips built member by
member) refuses each with an error naming the file and what is wrong, runs no code from it, stays
within bounded memory (the importer's peak RSS, measured as the only child of a fresh process),
and leaves the daemon's store as it was."""

import argparse
import builtins
import collections
import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import megatron_gen as mg
from ptcfs_harness import assert_error, ls_jobs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RANK = os.path.join("iter_0000001", "mp_rank_00", "model_optim_rng.pt")
EMB = ("language_model", "embedding", "word_embeddings", "weight")
EMB_NAME = "model." + ".".join(EMB)
MiB = 1 << 20

# Prints the peak RSS (KiB) of the command it runs, its only child, after the command's own output.
_MEASURE = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.exit(r.returncode)\n")


def run_import(d, ckpt, job):
    """(result, the importer's peak RSS in MiB)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "ptcfs", "import-megatron",
                        str(ckpt), "--job", job, "--daemon", d.addr], capture_output=True, text=True, env=env,
                       timeout=300)
    lines = r.stdout.splitlines()
    return r, int(lines[-1]) / 1024


# --------------------------------------------------------------------------------------
# what an attacker writes

class Storage:
    """A storage member as the file states it: its bytes (or a count of zero bytes, streamed) and
    the element count its record claims."""

    def __init__(self, data, numel=None, kind=torch.HalfStorage):
        self.data, self.kind = data, kind
        size = data if isinstance(data, int) else len(data)
        self.numel = size // 2 if numel is None else numel


class View:
    """torch's rebuild call for a tensor, with whatever offset, size and stride the file says."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, self.args


class Call:
    """Any call the file asks for when unpickled (`func(*args)`)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def crafted(x):
    """`x` with every tensor as a View of a Storage of its own bytes: what torch.save writes, by
    this file's pickler, so that one tensor can be replaced by what an attacker writes."""
    kinds = {torch.float16: torch.HalfStorage, torch.bfloat16: torch.BFloat16Storage, torch.float32: torch.FloatStorage,
             torch.int64: torch.LongStorage, torch.uint8: torch.ByteStorage}
    if isinstance(x, torch.Tensor):
        t = x.detach().contiguous()
        return View(Storage(t.flatten().view(torch.uint8).numpy().tobytes(), t.numel(), kinds[t.dtype]), 0,
                    t.shape, t.stride())
    if isinstance(x, dict):
        return type(x)((k, crafted(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return type(x)(crafted(v) for v in x)
    return x


def pickled(obj):
    """(data.pkl bytes, [Storage] in key order), as torch.save writes them (protocol 2)."""
    storages = []

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                if o not in storages:
                    storages.append(o)
                return "storage", o.kind, str(storages.index(o)), "cpu", o.numel
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue(), storages


def write_pt(path, obj=None, pkl=None, compress=False, extra=()):
    """A torch zip file: data.pkl (`pkl`, or `obj` pickled), data/<key> per storage (deflated
    with `compress`), version, and `extra` (name, bytes) members, names as given."""
    data, storages = pickled(obj) if pkl is None else (pkl, [])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data)
        for key, s in enumerate(storages):
            info = zipfile.ZipInfo(f"archive/data/{key}")
            info.compress_type = method
            with z.open(info, "w", force_zip64=True) as w:
                if isinstance(s.data, int):
                    chunk = bytes(MiB)
                    for left in range(s.data, 0, -MiB):
                        w.write(chunk[:left])
                else:
                    w.write(s.data)
        for name, blob in extra:
            z.writestr(name, blob)
        z.writestr("archive/version", "3\n")


def args(**kw):
    base = dict(num_layers=2, hidden_size=16, num_attention_heads=4, ffn_hidden_size=64, tensor_model_parallel_size=1,
                pipeline_model_parallel_size=1, padded_vocab_size=100)
    return argparse.Namespace(**{**base, **kw})


def nest(path, value):
    out = value
    for k in reversed(path):
        out = {k: out}
    return out


def megatron_file(root, model, compress=False, **top):
    """ROOT/latest_checkpointed_iteration.txt and ROOT/RANK holding {args, iteration, model, **top}."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    write_pt(os.path.join(root, RANK), {"args": args(), "iteration": 1, "model": model, **top}, compress=compress)
    return os.path.join(root, RANK)


def generated(root, **spec):
    """A valid Megatron checkpoint (tp=1, pp=1, iteration 1) by megatron_gen; its rank file."""
    mg.write(str(root), mg.Spec(tp=1, pp=1, layers=2, optimizer=False, **spec), iteration=1)
    return os.path.join(root, RANK)


def raw_pickle(root, body):
    """A rank file whose data.pkl is `body`, written opcode by opcode."""
    megatron_file(root, {})
    write_pt(os.path.join(root, RANK), pkl=body)


# --------------------------------------------------------------------------------------
# the cases: each writes ROOT and returns what the error must name

def case_os_system_as_model(root, marker):
    megatron_file(root, Call(os.system, f"touch {marker}"))
    return ["'model' is posix.system(...), a call the loader refused"]


def case_eval_as_a_tensor(root, marker):
    megatron_file(root, nest(EMB, Call(builtins.eval, f"__import__('os').system('touch {marker}')")))
    return ["model entry 'language_model.embedding.word_embeddings.weight' is builtins.eval(...), a call the "
            "loader refused"]


def case_popen_as_args(root, marker):
    megatron_file(root, {}, args=Call(subprocess.Popen, ["touch", str(marker)]))
    return ["'args' is subprocess.Popen(...), a call the loader refused"]


def case_global_opcode(root, marker):
    # {'model': os.system('touch MARKER')}, by hand: PROTO 2, EMPTY_DICT, 'model', GLOBAL, args, REDUCE, SETITEM
    cmd = f"touch {marker}".encode()
    raw_pickle(root, b"\x80\x02}X\x05\x00\x00\x00modelcos\nsystem\nX" + len(cmd).to_bytes(4, "little") + cmd +
               b"\x85Rs.")
    return ["'model' is os.system(...), a call the loader refused"]


def case_offset_outside_the_storage(root, marker):
    megatron_file(root, nest(EMB, View(Storage(bytes(32)), 20, [4], [1])))
    return [f"tensor '{EMB_NAME}'", "needs 48 bytes of storage '0', which holds 32"]


def case_size_outside_the_storage(root, marker):
    megatron_file(root, nest(EMB, View(Storage(bytes(32)), 0, [100, 16], [16, 1])))
    return [f"tensor '{EMB_NAME}'", "needs 3200 bytes of storage '0', which holds 32"]


def case_huge_size(root, marker):
    megatron_file(root, nest(EMB, View(Storage(bytes(32)), 0, [1 << 40, 1 << 40], [1 << 40, 1])))
    return [f"tensor '{EMB_NAME}'", "size [1099511627776, 1099511627776]", "which holds 32"]


def case_storage_member_cut_to_16_bytes(root, marker):
    # The file: a generated checkpoint whose word embedding (100 x 16 F16 = 3200 bytes) is cut.
    f = generated(root)
    with zipfile.ZipFile(f) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    [key] = [i.filename for i, blob in members if len(blob) == 3200]
    with zipfile.ZipFile(f, "w") as z:
        for info, blob in members:
            z.writestr(info, blob[:16] if info.filename == key else blob)
    return ["tensor 'model.language_model.embedding.word_embeddings.weight'",
            f"claims 1600 elements of torch.float16 (3200 bytes); member data/{key.rsplit('/', 1)[1]} holds 16 bytes"]


def case_huge_claimed_storage(root, marker):
    # A generated checkpoint whose word embedding (its shape right) sits at the end of a storage that
    # claims 2 GiB over a 16-byte member: torch's loader reads 2 GiB past the member (SIGSEGV).
    f = generated(root)
    sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
    emb = sd["model"]["language_model"]["embedding"]["word_embeddings"]
    emb["weight"] = View(Storage(bytes(16), numel=1 << 30), (1 << 30) - 1600, [100, 16], [16, 1])
    write_pt(f, crafted(sd))
    return [f"tensor '{EMB_NAME}'", f"claims {1 << 30} elements of torch.float16 ({1 << 31} bytes); member data/",
            "holds 16 bytes"]


def case_truncated_zip(root, marker):
    f = generated(root)
    with open(f, "rb") as fh:
        blob = fh.read()
    with open(f, "wb") as fh:
        fh.write(blob[:len(blob) * 2 // 3])
    return ["not a torch checkpoint", "not a zip archive"]


def case_member_name_with_dotdot(root, marker):
    megatron_file(root, {})
    write_pt(os.path.join(root, RANK), {"model": {}}, extra=[("archive/data/../../../etc/cron.d/x", b"* * * * *")])
    return ["zip member 'archive/data/../../../etc/cron.d/x' is outside the archive's folder"]


def case_zip_directory_of_100_mib(root, marker):
    # 22 bytes: an end-of-directory record claiming a 100 MiB directory (zipfile would parse it all).
    megatron_file(root, {})
    with open(os.path.join(root, RANK), "wb") as f:
        f.write(b"PK\x05\x06" + struct.pack("<4H2LH", 0, 0, 1, 1, 100 * MiB, 0, 0))
    return [f"a zip directory of {100 * MiB} bytes (more than 8388608"]


def case_zip_bomb(root, marker):
    # 1 GiB of zeros deflated to ~1 MB, claimed by the word embedding.
    f = megatron_file(root, nest(EMB, View(Storage(1 << 30), 0, [1 << 29], [1])), compress=True)
    assert os.path.getsize(f) < 4 * MiB
    return ["zip member 'archive/data/0' is compressed", "torch stores every member uncompressed"]


def case_bytearray_of_a_gib(root, marker):
    # 30 bytes: PROTO 2, GLOBAL builtins.bytearray, BININT 2**30, TUPLE1, REDUCE, STOP
    body = b"\x80\x02cbuiltins\nbytearray\nJ\x00\x00\x00\x40\x85R."
    assert len(body) == 30
    raw_pickle(root, body)
    return ["bytearray(1073741824) would take 1073741824 bytes"]


def case_bytearray8_of_6_gib(root, marker):
    # 14 bytes: PROTO 5, BYTEARRAY8 of 6 GiB (Python's own unpickler zero-fills that much first), STOP
    raw_pickle(root, b"\x80\x05\x96" + struct.pack("<Q", 6 << 30) + b".")
    return [f"a bytearray of {6 << 30} bytes (BYTEARRAY8) would take"]


def case_memo_index_bomb(root, marker):
    # 9 bytes: LONG_BINPUT 2**27 (Python's C unpickler makes a 2 GiB memo for it), then an empty dict.
    raw_pickle(root, b"\x80\x02}r\x00\x00\x00\x08.")
    return ["not a Megatron-LM checkpoint (no 'model' state dict"]


def case_numpy_scalar_of_a_gib(root, marker):
    megatron_file(root, {}, rng=Call((np._core if hasattr(np, "_core") else np.core).multiarray.scalar, np.dtype(f"V{1 << 30}")))
    return ["a numpy scalar of |V1073741824 would take 1073741824 bytes"]


def case_numpy_array_called(root, marker):
    megatron_file(root, {}, rng=Call(np.ndarray, (1 << 30,)))
    return ["calling numpy.ndarray is refused"]


def case_a_million_dicts(root, marker):
    # MARK, 8 Mi EMPTY_DICTs, LIST: 8 MiB of pickle, ~700 MB of dicts.
    raw_pickle(root, b"\x80\x02(" + b"}" * (8 * MiB) + b"l.")
    return ["the pickle's objects take more than 268435456 bytes"]


def _edit(root, change):
    """A generated checkpoint, loaded, changed by `change(state dict)` and written back."""
    f = generated(root)
    sd = torch.load(f, weights_only=False)  # the test's own file, with args (a Namespace)
    change(sd)
    write_pt(f, crafted(sd))


def case_numpy_array_as_a_tensor(root, marker):
    _edit(root, lambda sd: sd["model"]["language_model"]["embedding"]["word_embeddings"].update(
        weight=np.zeros((100, 16), np.float16)))
    return ["model entry 'language_model.embedding.word_embeddings.weight' is a numpy.ndarray, not a tensor"]


def case_optimizer_of_the_wrong_form(root, marker):
    _edit(root, lambda sd: sd.update(optimizer={"optimizer": {"param_groups": 5, "state": {}}}))
    return ["optimizer state of an unexpected form (TypeError", "--model-only"]


def case_vocab_divisor_zero(root, marker):
    _edit(root, lambda sd: setattr(sd["args"], "make_vocab_size_divisible_by", 0))
    return ["args.make_vocab_size_divisible_by is 0, not a positive number"]


def case_state_dicts_100000_deep(root, marker):
    # {"model": {"a": {"a": ... None}}}, 10**5 deep, by opcodes: EMPTY_DICT, "a" each level, then SETITEMs
    n = 10 ** 5
    raw_pickle(root, b"\x80\x02}X\x05\x00\x00\x00model" + b"}X\x01\x00\x00\x00a" * n + b"N" + b"s" * (n + 1) + b".")
    return ["model entry 'a.a.a.a.", "nests more than 32 state dicts deep"]


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


@pytest.fixture(scope="module")
def baseline(module_daemon, tmp_path_factory):
    """The importer's peak RSS (MiB) for a valid generated checkpoint of the same size."""
    root = tmp_path_factory.mktemp("valid")
    generated(root)
    r, peak = run_import(module_daemon, root, "valid")
    assert r.returncode == 0, r.stderr
    return peak


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_file_is_refused_in_bounded_memory_and_changes_nothing(module_daemon, baseline, tmp_path, case):
    root, marker = tmp_path / "ckpt", tmp_path / "pwned"
    names = CASES[case](str(root), marker)
    before = ls_jobs(module_daemon)
    r, peak = run_import(module_daemon, root, "hostile")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert_error(r, os.path.join("mp_rank_00", "model_optim_rng.pt"), *names)
    assert "Traceback" not in r.stderr, r.stderr
    assert not marker.exists()
    assert ls_jobs(module_daemon) == before
    # What a file may make the importer allocate besides its tensors: 256 MiB (torch_pickle.MAX_OBJECT_BYTES).
    assert peak < baseline + (300 if case == "a_million_dicts" else 64), (peak, baseline)
