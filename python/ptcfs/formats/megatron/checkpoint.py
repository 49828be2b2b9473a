"""Reading Megatron-LM checkpoints (torch files) as a PTC and its global tensors.

A Megatron-LM save directory holds ``latest_checkpointed_iteration.txt`` and one folder per
saved iteration, ``iter_0001000/``, with one torch file per model-parallel rank:
``mp_rank_TT/model_optim_rng.pt`` (pipeline size 1) or ``mp_rank_TT_PPP/model_optim_rng.pt``.
Each file is a dict: ``model`` (or ``model0``, ``model1``, ... with virtual pipeline
stages), the rank's parameters under their local names (layer numbers count from 0 on every
stage and chunk); ``optimizer``; ``args``; ``iteration``; RNG and scheduler states.

What is read: every parameter, under its state-dict name joined with dots and its layer
number made global (``language_model.encoder.layers.7.mlp.dense_4h_to_h.weight``;
Megatron Core: ``decoder.layers.7.mlp.linear_fc2.weight``), gathered over tensor-parallel
ranks by the rules of :mod:`ptcfs.megatron`; and, for the non-distributed optimizer, Adam's
``exp_avg`` / ``exp_avg_sq`` and the fp32 master weights of each parameter
(``optimizer.exp_avg.<name>``, ``optimizer.exp_avg_sq.<name>``, ``optimizer.fp32_param.<name>``)
and the step (``optimizer.step``). What is not read is listed in ``not_imported``: RNG
states, the LR scheduler, the loss scaler, optimizer hyperparameters, the run's args.
Files are loaded by :mod:`ptcfs.torch_pickle`, which never runs code from them nor trusts their
sizes; every parameter's global shape is checked against the run's args (:mod:`ptcfs.megatron_shapes`).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import shapes as megatron_shapes
from ... import ptc as _ptc
from .. import torch_pickle
from ...dtypes import safetensors_dtype_of, torch_to_numpy
from ...errors import Error, invalid
from . import OPTIMIZER_PREFIXES, _rule, infer_megatron

RANK_FILE = "model_optim_rng.pt"
TRACKER = "latest_checkpointed_iteration.txt"
FP32_PREFIX = "optimizer.fp32_param."
STEP_NAME = "optimizer.step"
_ITER = re.compile(r"^iter_(\d+)$")
_RANK = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?$")
_LOCAL_LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")
_SKIPPED_SUFFIXES = ("._extra_state", ".inv_freq")  # TE's extra state; rotary buffers (derived)


@dataclass
class MegatronCheckpoint:
    path: str                      # the iteration folder
    iteration: Optional[int]
    tp: int
    pp: int
    vp: int                        # model chunks per stage (1 without virtual pipeline)
    ptc: dict                      # the PTC, parallelism (tp, pp, 1)
    tensors: Dict[str, np.ndarray]  # global logical tensors (BF16 as uint16 bits)
    not_imported: List[str] = field(default_factory=list)
    optimizer: bool = False


# --------------------------------------------------------------------------------------
# the folders

def iteration_dir(path: str, iteration: Optional[int] = None) -> Tuple[str, Optional[int]]:
    """(iteration folder, iteration) of a save directory (its tracker file, or `iteration`)
    or of an iteration folder itself."""
    if not os.path.isdir(path):
        raise Error("not_found", f"{path}: no such directory")
    name = os.path.basename(os.path.normpath(path))
    if _ITER.match(name) or name == "release":
        if iteration is not None and _ITER.match(name) and int(_ITER.match(name).group(1)) != iteration:
            raise invalid(f"{path} is iteration {int(_ITER.match(name).group(1))}, not {iteration}")
        return path, int(_ITER.match(name).group(1)) if _ITER.match(name) else None
    if iteration is None:
        tracker = os.path.join(path, TRACKER)
        try:
            with open(tracker) as f:
                text = f.read().strip()
        except FileNotFoundError:
            found = sorted(n for n in os.listdir(path) if _ITER.match(n))
            raise invalid(f"{path}: no {TRACKER} and no --iteration"
                          + (f" (iterations here: {', '.join(found[-5:])})" if found else
                             " (not a Megatron-LM save directory: no iter_* folders either)")) from None
        if text == "release":
            return os.path.join(path, "release"), None
        if not text.isdigit():
            raise invalid(f"{tracker}: '{text[:40]}' is neither an iteration number nor 'release'")
        iteration = int(text)
    d = os.path.join(path, f"iter_{iteration:07d}")
    if not os.path.isdir(d):
        raise Error("not_found", f"{d}: no such iteration folder")
    return d, iteration


def rank_files(iter_dir: str) -> Dict[Tuple[int, int], str]:
    """{(tp rank, pp rank): model_optim_rng.pt}; the grid must be complete."""
    files: Dict[Tuple[int, int], str] = {}
    for name in sorted(os.listdir(iter_dir)):
        m = _RANK.match(name)
        if not m:
            continue
        if m.group(3) is not None:
            raise invalid(f"{iter_dir}/{name}: expert-parallel checkpoints (mp_rank_TT_PPP_EEE) are not covered")
        f = os.path.join(iter_dir, name, RANK_FILE)
        if not os.path.isfile(f):
            raise Error("not_found", f"{f}: missing (every mp_rank_* folder holds one)")
        files[(int(m.group(1)), int(m.group(2) or 0))] = f
    if not files:
        raise invalid(f"{iter_dir}: no mp_rank_* folders (not a Megatron-LM iteration folder)")
    tp = 1 + max(t for t, _ in files)
    pp = 1 + max(p for _, p in files)
    missing = [f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
               for t in range(tp) for p in range(pp) if (t, p) not in files]
    if missing:
        raise Error("not_found", f"{iter_dir}: a {tp} x {pp} grid of ranks lacks {', '.join(missing)}")
    return files


# --------------------------------------------------------------------------------------
# one rank file

def _arg(args: Any, name: str, default: Any = None) -> Any:
    return getattr(args, name, default) if args is not None else default


_MAX_NESTING = 32  # Megatron's state dicts nest 5 deep; a file may nest a million (a pickle is a stack machine)


def _flatten(obj: Any, prefix: str, out: Dict[str, Any], skipped: List[str], where: str, depth: int = 0) -> None:
    if isinstance(obj, Mapping):
        if depth == _MAX_NESTING:
            raise invalid(f"{where}: model entry '{prefix[:200]}...' nests more than {_MAX_NESTING} state dicts deep")
        for k, v in obj.items():
            _flatten(v, f"{prefix}{k}.", out, skipped, where, depth + 1)
        return
    name = prefix[:-1]
    if name.endswith("._extra_state"):  # Transformer Engine's (an io.BytesIO: a placeholder here)
        return
    if torch_pickle.refused(obj) or (hasattr(obj, "shape") and not torch_pickle.is_tensor(obj)):
        raise invalid(f"{where}: model entry '{name}' is {torch_pickle.describe(obj)}, not a tensor")
    if torch_pickle.is_tensor(obj) and not name.endswith(_SKIPPED_SUFFIXES):
        out[name] = obj
    elif obj is not None:
        skipped.append(name)


def _load_rank(path: str) -> dict:
    try:
        sd = torch_pickle.load(path)
    except Error:
        raise
    except Exception as e:  # a damaged zip, a pickle of something else
        raise invalid(f"{path}: not a torch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(sd, Mapping) or not ("model" in sd or "model0" in sd):
        keys = sorted(map(str, sd))[:8] if isinstance(sd, Mapping) else type(sd).__name__
        raise invalid(f"{path}: not a Megatron-LM checkpoint (no 'model' state dict; it holds {keys})")
    args = sd.get("args")
    if args is not None and not isinstance(args, argparse.Namespace):
        raise invalid(f"{path}: 'args' is {torch_pickle.describe(args)}, not the run's argparse.Namespace")
    return sd


def _chunks(sd: Mapping, path: str) -> List[Mapping]:
    if "model" in sd:
        keys = ["model"]
    else:
        keys = []
        while f"model{len(keys)}" in sd:
            keys.append(f"model{len(keys)}")
    for k in keys:
        if not isinstance(sd[k], Mapping):
            raise invalid(f"{path}: '{k}' is {torch_pickle.describe(sd[k])}, not a state dict")
    return [sd[k] for k in keys]


def _layer_count(names: List[str], where: str) -> int:
    local = sorted({int(m.group(2)) for n in names for m in [_LOCAL_LAYER.search(n)] if m})
    if local != list(range(len(local))):
        raise invalid(f"{where}: local layer numbers {local[:8]} do not run 0..n-1")
    return len(local)


def _globalize(name: str, offset: int) -> str:
    return _LOCAL_LAYER.sub(lambda m: f"{m.group(1)}layers.{int(m.group(2)) + offset}.", name, count=1)


def _as_array(x: Any, where: str) -> Tuple[np.ndarray, str]:
    if not torch_pickle.is_tensor(x):
        raise invalid(f"{where} is {torch_pickle.describe(x)}, not a tensor")
    a, dt = torch_to_numpy(x)
    dt = dt or safetensors_dtype_of(a)
    if dt is None:
        raise invalid(f"{where}: tensor of dtype {x.dtype} has no safetensors dtype")
    return a, dt


# --------------------------------------------------------------------------------------
# the optimizer (Megatron's non-distributed optimizer: torch Adam state + fp32 master copies)

def _no_wd(name: str, shape: Tuple[int, ...]) -> bool:
    # Megatron's default split of parameters into weight-decay groups.
    return name.endswith(".bias") or len(shape) == 1


def _optimizer_of(sd: Mapping, params: List[Tuple[str, Any]], where: str) -> Dict[str, Any]:
    """{ptc name: tensor} of the optimizer state of one rank; `params` is the rank's
    parameters in model order as (global name, tensor)."""
    opt = sd.get("optimizer")
    if not isinstance(opt, Mapping):
        return {}
    inner, masters = (opt["optimizer"], opt.get("fp32_from_fp16_params")) if "optimizer" in opt else (opt, None)
    if not isinstance(inner, Mapping) or "param_groups" not in inner or "state" not in inner:
        raise invalid(f"{where}: optimizer state of an unknown layout (keys {sorted(map(str, opt))[:6]}); "
                      "pass --model-only to import the model alone")
    groups = inner["param_groups"]

    def no_wd_group(g: Mapping) -> bool:
        return float(g.get("wd_mult", 1.0 if g.get("weight_decay", 0.0) else 0.0)) == 0.0

    kinds = [no_wd_group(g) for g in groups]
    if len(set(kinds)) != len(kinds):
        raise invalid(f"{where}: {len(groups)} optimizer param groups cannot be matched to parameters "
                      "(more than one with the same weight decay); pass --model-only to import the model alone")
    out: Dict[str, Any] = {}
    steps = set()
    for g, (group, kind) in enumerate(zip(groups, kinds)):
        members = [(n, p) for n, p in params if _no_wd(n, tuple(p.shape)) == kind]
        ids = list(group["params"])
        if len(ids) != len(members):
            raise invalid(f"{where}: optimizer param group {g} has {len(ids)} parameters, the model "
                          f"{len(members)} of its kind; pass --model-only to import the model alone")
        for k, (idx, (name, p)) in enumerate(zip(ids, members)):
            state = inner["state"].get(idx, {})
            for key, prefix in (("exp_avg", OPTIMIZER_PREFIXES[0]), ("exp_avg_sq", OPTIMIZER_PREFIXES[1])):
                if key in state:
                    if tuple(state[key].shape) != tuple(p.shape):
                        raise invalid(f"{where}: optimizer {key} of parameter {idx} has shape "
                                      f"{list(state[key].shape)}, parameter '{name}' {list(p.shape)}")
                    out[prefix + name] = state[key]
            if "step" in state:
                steps.add(int(state["step"]))
            if masters is not None:
                m = masters[g][k]
                if tuple(m.shape) != tuple(p.shape):
                    raise invalid(f"{where}: fp32 master copy {g}.{k} has shape {list(m.shape)}, "
                                  f"parameter '{name}' {list(p.shape)}")
                out[FP32_PREFIX + name] = m
        if "step" in group:
            steps.add(int(group["step"]))
    if len(steps) > 1:
        raise invalid(f"{where}: optimizer steps differ between parameters ({sorted(steps)[:4]})")
    if steps:
        out[STEP_NAME] = np.array([steps.pop()], dtype=np.int64)
    return out


# --------------------------------------------------------------------------------------
# the whole checkpoint

@dataclass
class _Ranks:
    """What the rank files hold, read once: per (tp, pp) rank its chunks' parameters under
    their local names, and its whole state dict (optimizer and extras)."""
    per_rank: Dict[Tuple[int, int], List[Dict[str, Any]]]
    extras: Dict[Tuple[int, int], Dict[str, Any]]
    counts: Dict[Tuple[int, int], int]   # (chunk, stage) -> layers
    args: Any                            # the run's argparse.Namespace (the last file's), or None
    not_imported: set
    vp: int


def _refuse_distributed_optimizer(iter_dir: str, files: Dict[Tuple[int, int], str]) -> None:
    dist = [os.path.join(os.path.dirname(f), "distrib_optim.pt") for f in files.values()]
    if any(os.path.exists(d) for d in dist):
        raise invalid(f"{iter_dir}: the distributed optimizer's state (distrib_optim.pt) is not covered; "
                      "pass --model-only to import the model alone")


def _read_ranks(files: Dict[Tuple[int, int], str], iter_dir: str,
                progress: Optional[Callable[[str], None]]) -> _Ranks:
    """Loads every rank file, stage by stage, and checks that they agree on the model chunks
    and on the layers of each (chunk, stage)."""
    per_rank: Dict[Tuple[int, int], List[Dict[str, Any]]] = {}
    extras: Dict[Tuple[int, int], Dict[str, Any]] = {}
    counts: Dict[Tuple[int, int], int] = {}
    args = None
    not_imported: set = set()
    vp = None
    for n, ((t, p), f) in enumerate(sorted(files.items(), key=lambda kv: (kv[0][1], kv[0][0]))):
        if progress:
            progress(f"reading {os.path.relpath(f, iter_dir)} ({n + 1}/{len(files)})")
        sd = _load_rank(f)
        args = sd.get("args", args)
        chunks = _chunks(sd, f)
        if vp is None:
            vp = len(chunks)
        elif len(chunks) != vp:
            raise invalid(f"{f}: {len(chunks)} model chunks, other ranks have {vp}")
        flat = []
        for v, c in enumerate(chunks):
            names: Dict[str, Any] = {}
            skipped: List[str] = []
            _flatten(c, "", names, skipped, f"{f} chunk {v}")
            not_imported.update(f"model.{s}" for s in skipped)
            layers = _layer_count(list(names), f"{f} chunk {v}")
            if counts.setdefault((v, p), layers) != layers:
                raise invalid(f"{f} chunk {v}: {layers} layers, TP rank 0 of stage {p} has {counts[(v, p)]}")
            flat.append(names)
        per_rank[(t, p)] = flat
        extras[(t, p)] = sd
        not_imported.update(k for k in sd if k not in ("model", "optimizer", "args", "iteration",
                                                        "checkpoint_version") and not re.match(r"model\d+$", k))
    assert vp is not None
    return _Ranks(per_rank=per_rank, extras=extras, counts=counts, args=args, not_imported=not_imported, vp=vp)


def _check_parallelism(args: Any, iter_dir: str, tp: int, pp: int) -> None:
    for key, what in ((("tensor_model_parallel_size",), tp), (("pipeline_model_parallel_size",), pp)):
        given = _arg(args, key[0])
        if isinstance(given, int) and given != what:
            raise invalid(f"{iter_dir}: args.{key[0]} is {given} but the folder has {what} ranks along it")


def _layer_offsets(ranks: _Ranks, pp: int, iter_dir: str) -> Tuple[Dict[Tuple[int, int], int], int]:
    """Each (chunk, stage)'s first global layer, and the total: chunk v of stage p follows
    every chunk before it in (v, p) order."""
    offsets, total = {}, 0
    for v in range(ranks.vp):
        for p in range(pp):
            offsets[(v, p)] = total
            total += ranks.counts[(v, p)]
    num_layers = _arg(ranks.args, "num_layers")
    if isinstance(num_layers, int) and num_layers != total:
        raise invalid(f"{iter_dir}: args.num_layers is {num_layers}, the rank files hold {total} layers")
    return offsets, total


_Found = Dict[str, Tuple[int, Dict[int, Any]]]  # global name -> (stage, {tp rank: tensor})


def _global_names(ranks: _Ranks, offsets: Dict[Tuple[int, int], int],
                  iter_dir: str) -> Tuple[_Found, Dict[Tuple[int, int], List[Tuple[str, Any]]]]:
    """The parameters under their global names, and each rank's (global name, tensor) in
    model order."""
    found: _Found = {}
    order: Dict[Tuple[int, int], List[Tuple[str, Any]]] = {}
    for (t, p), flat in ranks.per_rank.items():
        params = order.setdefault((t, p), [])
        for v, names in enumerate(flat):
            for local, x in names.items():
                name = _globalize(local, offsets[(v, p)])
                stage, held = found.setdefault(name, (p, {}))
                if stage != p or t in held:
                    raise invalid(f"{iter_dir}: tensor '{name}' appears twice (stages {stage} and {p})")
                held[t] = x
                params.append((name, x))
    return found, order


def _add_optimizer(found: _Found, order: Dict[Tuple[int, int], List[Tuple[str, Any]]], ranks: _Ranks,
                   files: Dict[Tuple[int, int], str], iter_dir: str) -> None:
    """Adds every rank's optimizer state to `found` (the step once, on stage 0), and what
    of the optimizer is not read to ranks.not_imported."""
    for (t, p), params in order.items():
        try:
            state = _optimizer_of(ranks.extras[(t, p)], params, files[(t, p)])
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:  # of a crafted file
            raise invalid(f"{files[(t, p)]}: optimizer state of an unexpected form ({type(e).__name__}: "
                          f"{str(e)[:200]}); pass --model-only to import the model alone") from None
        for name, x in state.items():
            stage, held = found.setdefault(name, (p, {}))
            if name == STEP_NAME:
                stage, held = found[name] = (0, held)
                if t in held and not np.array_equal(np.asarray(held[t]), np.asarray(x)):
                    raise invalid(f"{iter_dir}: optimizer steps differ between ranks")
            held[t] = x
    if any(isinstance(sd.get("optimizer"), Mapping) for sd in ranks.extras.values()):
        ranks.not_imported.add("optimizer hyperparameters (param_groups)")
        if any("grad_scaler" in sd["optimizer"] for sd in ranks.extras.values()
               if isinstance(sd.get("optimizer"), Mapping)):
            ranks.not_imported.add("optimizer.grad_scaler")


@dataclass
class _Model:
    """The run's model arguments that the partitioning rules need."""
    pad_to: int                 # vocabulary padding multiple (1 when the files pad by another rule)
    swiglu: bool
    heads: Optional[int]        # attention heads and key/value groups, None when args lack them
    groups: Optional[int]


