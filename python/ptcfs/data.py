"""A data loader over a ptcfs dataset whose state survives any change of dp and of the global
batch (docs/PYTHON.md "A loader that survives dp and batch changes"; the order is
docs/FORMATS.md "Datasets").

``Loader(job, name, dp_rank, dp, global_batch)`` yields this DP rank's part of every global
batch: ``global_batch / dp`` samples, read from the rank's view ``MNT/<job>/data/<name>/dp{d}.*``
(JSONL lines, parsed; Megatron sequences, as numpy arrays). It is a ``Stateful`` for
``torch.distributed.checkpoint``: ``state_dict()`` is the same on every rank (the dataset's
seed and size, and where the epoch is: epoch, samples consumed, batch offset, global batch),
so DCP stores it once as bytes items beside the model. ``load_state_dict`` takes such a state
saved at any dp and any global batch; the next batch is then the next one of the documented
order, cut for this run's dp and batch (the samples read stay read, nothing is repeated or
skipped within the epoch).

The daemon is told: ``state_dict()`` records the position on the daemon (the leader rank
only), so the daemon's recorded progress and a checkpoint's loader state agree; and the first
batch after ``load_state_dict`` (or at the start) makes the daemon's position the loader's,
split for this run's dp and global batch, in one version when it can (``dataset.progress`` with
``dp``/``global_batch``), else setting it exactly first (``batch_offset``: a run back at an older
checkpoint). Every rank of the job must take batches in step: the leader changes the
daemon's position at the start and at each epoch's end, and the others wait for it at a
barrier (``torch.distributed.barrier`` when it is initialized; else give ``barrier``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from .control import Client, connect
from .elastic import default_mount, record_dataset_progress
from .errors import Error, invalid

__all__ = ["Loader", "STATE_VERSION"]

STATE_VERSION = 1
_KEYS = ("version", "dataset", "seed", "num_samples", "epoch", "consumed", "batch_offset", "global_batch")

_MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
                    8: np.uint16}


def _default_barrier() -> Callable[[], None]:
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.barrier
    except ImportError:
        pass
    return lambda: None


def _default_leader(dp_rank: int) -> bool:
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank() == 0
    except ImportError:
        pass
    return dp_rank == 0


class Loader:
    """DP rank ``dp_rank`` of ``dp`` reading dataset ``name`` of ``job`` in global batches of
    ``global_batch`` (default: the dataset's). ``client``: a control Client (default: one
    connected to ``daemon``, else $PTCFS_DAEMON). ``mount``: default $PTCFS_MOUNT, else the
    daemon's. ``leader``: whether this process tells the daemon (default: global rank 0 when
    torch.distributed is initialized, else dp rank 0); exactly one process of the job should.
    ``barrier``: waits for every rank (default: torch.distributed.barrier, when initialized).
    ``parse``: what a JSONL line becomes (default json.loads; None: the line's bytes)."""

    def __init__(self, job: str, name: str, dp_rank: int, dp: int, global_batch: Optional[int] = None,
                 client: Optional[Client] = None, daemon: Optional[str] = None, mount: Optional[str] = None,
                 leader: Optional[bool] = None, barrier: Optional[Callable[[], None]] = None,
                 parse: Optional[Callable[[bytes], Any]] = json.loads):
        if dp < 1 or not 0 <= dp_rank < dp:
            raise invalid(f"dp rank {dp_rank} of dp {dp}: want 0 <= dp_rank < dp")
        self.job, self.name, self.dp_rank, self.dp = job, name, dp_rank, dp
        self._client = client or connect(daemon)
        self.mount = mount or default_mount(self._client)
        self.leader = _default_leader(dp_rank) if leader is None else leader
        self._barrier = barrier or _default_barrier()
        self._parse = parse
        st = self._read_state()
        self.seed, self.num_samples, self.format = st["seed"], st["num_samples"], st["format"]
        self.global_batch = int(global_batch or st["global_batch"])
        if self.global_batch < 1 or self.global_batch % dp:
            raise invalid(f"dp {dp} does not divide the global batch {self.global_batch}")
        # Where the next batch starts (of the current epoch), at which batch size the epoch's
        # batches run from batch_offset: the daemon's now, until a state is loaded.
        self._pos = {"epoch": st["epoch"], "consumed": st["consumed"], "batch_offset": st.get("batch_offset", 0),
                     "global_batch": st["global_batch"]}
        self._view = None  # the open rank view, once in step with the daemon

    # -- Stateful --------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is: the same on every rank. The leader also records it on the
        daemon (so the daemon's progress is what a checkpoint taken now holds)."""
        if self.leader and self._view is not None:
            self._record(self._pos["epoch"], self._pos["consumed"])
        return {"version": STATE_VERSION, "dataset": f"{self.job}/{self.name}", "seed": self.seed,
                "num_samples": self.num_samples, **{k: int(v) for k, v in self._pos.items()}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state of ``state_dict()`` saved at any dp and global batch."""
        missing = [k for k in _KEYS if k not in state]
        if missing:
            raise invalid(f"loader state of {self.job}/{self.name} lacks {', '.join(missing)}")
        st = {k: state[k] for k in _KEYS}
        if st["version"] != STATE_VERSION:
            raise invalid(f"loader state version {st['version']}, this ptcfs reads {STATE_VERSION}")
        if st["dataset"] != f"{self.job}/{self.name}" or st["seed"] != self.seed or \
                st["num_samples"] != self.num_samples:
            raise invalid(f"the loader state is of dataset {st['dataset']} (seed {st['seed']}, "
                          f"{st['num_samples']} samples), not {self.job}/{self.name} (seed {self.seed}, "
                          f"{self.num_samples} samples)")
        o, c, b = int(st["batch_offset"]), int(st["consumed"]), int(st["global_batch"])
        if b < 1 or o > c or (c - o) % b:
            raise invalid(f"loader state: consumed {c} is not batch_offset {o} plus a multiple of {b}")
        self._close()
        self._pos = {"epoch": int(st["epoch"]), "consumed": c, "batch_offset": o, "global_batch": b}

    # -- Batches ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[List[Any]]:
        return self

    def __next__(self) -> List[Any]:
        """This rank's global_batch / dp samples of the next global batch (crossing into the
        next epoch at the end of one: every rank together)."""
        if self._view is None:
            self._start()
        if self._left == 0:  # the epoch is read to its end: the next one, every rank together
            self._close()
            self._pos = {"epoch": self._pos["epoch"] + 1, "consumed": 0, "batch_offset": 0,
                         "global_batch": self.global_batch}
            self._start()
        chunk = self.global_batch // self.dp
        out = self._view.take(chunk)
        self._left -= 1
        self._pos["consumed"] += self.global_batch
        return out

    def close(self) -> None:
        self._close()

    # -- Internals -------------------------------------------------------------------------

    def _dir(self) -> str:
        return os.path.join(self.mount, self.job, "data", self.name)

    def _read_state(self) -> dict:
        path = os.path.join(self._dir(), "state.json")
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            raise Error("not_found", f"no dataset {self.job}/{self.name} in the mount ({path})") from None

    def _record(self, epoch: int, consumed: int, **kw) -> dict:
        return record_dataset_progress(self._client, self.job, self.name, consumed, epoch, **kw)

    def _start(self) -> None:
        """Brings the daemon to this loader's position, split for this run (the leader), waits
        for every rank, then opens this rank's view and checks it starts there."""
        p = self._pos
        if self.leader:
            st = self._read_state()
            same_run = (st["epoch"], st["global_batch"], st.get("batch_offset", 0)) == \
                (p["epoch"], p["global_batch"], p["batch_offset"])
            if not same_run or st["consumed"] != p["consumed"]:
                if not same_run:  # set exactly, at the state's own batch (dp 1 divides any)
                    self._record(p["epoch"], p["consumed"], dp=1, global_batch=p["global_batch"],
                                 batch_offset=p["batch_offset"])
                self._record(p["epoch"], p["consumed"], dp=self.dp, global_batch=self.global_batch)
            elif st["dp"] != self.dp or st["global_batch"] != self.global_batch:
                self._record(p["epoch"], p["consumed"], dp=self.dp, global_batch=self.global_batch)
        self._barrier()
        st = self._read_state()
        if st["dp"] != self.dp or st["global_batch"] != self.global_batch:
            raise Error("failed_precondition",
                        f"dataset {self.job}/{self.name} is split for dp {st['dp']} and batch "
                        f"{st['global_batch']}, this rank reads dp {self.dp} and batch {self.global_batch} "
                        f"(is exactly one rank the leader?)")
        # A re-batch whose rest of the epoch held less than one batch moved to the next epoch.
        self._pos = {"epoch": st["epoch"], "consumed": st["consumed"], "batch_offset": st.get("batch_offset", 0),
                     "global_batch": st["global_batch"]}
        self._left = (st["samples_per_epoch"] - st["consumed"]) // st["global_batch"]
        base = os.path.join(self._dir(), f"dp{self.dp_rank}")
        self._view = _MegatronView(base) if st["format"] == "megatron" else _JsonlView(base + ".jsonl", self._parse)

    def _close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


class _JsonlView:
    """A rank's JSONL view, read front to back (an open view keeps its version's samples)."""

    def __init__(self, path: str, parse):
        self.path, self._f, self._parse = path, open(path, "rb"), parse

    def take(self, n: int) -> List[Any]:
        out = []
        for _ in range(n):
            line = self._f.readline()
            if not line:
                raise Error("data_loss", f"{self.path} ended before the batch did")
            line = line[:-1] if line.endswith(b"\n") else line
            out.append(self._parse(line) if self._parse else line)
        return out

    def close(self) -> None:
        self._f.close()


class _MegatronView:
    """A rank's Megatron view (dp{d}.idx and .bin: docs/FORMATS.md "Dataset views")."""

    def __init__(self, base: str):
        with open(base + ".idx", "rb") as f:
            head = f.read(34)
            if len(head) < 34 or head[:9] != b"MMIDIDX\0\0":
                raise Error("data_loss", f"{base}.idx is not an MMIDIDX index")
            dtype = _MEGATRON_DTYPES.get(head[17])
            n = int.from_bytes(head[18:26], "little")
            if dtype is None:
                raise Error("data_loss", f"{base}.idx: dtype code {head[17]}")
            self._lengths = np.frombuffer(f.read(4 * n), dtype="<i4")
            self._pointers = np.frombuffer(f.read(8 * n), dtype="<i8")
        self._dtype = np.dtype(dtype)
        self._bin = open(base + ".bin", "rb")
        self._next = 0
        self.path = base

    def take(self, n: int) -> List[np.ndarray]:
        if self._next + n > len(self._lengths):
            raise Error("data_loss", f"{self.path} ended before the batch did")
        out = []
        for i in range(self._next, self._next + n):
            count = int(self._lengths[i])
            self._bin.seek(int(self._pointers[i]))
            out.append(np.frombuffer(self._bin.read(count * self._dtype.itemsize), dtype=self._dtype).copy())
        self._next += n
        return out

    def close(self) -> None:
        self._bin.close()
