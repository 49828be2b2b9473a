"""safetensors reading and writing against the canonical form and ptcgen's independent writer."""

import json
import os
import struct
import threading
import tracemalloc

import numpy as np
import pytest

import ptcfs
import ptcgen
from ptcfs import safetensors as st


def sample_tensors():
    """{name: (dtype, array)} of every dtype, a scalar, an empty tensor and a slashed name."""
    rng = np.random.default_rng(7)
    out = {}
    for i, dtype in enumerate(ptcgen.DTYPES):
        out[f"t{i}.{dtype.lower()}"] = (dtype, ptcgen.random_tensor(dtype, [3, 5 + i], rng))
    out["scalar"] = ("F64", np.array(2.5))
    out["empty"] = ("I32", np.zeros((0, 4), dtype=np.int32))
    out["sub/dir/w"] = ("F32", rng.standard_normal((7,), dtype=np.float32))
    return out


def test_save_is_byte_identical_to_ptcgen(tmp_path):
    tensors = sample_tensors()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    n = st.save(str(ours), {k: a for k, (_, a) in tensors.items()}, {k: d for k, (d, _) in tensors.items()})
    ptcgen.write_safetensors(str(theirs), tensors)
    assert ours.read_bytes() == theirs.read_bytes()
    assert n == os.path.getsize(theirs)
    assert st.canonical_bytes({k: a for k, (_, a) in tensors.items()},
                              {k: d for k, (d, _) in tensors.items()}) == theirs.read_bytes()


def test_header_form_is_exactly_canonical(tmp_path):
    p = tmp_path / "x.safetensors"
    st.save(str(p), {"b": np.arange(3, dtype=np.int64), "a": np.ones((2, 1), dtype=np.float32)})
    data = p.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    want = b'{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2,1]},"b":{"data_offsets":[8,32],"dtype":"I64","shape":[3]}}'
    assert n % 8 == 0 and data[8:8 + n] == want + b" " * (n - len(want))
    assert data[8 + n:] == np.ones(2, np.float32).tobytes() + np.arange(3, dtype=np.int64).tobytes()


def test_round_trip_is_zero_copy_and_exact(tmp_path):
    tensors = sample_tensors()
    p = str(tmp_path / "x.safetensors")
    st.save(p, {k: a for k, (_, a) in tensors.items()}, {k: d for k, (d, _) in tensors.items()})
    f = st.SafetensorsFile(p)
    assert f.keys() == sorted(tensors)
    for name, (dtype, arr) in tensors.items():
        got = f[name]
        assert f.dtype(name) == dtype and got.dtype == ptcgen.np_dtype(dtype) and got.shape == arr.shape
        assert np.array_equal(got, arr), name
        assert not got.flags.writeable and not got.flags.owndata  # a view of the mapping
    assert ptcfs.safetensors.load_dtypes(p) == {k: d for k, (d, _) in tensors.items()}


def test_non_contiguous_and_big_endian_arrays_are_written_as_their_values(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.arange(5, dtype=">i4")
    p = str(tmp_path / "x.safetensors")
    st.save(p, {"t": a.T, "b": b})
    got = st.load(p)
    assert np.array_equal(got["t"], a.T) and got["t"].flags.c_contiguous
    assert np.array_equal(got["b"], b) and got["b"].dtype == np.dtype("<i4")


def test_torch_tensors_bf16_and_views(tmp_path):
    torch = pytest.importorskip("torch")
    w = torch.randn(4, 3, dtype=torch.float32)
    x = torch.randn(5, 2).to(torch.bfloat16)
    p = str(tmp_path / "x.safetensors")
    st.save(p, {"w": w, "x": x})
    bits = x.view(torch.int16).numpy().view(np.uint16)
    theirs = ptcgen.safetensors_bytes({"w": ("F32", w.numpy()), "x": ("BF16", bits)})
    assert open(p, "rb").read() == theirs
    f = st.SafetensorsFile(p)
    assert f.dtype("x") == "BF16" and f["x"].dtype == np.uint16
    tx = f.torch("x")
    assert tx.dtype == torch.bfloat16 and torch.equal(tx, x)
    assert torch.equal(f.torch("w"), w)
    assert torch.equal(ptcfs.dtypes.to_torch(f["x"]), x)  # uint16 bits -> bfloat16


def test_writes_stream_front_to_back_into_a_pipe(tmp_path):
    """A FIFO cannot seek: the file arrives in one pass, at its final name, as a mount writer must."""
    tensors = {f"w{i}": np.full((1000, 100), i, dtype=np.float32) for i in range(5)}
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    st.save(fifo, tensors)
    reader.join(30)
    assert got and got[0] == st.canonical_bytes(tensors)


def test_memory_is_bounded_by_one_tensor_not_the_file(tmp_path):
    # Transposed arrays must be made contiguous: one at a time, never the whole file.
    arrays = {f"w{i}": np.full((1024, 1024), i, dtype=np.float64).T for i in range(6)}  # 8 MiB each
    tracemalloc.start()
    try:
        st.save(str(tmp_path / "x.safetensors"), arrays)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, f"peak {peak} bytes while writing a 48 MiB file"
    assert os.path.getsize(tmp_path / "x.safetensors") > 48 << 20


def write_raw(path, header: dict, data: bytes, pad=True):
    js = json.dumps(header).encode()
    if pad:
        js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + data)


