"""A DCP checkpoint directory whose items are safetensors files, as torch's Hugging Face storage writer
(torch.distributed.checkpoint.HuggingFaceStorageWriter) or a FileSystemWriter with
``serialization_format=SAFETENSORS`` writes it (docs/FORMATS.md, "Distributed Checkpoint").

Each file holds one chunk of each of its tensors: the header gives its dtype and shape, and
``__metadata__["DCP_SHARDING_INFO"]`` (a JSON string ``{name: {"saved_offsets": [...]}}``) where it
lies in the global tensor; a file without it holds whole tensors (offsets 0), as a consolidated save
does. Without ``.metadata`` (the HF writer writes none, or only ``model.safetensors.index.json``) a
tensor's shape is the box its chunks span; with one, its shapes, dtypes and chunks must be those of
the files. Everything is checked before a byte of data is used, nothing is run: the header by
ptcfs.safetensors (its limits; data offsets inside the file), the sharding info as bounded JSON,
every chunk inside its tensor, the chunks of a tensor covering it exactly once (ptcfs.dcp_files).
"""

from __future__ import annotations

import json
import os
import stat
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import dtypes as _dt
from ._json import no_duplicates
from .dcp_files import MAX_CHUNKS, Checkpoint, Chunk, Tensor, _check_cover
from .errors import invalid
from .formats.safetensors import MAX_HEADER, parse_header

SUFFIX = ".safetensors"
INDEX = "model.safetensors.index.json"  # the HF writer's {"weight_map": {tensor: file}} (no shapes)
SHARDING_KEY, OFFSETS_KEY = "DCP_SHARDING_INFO", "saved_offsets"
MAX_SHARDING_INFO = 64 << 20  # torch writes ~40 bytes a tensor
MAX_INDEX_BYTES = 64 << 20

Pieces = Dict[str, List[Tuple[str, Chunk]]]  # {tensor: [(dtype, chunk)]} as the files hold them


class SafetensorsCheckpoint(Checkpoint):
    """A checked directory of safetensors chunks: a chunk's (offset, length) is its byte range."""

    def load_chunk(self, t: Tensor, c: Chunk) -> np.ndarray:
        nd = _dt.numpy_dtype(t.dtype)
        count = c.length // nd.itemsize
        a = np.fromfile(c.file, dtype=nd, count=count, offset=c.offset)
        if a.size != count:  # the file shrank since it was checked
            raise invalid(f"{c.file}: tensor '{t.name}' is truncated ({a.size} of {count} elements)")
        return a.reshape(c.sizes)


def is_safetensors(c: Chunk) -> bool:
    """Whether a chunk of a .metadata checkpoint is a safetensors one: its file starts like a
    safetensors file, or its byte range is no torch.save archive (the range torch records for a
    safetensors tensor written behind bytes items)."""
    with open(c.file, "rb") as f:
        head = f.read(9)
        f.seek(c.offset)
        return head[8:9] == b"{" or f.read(4) != b"PK\x03\x04"


def storage_files(path: str) -> List[str]:
    """The *.safetensors files of `path` (sorted names), each a regular file (not a symlink)."""
    names = sorted(n for n in os.listdir(path) if n.endswith(SUFFIX))
    for n in names:
        if not stat.S_ISREG(os.lstat(os.path.join(path, n)).st_mode):
            raise invalid(f"{path}: {n} is not a regular file")
    return names


