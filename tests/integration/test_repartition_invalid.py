"""`ptcfs repartition` refuses what it cannot do -- a tp that does not divide a split dimension or a
fused part, more stages than layers, a stage list beyond the new pp, a degree below 1, an unknown job
or step, a malformed --to -- with a `ptcfs: error:` naming the culprit, and changes nothing: the same
`ls --json`, the same tree and bytes and inode numbers in the mount, the same ptc.json and blobs, and
the step still verifies against its old layout (and can still be repartitioned afterwards)."""

import pytest

import ptcgen
from ptcfs_harness import Checkpoint, assert_error, snapshot, verify_step
from repartition_util import (Oracles, blob_usage, check_current, import_step, read_ptc_json, repartition)


def _fused_ptc():
    """Two layers; a fused tensor whose dimension (24) splits over tp=8 but whose parts (12) do not;
    a tensor on the stage list [0, 1]; padding; every other split valid for tp up to 8."""
    T = {
        "embed.weight": {"dtype": "BF16", "shape": [100, 16], "tp_dim": 0, "pad_to": 8, "stage": "first"},
        "layers.0.fused.weight": {"dtype": "BF16", "shape": [24, 16], "tp_dim": 0, "parts": 2, "layer": 0},
        "layers.0.norm.weight": {"dtype": "F32", "shape": [16], "layer": 0},
        "layers.1.dense.weight": {"dtype": "F32", "shape": [16, 32], "tp_dim": 1, "layer": 1},
        "shared.stage_list": {"dtype": "F16", "shape": [4, 8], "tp_dim": 1, "stage": [0, 1]},
        "head.bias": {"dtype": "F32", "shape": [8], "tp_dim": 0, "stage": "last"},
    }
    ptc = {"parallelism": {"tp": 2, "pp": 2, "dp": 1}, "num_layers": 2, "tensors": T}
    ptcgen.validate_ptc(ptc)
    ptcgen.validate_ptc(ptc, tp=4, pp=2)
    with pytest.raises(ValueError):
        ptcgen.validate_ptc(ptc, tp=8, pp=2)
    return ptc


@pytest.fixture(scope="module")
def steps(module_daemon, tmp_path_factory):
    d = module_daemon
    root = tmp_path_factory.mktemp("ckpts")
    gpt = Checkpoint(str(root / "gpt"), style="gpt", tp=2, pp=2, dp=1, layers=4, hidden=64, vocab=1000, seed=41)
    fused = Checkpoint(str(root / "fused"), ptc=_fused_ptc(), seed=42)
    import_step(d, gpt, "gpt", "100")
    import_step(d, fused, "fused", "7")
    return d, {("gpt", "100"): gpt, ("fused", "7"): fused}, root


def _state(d):
    return {
        "ls": d.cli_json("ls", "--json"),
        "steps": {k: d.cli_json("ls", f"{k[0]}/{k[1]}", "--json") for k in (("gpt", "100"), ("fused", "7"))},
        "status": {k: v for k, v in d.cli_json("status", "--json").items() if k != "uptime_s"},
        "mount": snapshot(d.mnt),
        "blobs": blob_usage(d)[2],
    }


