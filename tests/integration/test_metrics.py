"""Operations: `ptcfsd --metrics` serves Prometheus text that Debian's promtool accepts and a real
Prometheus server scrapes; its values agree exactly with what the test did and with `ptcfs status`.
`--log-format json|logfmt` writes one parseable line per event."""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from cluster_util import Cluster, per_node_dirs
from ptcfs_harness import PTCFSD, Checkpoint, Daemon, cmp_files, free_port, require_binaries
from repartition_util import wait_for

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')


def scrape(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def samples(text: str) -> dict:
    """{(name, ((label, value), ...)): value} of an exposition page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(s: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in s, f"no sample {key}; have {sorted(k for k in s if k[0] == name)}"
    return s[key]


def promtool_ok(text: str) -> None:
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"promtool check metrics: {r.stdout}{r.stderr}"


def test_a_daemons_metrics_match_what_it_did(tmp_path):
    require_binaries()
    maddr = f"127.0.0.1:{free_port()}"
    d = Daemon(str(tmp_path / "d"), extra_flags=["--metrics", maddr])
    d.start()
    try:
        ck = Checkpoint(str(tmp_path / "ck"), tp=2, pp=2, layers=2, hidden=64, vocab=300)
        imp = d.cli_json("import", ck.path, "--job", "gpt", "--step", "1", "--json")
        cmp_files(os.path.join(d.step_dir("gpt", "1"), "tp1-pp0.safetensors"), ck.shard_path(1, 0))
        d.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=1,dp=1", "--dry-run")
        bad = d.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=3,pp=1,dp=1", check=False)
        assert bad.returncode == 1
        d.cli("repartition", "--job", "gpt", "--step", "1", "--to", "tp=1,pp=2,dp=1")

        text = scrape(maddr)
        promtool_ok(text)
        s = samples(text)
        st = d.cli_json("status", "--json")
        assert value(s, "ptcfs_info", node="", version=st["version"]) == 1
        assert value(s, "ptcfs_steps") == 1 and value(s, "ptcfs_jobs") == 1 and value(s, "ptcfs_datasets") == 0
        assert value(s, "ptcfs_stored_bytes") == st["bytes_stored"]  # the tp=1,pp=2 layout's bytes
        assert imp["bytes"] == ck.summary["bytes"]
        assert value(s, "ptcfs_operations_total", op="import", outcome="ok") == 1
        assert value(s, "ptcfs_operations_total", op="import", outcome="error") == 0
        assert value(s, "ptcfs_operation_bytes_total", op="import") == ck.summary["bytes"]
        assert value(s, "ptcfs_operations_total", op="repartition", outcome="ok") == 1
        assert value(s, "ptcfs_operations_total", op="repartition", outcome="error") == 1
        assert value(s, "ptcfs_operations_total", op="repartition.dry_run", outcome="ok") == 1
        assert value(s, "ptcfs_operation_duration_seconds_count", op="import") == 1
        # One node: nothing moves between nodes.
        assert value(s, "ptcfs_repartition_moved_bytes_total") == 0 == value(s, "ptcfs_repartition_min_bytes_total")
        # The rank file was read once, whole: exactly its bytes; every read request is one view read.
        assert value(s, "ptcfs_view_read_bytes_total", kind="rank_file") == os.path.getsize(ck.shard_path(1, 0))
        reads = sum(v for (n, _), v in s.items() if n == "ptcfs_view_reads_total")
        assert reads == value(s, "ptcfs_fuse_request_duration_seconds_count", op="read") > 0
        blobs = os.listdir(os.path.join(d.data, "blobs"))
        assert value(s, "ptcfs_blob_files") == len(blobs)
        assert value(s, "ptcfs_blob_bytes") == sum(os.path.getsize(os.path.join(d.data, "blobs", b)) for b in blobs)
        assert value(s, "ptcfs_pending_saves") == 0
        assert not any(n.startswith("ptcfs_cluster") or n.startswith("ptcfs_peer_received") for n, _ in s)
        assert value(s, "ptcfs_direct_connections") == 0 == value(s, "ptcfs_direct_files_held")
        # A file held open through the direct socket shows, and goes when it is let go.
        from ptcfs import direct
        f = direct.open(os.path.join(d.step_dir("gpt", "1"), "tp0-pp1.safetensors"), fallback=False)
        s = samples(scrape(maddr))
        assert value(s, "ptcfs_direct_connections") == 1 == value(s, "ptcfs_direct_files_held")
        f.close()
        wait_for(lambda: value(samples(scrape(maddr)), "ptcfs_direct_files_held") == 0, 10, "the held file stayed")
    finally:
        d.stop()


def test_a_cluster_nodes_peer_metrics_agree_with_status(tmp_path):
    require_binaries()
    root = str(tmp_path)
    ck = Checkpoint(os.path.join(root, "ck"), tp=2, pp=2, layers=2, hidden=64, vocab=300)
    pattern = per_node_dirs(root, ck, 2, 2, 1, [2, 2, 2])
    maddrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    c = Cluster(root, 3)
    for d, a in zip(c.nodes, maddrs):
        d.extra_flags = ["--metrics", a]
    with c:
        c[0].cli("import", pattern, "--job", "j", "--step", "1")
        rep = c[0].cli_json("repartition", "--job", "j", "--step", "1", "--to", "tp=1,pp=1,dp=2", "--json")
        assert rep["bytes_moved"] > 0
        st = c[0].cli_json("status", "--json")
        scraped = []
        for i, d in enumerate(c.nodes):
            text = scrape(maddrs[i])
            promtool_ok(text)
            s = samples(text)
            scraped.append(s)
            node = next(n for n in st["cluster"]["nodes"] if n["id"] == f"n{i}")
            got = sum(v for (n, _), v in s.items() if n == "ptcfs_peer_received_bytes_total")
            assert got == node["bytes_received"], (i, got, node)
            sent = sum(v for (n, _), v in s.items() if n == "ptcfs_peer_sent_bytes_total")
            assert sent == node["bytes_sent"], (i, node)
            assert value(s, "ptcfs_cluster_nodes") == 3 and value(s, "ptcfs_prepared_changes") == 0
            assert value(s, "ptcfs_info", node=f"n{i}", version=st["version"]) == 1
        # What node i sent to node j is what node j received from node i, pair by pair.
        for i in range(3):
            for j in range(3):
                if i != j:
                    sent = scraped[i].get(("ptcfs_peer_sent_bytes_total", (("peer", f"n{j}"),)), 0)
                    received = scraped[j].get(("ptcfs_peer_received_bytes_total", (("peer", f"n{i}"),)), 0)
                    assert sent == received, (i, j, sent, received)
        assert sum(scraped[i].get(("ptcfs_peer_sent_bytes_total", (("peer", "unknown"),)), 0) for i in range(3)) == 0
        s0 = samples(scrape(maddrs[0]))  # the coordinator records the change's bytes
        assert value(s0, "ptcfs_repartition_moved_bytes_total") == rep["bytes_moved"]
        assert value(s0, "ptcfs_repartition_min_bytes_total") == rep["bytes_min"]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus is not installed")
def test_a_real_prometheus_server_scrapes_the_daemon(tmp_path):
    require_binaries()
    maddr = f"127.0.0.1:{free_port()}"
    d = Daemon(str(tmp_path / "d"), extra_flags=["--metrics", maddr])
    d.start()
    web = f"127.0.0.1:{free_port()}"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ptcfs\n"
                   f"    static_configs:\n      - targets: ['{maddr}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address={web}"], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "wb"))
    try:
        ck = Checkpoint(str(tmp_path / "ck"), tp=1, pp=1, layers=2, hidden=64, vocab=300)
        d.cli("import", ck.path, "--job", "gpt", "--step", "7")
        deadline = time.monotonic() + 60
        result = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{web}/api/v1/query?query=ptcfs_steps", timeout=5) as r:
                    result = json.load(r)["data"]["result"]
                if result and result[0]["value"][1] == "1":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert result and result[0]["value"][1] == "1", (result, (tmp_path / "prometheus.log").read_text()[-2000:])
        assert result[0]["metric"]["job"] == "ptcfs"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        d.stop()


def test_healthz_answers_ok_without_collecting_the_metrics(tmp_path):
    """The probes' endpoint (docs/OPERATIONS.md "Health"): 200 `ok` at once, from the metrics
    address, without going through the scrape (which reads every gauge and lists DATA/blobs): the
    exposer's own scrape counter moves by the one scrape between two reads, not by the probes."""
    require_binaries()
    maddr = f"127.0.0.1:{free_port()}"
    d = Daemon(str(tmp_path / "d"), extra_flags=["--metrics", maddr])
    d.start()
    try:
        before = value(samples(scrape(maddr)), "exposer_scrapes_total")
        for _ in range(10):
            with urllib.request.urlopen(f"http://{maddr}/healthz", timeout=10) as r:
                assert (r.status, r.headers["Content-Type"], r.read()) == (200, "text/plain", b"ok\n")
        after = value(samples(scrape(maddr)), "exposer_scrapes_total")
        assert after - before == 1
        # Any other path is still prometheus-cpp's: not found.
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://{maddr}/healthzz", timeout=10)
        assert e.value.code == 404
    finally:
        d.stop()


@pytest.mark.parametrize("flag, value, why", [
    ("--metrics", "nonsense", "--metrics nonsense: expected HOST:PORT"),
    ("--metrics", "127.0.0.1:{busy}", "cannot serve metrics on 127.0.0.1:{busy}"),
    ("--listen", "127.0.0.1:{busy}", "--listen 127.0.0.1:{busy}: cannot listen there: Address already in use"),
    ("--direct-socket", "/proc/ptcfs/direct.sock", "--direct-socket /proc/ptcfs/direct.sock: cannot make its folder"),
])
def test_a_bad_listening_flag_stops_the_daemon_before_it_mounts(tmp_path, flag, value, why):
    """Flags only a listener can judge are tried first: exit 2 with the reason, nothing mounted (the mount
    point, made when mounting, is not even there) and no data directory made."""
    require_binaries()
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        data, mnt = tmp_path / "data", tmp_path / "mnt"
        r = subprocess.run([PTCFSD, "--data", str(data), "--mount", str(mnt), flag, value.format(busy=port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert why.format(busy=port) in r.stderr, r.stderr
    assert "mounted at" not in r.stderr and not mnt.exists() and not data.exists(), r.stderr


@pytest.mark.parametrize("fmt", ["json", "logfmt"])
def test_structured_logs_are_one_parseable_line_per_event(tmp_path, fmt):
    require_binaries()
    d = Daemon(str(tmp_path / "d"), extra_flags=["--log-format", fmt])
    d.start()
    try:
        d.cli("import", str(tmp_path / "missing"), "--job", "j", "--step", "1", check=False)
    finally:
        d.stop()
    lines = [ln for ln in open(d.log_path).read().splitlines() if ln and not ln.startswith("=====")]
    assert len(lines) >= 3, lines
    msgs = []
    for ln in lines:
        if fmt == "json":
            ev = json.loads(ln)
            assert set(ev) == {"ts", "level", "msg"}, ev
        else:
            m = re.fullmatch(r'ts=(\S+) level=(debug|info|warn|error) msg=("(?:[^"\\]|\\.)*")', ln)
            assert m, ln
            ev = {"ts": m.group(1), "level": m.group(2), "msg": json.loads(m.group(3))}
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ev["ts"]), ev
        assert ev["level"] in ("debug", "info", "warn", "error")
        msgs.append(ev["msg"])
    assert any(m.startswith("ptcfsd ") and "serving" in m for m in msgs), msgs
    assert any(m.startswith("stopped") for m in msgs), msgs
