"""One rank of a Megatron-Core torch_dist test run (test_dcp_megatron.py): joins a gloo group of
`world` processes on CPU and saves, or loads, a sharded state dict with megatron-core's own
`dist_checkpointing.save` / `load` (torch_dist, its default backend). Values depend only on the
names (`expected()`), so the test checks every tensor bit for bit.

The state dict is what a Megatron model with TP=`world` (or PP=`world` for the layer stack) saves:
a weight split along dim 0 and one along dim 1, a replicated tensor, a layer-stacked tensor (one
ShardedTensor per layer with `prepend_axis_num=1`, the layers split over the ranks, as Megatron's
`decoder.layers.*` keys are), a bf16 tensor, a ShardedObject per rank, fully_reshardable optimizer
state (`optimizer.state.exp_avg.<key>`), and common (non-sharded) entries. Mode "dp_reshardable"
saves instead the keys DistributedOptimizer writes for `distrib_optim_sharding_type='dp_reshardable'`
(megatron/core/optimizer/distrib_optimizer.py, sharded_param_state_dp_reshardable)."""

import json
import os

import torch
import torch.distributed as dist

LAYERS = 4
# name: (global shape, dtype)
TENSORS = {
    "decoder.rows.weight": ((8, 6), torch.float32),           # TP split along dim 0
    "decoder.cols.weight": ((6, 8), torch.float32),           # TP split along dim 1
    "embedding.position.weight": ((5, 4), torch.float32),     # replicated: replica_id = rank
    # layer-stacked (prepend_axis_num=1): each layer TP-split along its dim 0; each rank's layers (PP);
    # every layer on every rank, replicated (bf16)
    "decoder.layers.mlp.fc1.weight": ((LAYERS, 6, 3), torch.float32),
    "decoder.layers.mlp.fc2.weight": ((LAYERS, 3, 6), torch.float32),
    "decoder.layers.norm.weight": ((LAYERS, 6), torch.bfloat16),
    "output_layer.weight": ((4, 6), torch.bfloat16),          # bf16, TP split along dim 0
    "optimizer.state.exp_avg.decoder.rows.weight": ((8, 6), torch.float32),  # fully_reshardable
    "optimizer.state.fp32_param.output_layer.weight": ((4, 6), torch.float32),
}
COMMON = {"iteration": 100, "args": {"lr": 3e-4, "tensor_model_parallel_size": 2, "seq_length": 4096},
          "optimizer": {"param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "step": 100}],
                        "param_state_sharding_type": "fully_reshardable"}}
DP_BUCKET = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"


def expected():
    """{name: global tensor}: values from a generator seeded by the name alone."""
    out = {}
    for i, (name, (shape, dtype)) in enumerate(sorted(TENSORS.items())):
        g = torch.Generator().manual_seed(2000 + i)
        out[name] = (torch.randn(shape, generator=g) * 4).to(dtype)
    return out


def rng_object(rank):
    """The ShardedObject of rank `rank` (what Megatron saves per rank: an RNG state)."""
    return {"random_seed": 1234 + rank, "cuda_rng_state": torch.Generator().manual_seed(rank).get_state()}


def _split(t, dim, rank, world):
    return t.chunk(world, dim)[rank].clone()


