"""Usage errors of the CLI (found by probing): every one says `ptcfs: error:` and what is wrong,
exits 2, and sends nothing to the daemon."""

import json
import subprocess

import pytest

from ptcfs_harness import PTCFS, require_binaries


def run(*args):
    require_binaries()
    return subprocess.run([PTCFS, *args], capture_output=True, text=True, timeout=60)


def usage_error(r, *texts):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("ptcfs: error: "), r.stderr
    for t in texts:
        assert t in r.stderr, (t, r.stderr)


def test_an_unknown_command_is_named_with_the_valid_ones():
    usage_error(run("statsu"), "unknown command 'statsu'", "status", "repartition", "import")
    usage_error(run("--daemon", "127.0.0.1:1", "bogus", "--json"), "unknown command 'bogus'")
    usage_error(run(), "no command given", "status")


@pytest.mark.parametrize("args, option", [
    (["dataset", "progress", "--job", "j", "--name", "n", "--consumed", "-5"], "--consumed"),
    (["dataset", "add", "--job", "j", "--name", "n", "--format", "jsonl", "--seed", "1", "--global-batch", "-8",
      "f.jsonl"], "--global-batch"),
    (["dataset", "add", "--job", "j", "--name", "n", "--format", "jsonl", "--seed", "-1", "--global-batch", "8",
      "f.jsonl"], "--seed"),
    (["plan", "--model", "m.json", "--gpus", "-4"], "--gpus"),
    (["repartition", "--job", "j", "--step", "1", "--gpus", "-4", "--model", "m.json"], "--gpus"),
])
def test_negative_numbers_are_refused_not_wrapped(args, option):
    usage_error(run(*args), option, "must not be negative")


def test_usage_errors_have_the_prefix_and_name_the_command_for_help():
    r = run("repartition", "--job")
    usage_error(r, "--job")
    assert "ptcfs repartition --help" in r.stderr


def test_global_options_may_follow_the_command(daemon):
    out = subprocess.run([PTCFS, "status", "--daemon", daemon.addr, "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["listen"] == daemon.addr