def _model_args(args: Any, iter_dir: str) -> _Model:
    pad_to = _arg(args, "make_vocab_size_divisible_by", 128)
    if type(pad_to) is not int or pad_to < 1:
        raise invalid(f"{iter_dir}: args.make_vocab_size_divisible_by is {str(pad_to)[:40]}, not a positive number")
    swiglu = bool(_arg(args, "swiglu", False))
    # The heads the attention tensors hold (Megatron's interleaved QKV: its key/value groups),
    # so that no later layout splits one (docs/FORMATS.md "ptc.json").
    heads = _arg(args, "num_attention_heads")
    groups = _arg(args, "num_query_groups") if _arg(args, "group_query_attention", False) else heads
    if not (isinstance(heads, int) and isinstance(groups, int) and heads > 0 and groups > 0):
        heads = groups = None
    return _Model(pad_to=pad_to, swiglu=swiglu, heads=heads, groups=groups)


def _global_shapes(found: _Found, model: _Model, args: Any, tp: int, vocab_size: Optional[int],
                   iter_dir: str) -> Tuple[Dict[str, Tuple[List[int], str]], Dict[str, List[Any]]]:
    """Each tensor's global (shape, dtype), checked against the run's args, and its TP
    slices in rank order. Sets model.pad_to to 1 when the vocabulary is padded by another
    rule than make_vocab_size_divisible_by."""
    shapes, slices, unknown = {}, {}, []
    for name, (stage, held) in sorted(found.items()):
        where = f"{iter_dir}: tensor '{name}'"
        if name == STEP_NAME:
            shapes[name] = ([1], "I64")
            slices[name] = [np.asarray(held[t]) for t in sorted(held)][:1] * tp
            continue
        base = name
        for prefix in OPTIMIZER_PREFIXES + (FP32_PREFIX,):
            if name.startswith(prefix):
                base = name[len(prefix):]
        fields = _rule(base, model.pad_to, None, 2 if model.swiglu else None)
        if fields is None:
            unknown.append(name)
            continue
        if sorted(held) != list(range(tp)):
            raise invalid(f"{where} is held by TP ranks {sorted(held)}, not all {tp}")
        arrays = [_as_array(held[t], where) for t in range(tp)]
        dt = arrays[0][1]
        if any(d != dt or a.shape != arrays[0][0].shape for a, d in arrays):
            raise invalid(f"{where}: TP ranks disagree on its dtype or slice shape")
        shape = list(arrays[0][0].shape)
        k = fields.get("tp_dim")
        if k is not None:
            shape[k] *= tp
        megatron_shapes.check(base, shape, args, where)
        if k is not None:
            if "pad_to" in fields:
                padded = shape[k]
                if padded % (model.pad_to * tp):  # padded by some other rule: keep every row, pad by tp alone
                    model.pad_to = 1
                if vocab_size is not None:
                    if _ptc.padded_size(vocab_size, model.pad_to, tp) != padded:
                        raise invalid(f"{where}: --vocab-size {vocab_size} pads to "
                                      f"{_ptc.padded_size(vocab_size, model.pad_to, tp)} rows at tp={tp}, "
                                      f"the files hold {padded}")
                    shape[k] = vocab_size
        shapes[name] = (shape, dt)
        slices[name] = [a for a, _ in arrays]
    if unknown:
        raise invalid(f"{iter_dir}: no partitioning rule for {len(unknown)} tensor(s): {', '.join(unknown[:10])}"
                      f"{' ...' if len(unknown) > 10 else ''} (a Megatron GPT model is expected)")
    return shapes, slices