def sharded_state_dict(rank, world, data=True):
    """Megatron's sharded state dict of rank `rank`; with data=False, empty tensors to load into."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    want = expected()

    def v(t):
        return t if data else torch.empty_like(t)

    def tp(name, dim):
        return ShardedTensor.from_rank_offsets(name, v(_split(want[name], dim, rank, world)), (dim, rank, world),
                                               replica_id=0)

    def layer(name, i, *rank_offsets, replica_id=0):  # one layer's ShardedTensor, the layer axis prepended
        t = want[name][i]
        for axis, at, parts in rank_offsets:  # (axes of the stacked tensor: the layer's dim d is d + 1)
            t = _split(t, axis - 1, at, parts)
        return ShardedTensor.from_rank_offsets(name, v(t.clone()), (0, i, LAYERS), *rank_offsets,
                                               replica_id=replica_id, prepend_axis_num=1)

    per = LAYERS // world  # PP: rank r holds layers [r * per, (r + 1) * per)

    rep = "embedding.position.weight"
    return {
        "model": {
            "rows": tp("decoder.rows.weight", 0),
            "cols": tp("decoder.cols.weight", 1),
            "pos": ShardedTensor.from_rank_offsets(rep, v(want[rep].clone()), replica_id=rank),
            "fc1": [layer("decoder.layers.mlp.fc1.weight", i, (1, rank, world)) for i in range(LAYERS)],
            "fc2": [layer("decoder.layers.mlp.fc2.weight", i) for i in range(rank * per, (rank + 1) * per)],
            "norm": [layer("decoder.layers.norm.weight", i, replica_id=rank) for i in range(LAYERS)],
            "out": tp("output_layer.weight", 0),
        },
        "optimizer": {
            "exp_avg": tp("optimizer.state.exp_avg.decoder.rows.weight", 0),
            "fp32": tp("optimizer.state.fp32_param.output_layer.weight", 0),
            **COMMON["optimizer"],
        },
        "rng_state": ShardedObject("rng_state", rng_object(rank) if data else None, (world,), (rank,), replica_id=0),
        "iteration": COMMON["iteration"],
        "args": COMMON["args"],
    }


def dp_reshardable_state_dict(rank, world):
    """The keys DistributedOptimizer saves with sharding_type 'dp_reshardable': each bucket a 1-D
    tensor of the flattened parameters, DP rank r holding its contiguous range, and the bucket sizes
    as a ShardedObject."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    numel, local = 24 * world, 24
    out = {"per_bucket_numel": ShardedObject("optimizer.distributed.dp_group_idx_0.per_bucket_numel",
                                             {0: {"f32": [numel]}}, (1,), (0,), replica_id=(0, 0, rank))}
    for key in ("param", "exp_avg", "exp_avg_sq"):
        data = torch.arange(rank * local, (rank + 1) * local, dtype=torch.float32)
        out[key] = ShardedTensor(f"{DP_BUCKET}.{key}", data, data.dtype, data.shape, (numel,), (rank * local,),
                                 axis_fragmentations=None, replica_id=(0, 0, 0))
    return out


def megatron_here():
    """What megatron-core 0.16.1's torch_dist save needs beyond a CPU host with gloo, stood in for,
    and nothing else (no option or strategy avoids them: torch_dist is the only sharded save
    strategy it registers). The files it writes are the same.

    * It calls CUDA whatever the tensors' device: `torch.cuda.synchronize()` after staging tensors
      to the CPU (strategies/filesystem_async.py, preload_tensors, non_blocking=True hard-wired),
      and a one-element failure flag is broadcast from `device=torch.cuda.current_device()`
      (strategies/state_dict_saver.py, save_state_dict_async_finalize). Without CUDA there is
      nothing to wait for, and the flag is a CPU tensor for gloo.
    * Each writer process logs its memory through psutil (`_process_memory`, debug logging only),
      a package megatron-core does not declare and python/requirements.lock does not hold."""
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.current_device = lambda: "cpu"
    from megatron.core.dist_checkpointing.strategies import filesystem_async
    if not filesystem_async.HAVE_PSUTIL:
        filesystem_async._process_memory = lambda: 0


def run(rank, world, init, mode, ckpt, out):
    megatron_here()
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        from megatron.core import dist_checkpointing
        rec = {"rank": rank}
        if mode == "save":
            dist_checkpointing.save(sharded_state_dict(rank, world), ckpt)
        elif mode == "dp_reshardable":
            dist_checkpointing.save(dp_reshardable_state_dict(rank, world), ckpt)
        elif mode == "load":
            rec["differ"] = differ(dist_checkpointing.load(sharded_state_dict(rank, world, data=False), ckpt),
                                   sharded_state_dict(rank, world))
        else:
            raise ValueError(mode)
        with open(os.path.join(out, f"r{rank}.json"), "w") as f:
            json.dump(rec, f)
    finally:
        dist.barrier()
        dist.destroy_process_group()


def differ(got, want, path=""):
    """The paths where a loaded (unwrapped) state dict differs from `want`'s data, bit for bit."""
    from megatron.core.dist_checkpointing.mapping import ShardedBase
    if isinstance(want, ShardedBase):
        want = want.data
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [path or "/"]
        return [p for k in want for p in differ(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return [path]
        return [p for i, (g, w) in enumerate(zip(got, want)) for p in differ(g, w, f"{path}/{i}")]
    if isinstance(want, torch.Tensor):
        same = isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape and \
            torch.equal(got.view(torch.uint8) if got.numel() else got, want.view(torch.uint8) if want.numel() else want)
        return [] if same else [path]
    return [] if got == want else [path]
