"""torchft recovery through ptcfs (docs/PYTHON.md "torchft recovery through ptcfs"): real torchft
(its lighthouse, a Manager per replica group over gloo on CPU) with ptcfs.torchft.PtcfsTransport,
two replica groups on two ptcfs nodes. One group is killed and restarted from other weights; it
heals by reading the healthy group's published state through its own node's mount, and both end
with the same parameters and optimizer state, bit for bit. The transport's fallback (the sender
dies before its state commits) is tested against the real daemons too."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from cluster_util import Cluster
from ptcfs_harness import require_binaries

torchft = pytest.importorskip("torchft")
torch = pytest.importorskip("torch")

WORKER = os.path.join(os.path.dirname(__file__), "torchft_worker.py")


def assert_same(a, b, path):
    """Bit for bit: tensors by torch.equal (dtype and shape too), the rest by ==."""
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (path, a.keys(), b.keys())
        for k in a:
            assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}/{i}")
    else:
        assert a == b, (path, a, b)


class Worker:
    """A replica group's process; its per-step lines read on a thread."""

    def __init__(self, replica, lighthouse, node, job, stop_file, out, log, dcp=False):
        self.lines, self.proc = [], None
        self.args = [sys.executable, WORKER, "--replica", str(replica), "--lighthouse", lighthouse,
                     "--mount", node.mnt, "--job", job, "--daemon", node.addr, "--secret-file", node.secret_file,
                     "--stop-file", stop_file, "--out", out] + (["--dcp"] if dcp else [])
        self.log = log

    def start(self):
        self.lines = []
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=open(self.log, "ab"), text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc, lines):
        for line in proc.stdout:
            if line.startswith("{"):
                lines.append(json.loads(line))

    def wait_for(self, pred, what, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(pred(x) for x in list(self.lines)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = open(self.log, errors="replace").read()[-4000:]
        pytest.fail(f"worker never {what} (exit {self.proc.poll()}); last lines {self.lines[-3:]}\n{tail}")

    def last_step(self):
        return self.lines[-1]["step"] if self.lines else 0


@pytest.mark.parametrize("mode", ["whole", "dcp"])
def test_a_killed_replica_group_heals_through_ptcfs(tmp_path, mode):
    require_binaries()
    from torchft.coordination import LighthouseServer
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=2000)
    stop = str(tmp_path / "stop")
    try:
        with Cluster(str(tmp_path / "c"), 2) as c:
            os.mkdir(os.path.join(c[0].mnt, "ft"))
            w = [Worker(r, lighthouse.address(), c[r], "ft", stop, str(tmp_path / f"out{r}.pt"),
                        str(tmp_path / f"w{r}.log"), dcp=mode == "dcp") for r in range(2)]
            for x in w:
                x.start()
            w[1].wait_for(lambda l: l["participants"] == 2 and l["step"] >= 3, "trained 3 steps beside group 0")
            w[1].proc.send_signal(signal.SIGKILL)
            w[1].proc.wait()
            at = w[0].last_step()
            w[0].wait_for(lambda l: l["participants"] == 1 and l["step"] >= at + 3, "trained alone")
            sent_before = c.counters(c[0])["n0"][0]
            w[1].start()  # from its own initial weights, at step 0: it must heal
            w[1].wait_for(lambda l: l["healed"] and l["participants"] == 2, "healed")
            with open(stop, "w") as f:
                f.write(str(max(w[0].last_step(), w[1].last_step()) + 3))
            for x in w:
                assert x.proc.wait(timeout=180) == 0, open(x.log, errors="replace").read()[-4000:]
            sent = c.counters(c[0])["n0"][0] - sent_before
            outs = [torch.load(str(tmp_path / f"out{r}.pt"), weights_only=False) for r in range(2)]
            assert outs[0]["step"] == outs[1]["step"]
            assert_same(outs[1]["state"], outs[0]["state"], "state")
            recv, send = outs[1]["recv"], outs[0]["send"]
            assert recv["fallback"] is False, recv
            assert re.fullmatch(r"torchft-\d+" + ("-r0" if mode == "whole" else ""), recv["step"]), recv
            assert send is not None and send["step"] == recv["step"], (send, recv)
            # What the healed group read came from node n0, through the peers' protocol.
            assert recv["bytes"] > 0 and sent >= recv["bytes"], (sent, recv)
            print(json.dumps({"recv": recv, "send": send, "n0_sent_bytes": sent}))
    finally:
        lighthouse.shutdown()


def test_recv_falls_back_to_the_newest_committed_state_when_the_sender_dies(tmp_path):
    require_binaries()
    from ptcfs.torchft import PtcfsTransport
    with Cluster(str(tmp_path / "c"), 2) as c:
        os.mkdir(os.path.join(c[0].mnt, "ft"))
        sender = PtcfsTransport(c[0].mnt, "ft", daemon=c[0].addr, secret_file=c[0].secret_file)
        older = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 4, "lr": [1e-3, float("inf")],
                 "t": (1, "a", None), "s": torch.tensor(5.0), "b": torch.ones(2, dtype=torch.bfloat16),
                 7: {"nested": True}}
        sender.send_checkpoint([1], 4, older, timedelta(seconds=60))
        assert sender.last_send["step"] == "torchft-4-r0" and sender.last_send["kept"] is False
        sender.send_checkpoint([2], 4, older, timedelta(seconds=60))  # another group behind: the same state
        assert sender.last_send == {"step": "torchft-4-r0", "bytes": 0, "seconds": 0.0, "kept": True}
        # Step 9's sender dies after its ptc.json, before its tensors: the step never commits.
        sd = os.path.join(c[0].mnt, "ft", "torchft-9-r0")
        os.mkdir(sd)
        from ptcfs.torchft import state_to_step
        ptc, _ = state_to_step({"w": torch.zeros(3, 4)}, "ft/torchft-9-r0")
        with open(os.path.join(sd, "ptc.json"), "w") as f:
            json.dump(ptc, f)
        receiver = PtcfsTransport(c[1].mnt, "ft", daemon=c[1].addr, secret_file=c[1].secret_file)
        got = receiver.recv_checkpoint(0, sender.metadata(), 9, timedelta(seconds=2))
        assert receiver.last_recv["fallback"] is True and receiver.last_recv["step"] == "torchft-4-r0"
        # (pending on n0; n1, the reader, does not list another node's pending step)
        assert receiver.last_recv["why"] == "ft/torchft-9-r0 is still not listed after 2 s", receiver.last_recv
        assert set(got) == set(older)
        for k in ("w", "s", "b"):
            assert got[k].dtype == older[k].dtype and torch.equal(got[k], older[k]), k
        assert got["step"] == 4 and got["lr"] == [1e-3, float("inf")] and got["t"] == (1, "a", None)
        assert got[7] == {"nested": True}
        # Without fallback the wait's error is raised; what a state cannot hold is refused up front.
        strict = PtcfsTransport(c[1].mnt, "ft", daemon=c[1].addr, secret_file=c[1].secret_file, fallback=False)
        from ptcfs import Error
        with pytest.raises(Error) as e:
            strict.recv_checkpoint(0, sender.metadata(), 9, timedelta(seconds=1))
        assert e.value.code == "deadline_exceeded"
        with pytest.raises(Error) as e:
            sender.send_checkpoint([1], 10, {"f": object()}, timedelta(seconds=5))
        assert e.value.message == ("ft/torchft-10-r0: the state dict holds a object at f (ptcfs stores tensors "
                                                                 "and JSON values)")
        assert "torchft-10-r0" not in os.listdir(os.path.join(c[0].mnt, "ft"))
        # A step of the prefix that is not a state (its structure names a tensor it lacks) is refused.
        bad = os.path.join(c[0].mnt, "ft", "torchft-2-r0")
        os.mkdir(bad)
        ptc, arrays = state_to_step({"w": torch.zeros(2)}, "ft/torchft-2-r0")
        import numpy as np
        text = json.dumps({"d": [["s", "w", {"t": "gone"}]]}).encode()
        arrays["__torchft__/state"] = np.frombuffer(text, dtype=np.uint8)
        ptc["tensors"]["__torchft__/state"]["shape"] = [len(text)]
        import ptcfs
        ptcfs.save_ptc(bad, ptc)
        ptcfs.save_shard(bad, ptc, 0, 0, arrays)
        ptcfs.wait_committed("ft", "torchft-2-r0", daemon=c[0].addr, secret_file=c[0].secret_file)
        with pytest.raises(Error) as e:
            receiver.recv_checkpoint(0, sender.metadata(), 2, timedelta(seconds=30))
        assert e.value.code == "invalid_argument" and "does not describe this step's tensors" in e.value.message