def read(path: str, iteration: Optional[int] = None, vocab_size: Optional[int] = None,
         model_only: bool = False, progress: Optional[Callable[[str], None]] = None) -> MegatronCheckpoint:
    """Reads every rank file of an iteration and gathers the global tensors. `vocab_size`
    drops the vocabulary padding rows (default: keep them; the logical vocabulary is then the
    padded one). With `model_only`, optimizer state is left out (and a distributed optimizer's
    files are no error)."""
    iter_dir, iteration = iteration_dir(path, iteration)
    files = rank_files(iter_dir)
    tp = 1 + max(t for t, _ in files)
    pp = 1 + max(p for _, p in files)
    if not model_only:
        _refuse_distributed_optimizer(iter_dir, files)
    ranks = _read_ranks(files, iter_dir, progress)
    _check_parallelism(ranks.args, iter_dir, tp, pp)
    offsets, total = _layer_offsets(ranks, pp, iter_dir)
    found, order = _global_names(ranks, offsets, iter_dir)
    if not model_only:
        _add_optimizer(found, order, ranks, files, iter_dir)
    elif any("optimizer" in sd for sd in ranks.extras.values()):
        ranks.not_imported.add("optimizer")
    if ranks.args is not None:
        ranks.not_imported.add("args")
    ranks.extras.clear()

    model = _model_args(ranks.args, iter_dir)
    shapes, slices = _global_shapes(found, model, ranks.args, tp, vocab_size, iter_dir)
    found.clear()
    ptc = infer_megatron(shapes, num_layers=total, tp=tp, pp=pp, dp=1, pad_to=model.pad_to, qkv_parts=None,
                         mlp_parts=2 if model.swiglu else None, heads=model.heads, query_groups=model.groups,
                         optimizer_prefixes=OPTIMIZER_PREFIXES + (FP32_PREFIX,),
                         overrides={STEP_NAME: {"stage": "all"}})
    tensors = {}
    for name, spec in ptc["tensors"].items():
        try:
            tensors[name] = _ptc.gather(slices.pop(name), spec, tp)
        except Error as e:
            raise invalid(f"{iter_dir}: tensor '{name}': {e.message}") from None
    return MegatronCheckpoint(path=iter_dir, iteration=iteration, tp=tp, pp=pp, vp=ranks.vp, ptc=ptc, tensors=tensors,
                              not_imported=sorted(ranks.not_imported),
                              optimizer=any(n.startswith("optimizer.") for n in tensors))


def write_checkpoint(ck: MegatronCheckpoint, out_dir: str, to: Optional[Tuple[int, int, int]] = None,
                     progress: Optional[Callable[[str], None]] = None) -> dict:
    """Writes OUT_DIR/ptc.json and its rank files (what `ptcfs import` reads) for the
    checkpoint's own (tp, pp) or for `to`; returns the PTC written."""
    from ...checkpoint import save_ptc, save_shard
    ptc = _ptc.with_parallelism(ck.ptc, *to) if to else ck.ptc
    _ptc.check_layout(ptc, where=f"{ck.path} as {_ptc.parallelism(ptc)}")
    os.makedirs(out_dir, exist_ok=True)
    tp = _ptc.parallelism(ptc)[0]
    for (t, p) in _ptc.shards(ptc):
        if progress:
            progress(f"writing tp{t}-pp{p}.safetensors")
        names = _ptc.shard_tensors(ptc, t, p)
        save_shard(out_dir, ptc, t, p, {n: _ptc.split(ck.tensors[n], ptc["tensors"][n], tp, t) for n in names})
    save_ptc(out_dir, ptc)
    return ptc
