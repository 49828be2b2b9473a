"""One replica group of a torchft job (one rank, CPU, gloo) whose state heals through ptcfs
(tests/integration/test_torchft.py). Trains a small model with torchft's fault-tolerant allreduce
of each gradient and its optimizer wrapper; every step's inputs come from the step number, so two groups that agree on the state
agree on every update. Prints one JSON line per step ({"step", "participants", "healed"}), and at
the end writes its state dict (torch.save) to --out with the transport's last send and receive.

    python torchft_worker.py --replica 0 --lighthouse ADDR --mount MNT --job J --daemon HOST:PORT
        --secret-file F --stop-file F --out F [--pace 0.05] [--dcp]
"""

import argparse
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchft import Manager, ProcessGroupGloo
from torchft.optim import OptimizerWrapper

from ptcfs.torchft import PtcfsTransport


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--lighthouse", "--mount", "--job", "--daemon", "--secret-file", "--stop-file", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--replica", type=int, required=True)
    ap.add_argument("--pace", type=float, default=0.05)
    ap.add_argument("--dcp", action="store_true", help="the transport's DCP mode (a template state dict)")
    a = ap.parse_args()

    torch.manual_seed(100 + a.replica)  # the groups start apart: only a heal makes them agree
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)

    if a.dcp:  # as TorchTitan does: DCP's state dict functions (the optimizer's state made up front)
        from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                             set_model_state_dict, set_optimizer_state_dict)

        def state_dict():
            return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, inner)}

        def load_state_dict(sd):
            set_model_state_dict(model, sd["model"])
            set_optimizer_state_dict(model, inner, sd["optim"])
    else:
        def state_dict():
            return {"model": model.state_dict(), "optim": inner.state_dict()}

        def load_state_dict(sd):
            model.load_state_dict(sd["model"])
            inner.load_state_dict(sd["optim"])

    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    template = (lambda: {"user": {"default": state_dict()}, "torchft": {"step": 0, "batches_committed": 0}}) \
        if a.dcp else None
    transport = PtcfsTransport(a.mount, a.job, daemon=a.daemon, secret_file=a.secret_file, template=template)
    manager = Manager(pg=ProcessGroupGloo(), min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=str(a.replica), store_addr="localhost",
                      store_port=store.port, rank=0, world_size=1, lighthouse_addr=a.lighthouse,
                      checkpoint_transport=transport, timeout=timedelta(seconds=60),
                      quorum_timeout=timedelta(seconds=60), use_async_quorum=False)
    # Gradients averaged with manager.allreduce, each wait catching a peer's death (torchft.ddp's
    # comm hook asserts when an allreduce fails: a group killed mid-allreduce crashed the healthy one).
    opt = OptimizerWrapper(manager, inner)
    healed = False
    try:
        while True:
            step = manager.current_step()
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            for w in [manager.allreduce(p.grad) for p in model.parameters()]:
                w.wait()
            opt.step()
            healed = healed or transport.last_recv is not None
            print(json.dumps({"step": manager.current_step(), "participants": manager.num_participants(),
                              "healed": healed}), flush=True)
            if os.path.exists(a.stop_file):
                with open(a.stop_file) as f:
                    if manager.current_step() >= int(f.read().strip() or 0):
                        break
            time.sleep(a.pace)
        torch.save({"state": state_dict(), "step": manager.current_step(), "send": transport.last_send,
                    "recv": transport.last_recv}, a.out)
    finally:
        manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # its output is written: out without the teardown of torchft's and gloo's threads