def test_dcp_mode_heals_a_group_sharded_otherwise_reading_only_its_shards(tmp_path):
    """A 2-rank group publishes DTensors sharded by rows (as FSDP2); a 2-rank group sharded by
    columns heals from it, each rank loading its own columns, bit for bit, through its own node."""
    require_binaries()
    from ptcfs_harness import free_port
    worker = os.path.join(os.path.dirname(__file__), "torchft_layout_worker.py")

    def group(role, node):
        port = free_port()
        procs = [subprocess.Popen([sys.executable, worker, role, str(r), "2", str(port), node.mnt, "ft", node.addr,
                                   node.secret_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-4000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs

    with Cluster(str(tmp_path / "c"), 2) as c:
        os.mkdir(os.path.join(c[0].mnt, "ft"))
        group("send", c[0])
        before = c.counters(c[0])["n0"][0]
        got = group("recv", c[1])
        sent = c.counters(c[0])["n0"][0] - before
        assert [g["wrong"] for g in got] == [[], []], got
        assert all(g["placements"] == "(Shard(dim=1),)" for g in got), got
        # Each rank holds half of each matrix and the whole norm: 2 * 4 * (24 + 30) / 2 + 4 * 6 bytes.
        assert [g["bytes"] for g in got] == [4 * (24 + 30) + 24] * 2, got
        print(json.dumps({"recv": got, "n0_sent_bytes": sent}))
