"""Helpers for tests with several daemons on loopback forming one cluster."""

import json
import os
import shutil
from typing import List, Optional

from ptcfs_harness import Daemon, free_port

SECRET = "a cluster secret of some length\n"


def write_secret(root: str) -> str:
    """root/secret holding the test cluster's secret; its path."""
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "secret")
    with open(path, "w") as f:
        f.write(SECRET)
    return path


class Cluster:
    """n daemons (n0, n1, ...) on loopback, each with its own port, data dir and mount."""

    def __init__(self, root: str, n: int, gpus: int = 2, extra_flags: Optional[List[str]] = None):
        self.root = root
        self.ports = [free_port() for _ in range(n)]
        self.secret = write_secret(root)
        self.config = os.path.join(root, "cluster.json")
        with open(self.config, "w") as f:
            json.dump({"nodes": [{"id": f"n{i}", "addr": f"127.0.0.1:{p}", "gpus": gpus}
                                 for i, p in enumerate(self.ports)],
                       "secret_file": self.secret}, f)
        self.nodes = [Daemon(os.path.join(root, f"n{i}"), name=f"n{i}", port=self.ports[i], secret_file=self.secret,
                             flags=["--cluster", self.config, "--node", f"n{i}"], extra_flags=extra_flags)
                      for i in range(n)]

    def __enter__(self):
        try:
            for d in self.nodes:
                d.start()
        except BaseException:  # pytest.fail is not an Exception: stop the nodes that did start
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for d in self.nodes:
            d.stop(cleanup_mount=True)

    def __getitem__(self, i: int) -> Daemon:
        return self.nodes[i]

    def counters(self, via: Daemon) -> dict:
        """{node id: (bytes_sent, bytes_received)} from `ptcfs status --json`."""
        st = via.cli_json("status", "--json")
        return {n["id"]: (n["bytes_sent"], n["bytes_received"]) for n in st["cluster"]["nodes"] if n["up"]}


def rank_nodes(tp: int, pp: int, dp: int, gpus: List[int]) -> dict:
    """The oracle for placement: {(t, p): sorted node indices holding shard tp{t}-pp{p}}."""
    owner = []
    for n, g in enumerate(gpus):
        owner += [n] * g
    held = {}
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                held.setdefault((t, p), set()).add(owner[t + tp * (d + dp * p)])
    return {k: sorted(v) for k, v in held.items()}


def element_ids(ptc: dict) -> dict:
    """Every tensor as int64 ids 1..N (0 is left for padding), for placement oracles."""
    import numpy as np
    out = {}
    for name, spec in ptc["tensors"].items():
        n = 1
        for s in spec["shape"]:
            n *= s
        out[name] = np.arange(1, n + 1, dtype=np.int64).reshape(spec["shape"])
    return out


def min_bytes_oracle(ptc: dict, frm, frm_gpus, to, to_gpus) -> dict:
    """{node index: bytes it must receive}: the elements of its new shards that none of its old
    shards holds, each counted once per node. frm/to are (tp, pp, dp); *_gpus the GPUs of the
    nodes the ranks are placed on, in order (a node with 0 takes no rank)."""
    import ptcgen
    from repartition_util import retarget
    ids = element_ids(ptc)

    import numpy as np

    def held(par, gpus):
        # {node: {tensor: mask over ids 0..N}} (id 0, padding, is never counted)
        tp, pp, dp = par
        slices = ptcgen.shard_slices(retarget(ptc, par), tensors=ids)
        per_node = {}
        for (t, p), nodes in rank_nodes(tp, pp, dp, gpus).items():
            for n in nodes:
                for name, arr in slices[(t, p)].items():
                    mask = per_node.setdefault(n, {}).setdefault(name, np.zeros(ids[name].size + 1, dtype=bool))
                    mask[arr.ravel()] = True
        return per_node

    have, need = held(frm, frm_gpus), held(to, to_gpus)
    out = {}
    for n, tensors in need.items():
        total = 0
        for name, mask in tensors.items():
            size = ptcgen.DTYPES[ptc["tensors"][name]["dtype"]].itemsize
            old = have.get(n, {}).get(name)
            missing = mask[1:] if old is None else (mask[1:] & ~old[1:])
            total += int(missing.sum()) * size
        out[n] = total
    return out


def per_node_dirs(root: str, ck, tp: int, pp: int, dp: int, gpus) -> str:
    """ckpt-n{i}/: ptc.json plus only the rank files placed on node i; returns the '{node}' pattern."""
    for i in range(len(gpus)):
        d = os.path.join(root, f"ckpt-n{i}")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(ck.path, "ptc.json"), d)
    for (t, p), nodes in rank_nodes(tp, pp, dp, gpus).items():
        for n in nodes:
            shutil.copy(ck.shard_path(t, p), os.path.join(root, f"ckpt-n{n}"))
    return os.path.join(root, "ckpt-{node}")