# (job, step, --to, names all in stderr, names one of which is in stderr)
CASES = [
    # tp does not divide a split dimension (GPT's hidden 64 over tp=3; dense.weight splits dim 1)
    ("gpt", "100", "tp=3,pp=2,dp=1", ("tp=3",), ("layers.0.", "dense")),
    ("gpt", "100", "tp=128,pp=1,dp=1", ("tp=128",), ("layers.", "weight")),
    # tp divides the fused dimension (24) but not its parts (12)
    ("fused", "7", "tp=8,pp=2,dp=1", ("layers.0.fused.weight", "tp=8"), ("part",)),
    # more stages than layers
    ("gpt", "100", "tp=2,pp=5,dp=1", ("5", "4"), ("layers", "stages")),
    ("fused", "7", "tp=1,pp=3,dp=1", ("3", "2"), ("layers", "stages")),
    # a stage list naming a stage the new configuration lacks
    ("fused", "7", "tp=2,pp=1,dp=1", ("shared.stage_list",), ("stage",)),
    # degrees below 1
    ("gpt", "100", "tp=0,pp=2,dp=1", ("tp",), ("at least 1", "positive")),
    ("gpt", "100", "tp=2,pp=0,dp=1", ("pp",), ("at least 1", "positive")),
    ("gpt", "100", "tp=2,pp=2,dp=0", ("dp",), ("at least 1", "positive")),
    ("gpt", "100", "tp=-2,pp=2,dp=1", ("tp",), ("at least 1", "positive")),
    # unknown job / step
    ("nojob", "100", "tp=1,pp=1,dp=1", ("nojob",), ()),
    ("gpt", "999", "tp=1,pp=1,dp=1", ("gpt", "999"), ()),
    ("fused", "100", "tp=1,pp=1,dp=1", ("fused", "100"), ()),
    # malformed --to
    ("gpt", "100", "tp=2,pp=1", ("tp=2,pp=1",), ("dp", "required")),
    ("gpt", "100", "tp2,pp1,dp1", ("tp2,pp1,dp1",), ()),
    ("gpt", "100", "tp=2;pp=1;dp=1", ("tp=2;pp=1;dp=1",), ()),
    ("gpt", "100", "tp=x,pp=1,dp=1", ("tp=x,pp=1,dp=1",), ()),
    ("gpt", "100", "tp=2,pp=1,dp=1,ep=2", ("ep",), ()),
    ("gpt", "100", "tp=2,tp=4,pp=1,dp=1", ("tp",), ("twice", "duplicate")),
    ("gpt", "100", "tp=2,pp=1,dp=1,", ("tp=2,pp=1,dp=1,",), ()),
    ("gpt", "100", "tp=1.5,pp=1,dp=1", ("tp=1.5,pp=1,dp=1",), ()),
    ("gpt", "100", "tp=99999999999,pp=1,dp=1", ("tp",), ()),
    ("gpt", "100", "", (), ("tp", "parallelism", "--to")),
]


@pytest.mark.parametrize("job,step,to,names,any_of", CASES, ids=[f"{c[0]}-{c[2] or 'empty'}" for c in CASES])
def test_refused_and_nothing_changes(steps, job, step, to, names, any_of):
    d, cks, _ = steps
    before = _state(d)
    for dry in (False, True):
        args = ["repartition", "--job", job, "--step", step, "--to", to]
        if dry:
            args.append("--dry-run")
        assert_error(d.cli(*args, check=False), *names, any_of=any_of)
        r = d.cli(*args, "--json", check=False)
        assert_error(r, *names, any_of=any_of)
        assert not r.stdout.strip(), f"a refused --json run printed: {r.stdout}"
    assert _state(d) == before
    for (j, s), ck in cks.items():
        assert read_ptc_json(d, j, s) == ck.ptc
        verify_step(d, j, s, ck, full_views=False)
        assert d.cli_json("ls", f"{j}/{s}", "--json")["version"] == 1


def test_valid_after_refusals(steps, tmp_path):
    """The refusals left the steps fully usable: a valid repartition of each works and verifies,
    including tp=4 of the fused tensor (parts of 12 split in 3s) and the stage list on pp=2."""
    d, cks, root = steps
    for (job, step), to in ((("fused", "7"), (4, 2, 3)), (("gpt", "100"), (8, 4, 1))):
        ck = cks[(job, step)]
        v = d.cli_json("ls", f"{job}/{step}", "--json")["version"]
        cur = tuple(read_ptc_json(d, job, step)["parallelism"][k] for k in ("tp", "pp", "dp"))
        repartition(d, job, step, to, frm=cur, ptc=ck.ptc, version=v)
        oracles = Oracles(str(root / f"oracles-{job}"), ck, seed=41 if job == "gpt" else 42)
        check_current(d, job, step, oracles(to), v + 1)
        # and a refusal now leaves the new layout as it is
        before = snapshot(d.step_dir(job, step))
        bad = "tp=8,pp=2,dp=1" if job == "fused" else "tp=2,pp=9,dp=1"
        assert_error(d.cli("repartition", "--job", job, "--step", step, "--to", bad, check=False))
        assert snapshot(d.step_dir(job, step)) == before
        check_current(d, job, step, oracles(to), v + 1, full_views=False)