def _header(file: str) -> Tuple[int, dict, Optional[dict]]:
    """parse_header over the header bytes alone (at most MAX_HEADER of them are read)."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        buf = head + f.read(min(n, MAX_HEADER, max(size - 8, 0)))
    try:
        return parse_header(buf, size, file)
    except RecursionError:
        raise invalid(f"{file}: the header nests too deeply") from None


def _sharding_info(file: str, meta: Optional[dict], entries: dict) -> Dict[str, List[int]]:
    """{tensor: saved offsets} of a file's DCP_SHARDING_INFO, checked against its header."""
    raw = (meta or {}).get(SHARDING_KEY)
    if raw is None:
        return {name: [0] * len(e[1]) for name, e in entries.items()}
    where = f"{file}: {SHARDING_KEY}"
    if len(raw) > MAX_SHARDING_INFO:
        raise invalid(f"{where}: {len(raw)} characters (at most {MAX_SHARDING_INFO} are read)")
    try:
        info = json.loads(raw, object_pairs_hook=no_duplicates(where))
    except (ValueError, RecursionError) as e:
        raise invalid(f"{where}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(info, dict):
        raise invalid(f"{where}: not a JSON object")
    if set(info) != set(entries):
        odd = sorted(set(info) ^ set(entries))[:4]
        raise invalid(f"{where}: names tensors {odd} that are not, or not only, those of the header")
    return {name: _saved_offsets(f"{where}: tensor '{name}'", e, len(entries[name][1]))
            for name, e in info.items()}


def _saved_offsets(where: str, e, rank: int) -> List[int]:
    off = e.get(OFFSETS_KEY) if isinstance(e, dict) and set(e) == {OFFSETS_KEY} else None
    if not isinstance(off, list) or len(off) != rank or not all(type(v) is int and 0 <= v < 1 << 62 for v in off):
        raise invalid(f"{where}: {json.dumps(e)[:200]} is not {{\"{OFFSETS_KEY}\": [{rank} non-negative integers]}}")
    return off


def _file_pieces(file: str, pieces: Pieces) -> None:
    """Adds the chunks of one file to `pieces`."""
    start, entries, meta = _header(file)
    offsets = _sharding_info(file, meta, entries)
    for name, (dtype, shape, b, e) in entries.items():
        chunks = pieces.setdefault(name, [])
        if len(chunks) >= MAX_CHUNKS:
            raise invalid(f"{file}: tensor '{name}': more than {MAX_CHUNKS} chunks")
        chunks.append((dtype, Chunk(offsets[name], list(shape), file, start + b, e - b)))


def _pieces(path: str, files: List[str]) -> Pieces:
    pieces: Pieces = {}
    for f in sorted(files):
        _file_pieces(os.path.join(path, f), pieces)
    return pieces


def _files_of(chunks: List[Chunk]) -> str:
    names = sorted({os.path.basename(c.file) for c in chunks})
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _tensor(path: str, name: str, got: List[Tuple[str, Chunk]], shape: Optional[List[int]]) -> Tensor:
    """The tensor of checked chunks: one dtype and rank; inside `shape` (the box they span when
    None) and covering it exactly once."""
    chunks = [c for _, c in got]
    where = f"{path} ({_files_of(chunks)})"
    dtypes = sorted({d for d, _ in got})
    if len(dtypes) != 1:
        raise invalid(f"{where}: tensor '{name}': chunks of dtypes {dtypes}")
    if len({len(c.sizes) for c in chunks}) != 1:
        raise invalid(f"{where}: tensor '{name}': chunks of different ranks")
    if shape is None:
        shape = [max(c.offsets[d] + c.sizes[d] for c in chunks) for d in range(len(chunks[0].sizes))]
    elif len(chunks[0].sizes) != len(shape):
        raise invalid(f"{where}: tensor '{name}': chunks of rank {len(chunks[0].sizes)}; .metadata says {shape}")
    _check_cover(where, name, shape, chunks)
    return Tensor(name, dtypes[0], shape, chunks)


def read(path: str) -> SafetensorsCheckpoint:
    """A directory of safetensors chunks without .metadata (the HF writer's), checked."""
    files = storage_files(path)
    if not files:
        raise invalid(f"{path}: not a DCP checkpoint (no .metadata, no *{SUFFIX} files)")
    pieces = _pieces(path, files)
    _check_index(path, files, pieces)
    ck = SafetensorsCheckpoint(path)
    for name in sorted(pieces):
        ck.tensors[name] = _tensor(path, name, pieces[name], None)
    return ck


def _check_index(path: str, files: List[str], pieces: Pieces) -> None:
    """model.safetensors.index.json, when there: each tensor of its weight_map in the file it names."""
    index = os.path.join(path, INDEX)
    if not os.path.lexists(index):
        return
    st = os.lstat(index)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INDEX_BYTES:
        raise invalid(f"{index}: not a regular file of at most {MAX_INDEX_BYTES} bytes")
    try:
        with open(index, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"), object_pairs_hook=no_duplicates(index))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise invalid(f"{index}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict):
        raise invalid(f"{index}: no weight_map object")
    for name, file in wm.items():
        held = {os.path.basename(c.file) for _, c in pieces.get(name, [])}
        if not isinstance(file, str) or file not in files or file not in held:
            raise invalid(f"{index}: tensor '{name[:200]}' is mapped to {json.dumps(file)[:200]}, "
                          "a file of this folder that does not hold it")


def with_metadata(ck: Checkpoint, meta: str) -> SafetensorsCheckpoint:
    """A checked .metadata checkpoint (dcp_files) whose storage files are safetensors: its tensors
    must be exactly the files' chunks, each in the file its storage record names."""
    if ck.items:
        name = sorted(ck.items)[0]
        raise invalid(f"{meta}: entry '{name[:200]}' is a bytes item; a safetensors DCP checkpoint holds "
                      "tensors only (torch writes bytes items in front of the safetensors header)")
    files = sorted({os.path.basename(c.file) for t in ck.tensors.values() for c in t.chunks})
    pieces = _pieces(ck.path, files)
    out = SafetensorsCheckpoint(ck.path)
    for name in sorted(set(pieces) | set(ck.tensors)):
        t = ck.tensors.get(name)
        if t is None or name not in pieces:
            where = _files_of([c for _, c in pieces[name]]) if t is None else meta
            raise invalid(f"{ck.path} ({where}): tensor '{name[:200]}' is in "
                          f"{'the files but not .metadata' if t is None else '.metadata but in no file'}")
        got = _tensor(ck.path, name, pieces[name], t.shape)
        _check_same(meta, t, got)
        out.tensors[name] = got
    out.planner_data = ck.planner_data
    return out


def _check_same(meta: str, t: Tensor, got: Tensor) -> None:
    """The files' chunks of a tensor are .metadata's: same dtype, boxes and files."""
    if got.dtype != t.dtype:
        raise invalid(f"{meta}: tensor '{t.name}' is {t.dtype}; its files ({_files_of(got.chunks)}) hold "
                      f"{got.dtype}")
    want = sorted((c.offsets, c.sizes, c.file) for c in t.chunks)
    have = sorted((c.offsets, c.sizes, c.file) for c in got.chunks)
    if want != have:
        shown = [(o, s, os.path.basename(f)) for o, s, f in have[:4]]
        raise invalid(f"{meta}: tensor '{t.name}': its files hold chunks {shown} (offsets, shape, file), "
                      "not those .metadata records")
