"""`python -m ptcfs COMMAND`: the commands that need Python (torch).

    import-megatron CKPT --job J [--step S]   read a Megatron-LM checkpoint and import it
    import-megatron CKPT --out DIR            write ptc.json + rank files only (for `ptcfs import`)
    live-plan PTC_JSON --from C --to C [--json]  the live reshard plan (a dry run of ptcfs.live.reshard)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from typing import List, Optional, Tuple

from .errors import Error, invalid


def _parallelism(text: str) -> Tuple[int, int, int]:
    m = re.fullmatch(r"tp=(\d+),pp=(\d+)(?:,dp=(\d+))?", text.replace(" ", ""))
    if not m or min(int(g) for g in m.groups() if g is not None) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not tp=T,pp=P[,dp=D] with positive numbers")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)


def _daemon_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--daemon", help="daemon address HOST:PORT (default $PTCFS_DAEMON, then 127.0.0.1:7070)")
    p.add_argument("--secret-file", help="cluster secret (default $PTCFS_SECRET_FILE)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m ptcfs", description="ptcfs commands that need Python and torch.")
    from . import __version__
    ap.add_argument("--version", action="version", version=f"ptcfs {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    m = sub.add_parser(
        "import-megatron", help="import a Megatron-LM checkpoint (iter_N/mp_rank_*/model_optim_rng.pt)",
        description="Reads every rank file of a Megatron-LM checkpoint (without running code from it), "
                    "maps local names and layer numbers to global ones, and imports the step into the "
                    "daemon (or, with --out, writes the checkpoint folder `ptcfs import` reads).")
    m.add_argument("checkpoint", help="the save directory (with latest_checkpointed_iteration.txt) or an iter_* folder")
    m.add_argument("--iteration", type=int, help="which iter_* folder (default: the tracker file's)")
    m.add_argument("--job", help="job to import into")
    m.add_argument("--step", help="step name (default: the iteration)")
    m.add_argument("--out", help="write ptc.json and rank files here instead of importing")
    m.add_argument("--to", type=_parallelism, help="layout to import as (tp=T,pp=P[,dp=D]); default: the checkpoint's")
    m.add_argument("--vocab-size", type=int, help="true vocabulary size: drops Megatron's padding rows "
                                                  "(default: keep them)")
    m.add_argument("--model-only", action="store_true", help="leave optimizer state out")
    _daemon_options(m)
    m.add_argument("--work-dir", help="where the rank files are staged before the daemon imports them "
                                      "(default: $TMPDIR); removed afterwards")
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    d = sub.add_parser(
        "import-dcp", help="import a PyTorch Distributed Checkpoint directory (.metadata, *.distcp)",
        description="Reads a directory written by torch.distributed.checkpoint.save (without running code "
                    "from it; every storage reference checked, docs/FORMATS.md \"Distributed Checkpoint\") "
                    "and saves it into the daemon's mount as JOB/STEP, which stock dcp.load then reads "
                    "through ptcfs.dcp.StorageReader at any mesh.")
    d.add_argument("checkpoint", help="the DCP directory (with .metadata)")
    d.add_argument("--job", required=True, help="job to import into")
    d.add_argument("--step", required=True, help="step name")
    _daemon_options(d)
    d.add_argument("--json", action="store_true", help="print the result as JSON")
    e = sub.add_parser(
        "export-dcp", help="write a committed step as a DCP directory that stock dcp.load reads",
        description="Writes JOB/STEP of the mount (any step: DCP, ptc, HF, Megatron) with torch's own "
                    "FileSystemWriter into DIR; non-tensor entries keep their bytes as saved.")
    e.add_argument("step_dir", help="the step folder in the mount, MNT/JOB/STEP")
    e.add_argument("out", help="a new directory to write")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    lp = sub.add_parser(
        "live-plan", help="print the live reshard plan between two configs (no processes, no daemon)",
        description="Prints what ptcfs.live.reshard carries out (docs/PYTHON.md \"Live resharding\"): per rank "
                    "its shards and the bytes it sends and receives beside its minimum; with --json the "
                    "whole plan, every move.")
    lp.add_argument("ptc", help="a ptc.json file")
    lp.add_argument("--from", dest="frm", required=True, type=_parallelism, help="tp=T,pp=P,dp=D")
    lp.add_argument("--to", required=True, type=_parallelism, help="tp=T,pp=P,dp=D")
    lp.add_argument("--json", action="store_true", help="print the plan as JSON")
    return ap


def _say(quiet: bool):
    return (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))


def import_megatron(a: argparse.Namespace) -> dict:
    from .formats.megatron import checkpoint as megatron_ckpt
    from .control import Client, format_parallelism
    if (a.out is None) == (a.job is None):
        raise invalid("give either --job (import into the daemon) or --out (write a checkpoint folder)")
    if a.vocab_size is not None and a.vocab_size < 1:
        raise invalid(f"--vocab-size {a.vocab_size} must be positive")
    say = _say(a.json)
    ck = megatron_ckpt.read(a.checkpoint, a.iteration, a.vocab_size, a.model_only, progress=say)
    result = {"checkpoint": ck.path, "iteration": ck.iteration,
              "source": {"tp": ck.tp, "pp": ck.pp, "virtual_stages": ck.vp},
              "tensors": len(ck.tensors), "bytes": int(sum(t.nbytes for t in ck.tensors.values())),
              "optimizer": ck.optimizer, "not_imported": ck.not_imported}
    if a.out is not None:
        ptc = megatron_ckpt.write_checkpoint(ck, a.out, a.to, progress=say)
        result.update(out=os.path.abspath(a.out), parallelism=ptc["parallelism"])
        return result
    step = a.step if a.step is not None else (str(ck.iteration) if ck.iteration is not None else None)
    if step is None:
        raise invalid(f"{ck.path} is a release checkpoint: give --step")
    with Client(a.daemon, a.secret_file, timeout=None) as client:  # connect before the long part
        stage = tempfile.mkdtemp(prefix="ptcfs-megatron-", dir=a.work_dir)
        try:
            # Rank files in the checkpoint's own layout, or straight in --to's (one pass, no repartition).
            ptc = megatron_ckpt.write_checkpoint(ck, stage, a.to, progress=say)
            ck.tensors.clear()
            say(f"importing {a.job}/{step}")
            result["import"] = client.import_dir(stage, a.job, step)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    result.update(job=a.job, step=step, parallelism=ptc["parallelism"])
    return result


def import_dcp(a: argparse.Namespace) -> dict:
    from . import checkpoint, dcp
    from .control import Client
    checkpoint.step_dir("/", a.job, a.step)  # the names' rules, before anything is read
    with Client(a.daemon, a.secret_file, timeout=None) as client:
        mnt = client.status()["mount"]
        job_dir = os.path.join(mnt, a.job)
        try:
            os.mkdir(job_dir)
        except FileExistsError:
            pass
        step = os.path.join(job_dir, a.step)
        # A chunk refused after the first bytes went in: the pending step this import made goes.
        result = dcp.import_dir(a.checkpoint, step, progress=_say(a.json),
                                remove=lambda: client.call("rm", path=f"{a.job}/{a.step}"))
    return {"checkpoint": os.path.abspath(a.checkpoint), "job": a.job, "step": a.step, **result}


def export_dcp(a: argparse.Namespace) -> dict:
    from . import dcp
    return {"step": os.path.abspath(a.step_dir), "out": os.path.abspath(a.out), **dcp.export_dir(a.step_dir, a.out)}


def _print(result: dict) -> None:
    par = result["parallelism"]
    where = result.get("out") or f"{result['job']}/{result['step']}"
    print(f"imported {result['checkpoint']} (tp={result['source']['tp']},pp={result['source']['pp']}"
          f"{', ' + str(result['source']['virtual_stages']) + ' virtual stages' if result['source']['virtual_stages'] > 1 else ''})"
          f" as {where}: tp={par['tp']},pp={par['pp']},dp={par['dp']}, {result['tensors']} tensors, "
          f"{result['bytes']} bytes{', with optimizer state' if result['optimizer'] else ''}")
    if result["not_imported"]:
        print(f"not imported: {', '.join(result['not_imported'])}")


def live_plan(a: argparse.Namespace) -> int:
    from . import live
    with open(a.ptc) as f:
        text = f.read()
    p = live.reshard_plan(text, a.frm, a.to)
    if a.json:
        print(json.dumps(p, indent=2))
        return 0
    print(f"live plan {p['from']} -> {p['to']}: {len(p['moves'])} moves, {p['bytes_min']} bytes between ranks "
          f"(the minimum)")
    print("rank  old shard  new shard        sent    received         min")
    for r in p["ranks"]:
        print(f"{r['rank']:4d}  {r['old_shard'] or '-':9s}  {r['new_shard'] or '-':9s}  {r['sent']:10d}  "
              f"{r['received']:10d}  {r['min']:10d}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.command is None:
        ap.print_help(sys.stderr)
        return 2
    if a.command == "live-plan":
        try:
            return live_plan(a)
        except (Error, OSError) as e:
            print(f"ptcfs: error: {e}", file=sys.stderr)
            return 1
    if a.command in ("import-dcp", "export-dcp"):
        try:
            result = (import_dcp if a.command == "import-dcp" else export_dcp)(a)
        except (Error, OSError) as e:
            print(f"ptcfs: error: {getattr(e, 'message', None) or e}", file=sys.stderr)
            return 1
        if a.json:
            print(json.dumps(result, indent=2))
        elif a.command == "import-dcp":
            print(f"imported {result['checkpoint']} as {a.job}/{a.step}: {result['tensors']} tensors "
                  f"({result['bytes']} bytes), {result['items']} other entries")
        else:
            print(f"exported {result['step']} to {result['out']}: {result['tensors']} tensors, "
                  f"{result['items']} other entries")
        return 0
    try:
        result = import_megatron(a)
    except Error as e:
        print(f"ptcfs: error: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ptcfs: interrupted; nothing was imported", file=sys.stderr)
        return 130
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