@pytest.mark.parametrize("header, data, text", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "truncated"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "F32 [2] needs 8"),
    ({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, "overlap"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "hole"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, b"\0" * 4, "exactly dtype"),
    # A shape whose element count wraps around in int64 (it raised a bare ValueError later).
    ({"a": {"dtype": "F32", "shape": [4611686018427387905, 4], "data_offsets": [0, 16]}}, b"\0" * 16, "needs"),
])
def test_strict_reader_names_file_and_tensor(tmp_path, header, data, text):
    p = str(tmp_path / "bad.safetensors")
    write_raw(p, header, data)
    with pytest.raises(ptcfs.Error) as e:
        st.load(p)
    assert e.value.code == "invalid_argument" and p in e.value.message and text in e.value.message
    if len(header) == 1:
        assert "tensor 'a'" in e.value.message


def test_reader_refuses_a_header_not_opening_with_a_brace_and_a_name_not_utf8(tmp_path):
    p = str(tmp_path / "bad.safetensors")
    js = b'\xef\xbb\xbf{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'  # a byte order mark first
    open(p, "wb").write(struct.pack("<Q", len(js)) + js + b"x")
    with pytest.raises(ptcfs.Error, match=r"bad.safetensors: header does not start with '\{'"):
        st.load(p)
    js = b'{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'  # a lone surrogate, escaped
    open(p, "wb").write(struct.pack("<Q", len(js)) + js + b"x")
    with pytest.raises(ptcfs.Error, match=r"is not valid UTF-8"):
        st.load(p)


def test_reader_refuses_repeated_keys_and_a_lying_length(tmp_path):
    p = str(tmp_path / "bad.safetensors")
    js = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    open(p, "wb").write(struct.pack("<Q", len(js)) + js + b"x")
    with pytest.raises(ptcfs.Error, match=r"bad.safetensors: header: key 'a' is repeated"):
        st.load(p)
    open(p, "wb").write(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ptcfs.Error, match="does not fit the file"):
        st.load(p)


@pytest.mark.parametrize("arr, dtype, text", [
    (np.zeros(2, np.float64), "F32", "does not hold F32"),
    (np.zeros(2, np.float32), "BF16", "does not hold BF16"),
    (np.zeros(2, np.complex64), None, "cannot store numpy dtype complex64"),
])
def test_writer_refuses_arrays_of_another_type_before_writing(tmp_path, arr, dtype, text):
    p = tmp_path / "x.safetensors"
    with pytest.raises(ptcfs.Error) as e:
        st.save(str(p), {"ok": np.zeros(1, np.int8), "bad": arr}, {"bad": dtype} if dtype else None)
    assert text in e.value.message and "tensor 'bad'" in e.value.message
    assert not p.exists()


def test_torch_2_dtypes_round_trip_with_the_safetensors_package(tmp_path):
    """torch 2.x's float8 and unsigned types: what ptcfs writes, the safetensors package reads with the
    same dtype and bits, and what the package writes, ptcfs reads back as the same torch tensors."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file
    g = torch.Generator().manual_seed(3)
    tensors = {"bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
               "e4m3": torch.randn(5, 2, generator=g).to(torch.float8_e4m3fn),
               "e5m2": torch.randn(2, 2, 2, generator=g).to(torch.float8_e5m2),
               "u16": torch.tensor([0, 1, 40000, 65535], dtype=torch.int32).to(torch.uint16),
               "u32": torch.tensor([0, 7, 2**32 - 1], dtype=torch.int64).to(torch.uint32),
               "u64": torch.tensor([0, 2**63 - 1, -1], dtype=torch.int64).view(torch.uint64)}
    names = {"bf16": "BF16", "e4m3": "F8_E4M3", "e5m2": "F8_E5M2", "u16": "U16", "u32": "U32", "u64": "U64"}

    def bits(t):
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])

    ours = str(tmp_path / "ours.safetensors")
    st.save(ours, tensors)
    theirs = load_file(ours)
    assert sorted(theirs) == sorted(tensors)
    for n, t in tensors.items():
        assert theirs[n].dtype == t.dtype and torch.equal(bits(theirs[n]), bits(t)), n
    path = str(tmp_path / "theirs.safetensors")
    save_file(tensors, path)
    f = st.SafetensorsFile(path)
    for n, t in tensors.items():
        assert f.dtype(n) == names[n], n
        got = f.torch(n)
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(bits(got), bits(t)), n
