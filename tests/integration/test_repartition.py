"""`ptcfs repartition` on one node: after each repartition the mount shows the checkpoint exactly as
the new configuration would have saved it (every shard file byte for byte, every .npy view and full
view, ptc.json, `ls --json`), round trips come back byte-identical, open files keep the version they
opened, replaced blobs are freed, dry runs change nothing, and the new layout survives a restart.

Validation of bad targets: test_repartition_invalid.py; kill -9 during a repartition:
test_repartition_crash.py."""

import io
import json
import os
import threading

import numpy as np

import ptcgen
from ptcfs_harness import assert_error, read_all as read_file, snapshot, verify_step
from repartition_util import (PLAN_KEYS, Oracles, blob_usage, check_byte_counters, check_current, content_snapshot,
                              import_step, par_of, par_str, read_ptc_json, reference_blob_usage, repartition,
                              step_version, wait_for)

# Small models valid for every tp in {1, 2, 4, 8} and pp in {1, 2, 4}: 4 layers; hidden 64 (a
# multiple of 8 * parts; Llama's kv dim 16 and SwiGLU width 192 split over 8 too).
GPT = dict(style="gpt", layers=4, hidden=64, vocab=1000)
LLAMA = dict(style="llama", layers=4, hidden=64, vocab=1000)


def _setup(daemon, make_ckpt, tmp_path, name, start, seed, job="j", step="1", **model):
    tp, pp, dp = start
    ck = make_ckpt(name, tp=tp, pp=pp, dp=dp, seed=seed, **model)
    import_step(daemon, ck, job, step)
    check_current(daemon, job, step, ck, 1)
    return ck, Oracles(str(tmp_path / f"oracles-{name}"), ck, seed)


def _run_chain(daemon, ck, oracles, chain, job="j", step="1"):
    """Repartitions through `chain`, checking every view after each step; returns the last version."""
    cur, version = par_of(ck.ptc), 1
    for to in chain:
        repartition(daemon, job, step, to, frm=cur, ptc=ck.ptc, version=version)
        version += 1
        check_current(daemon, job, step, oracles(to), version)
        cur = to
    return version


def test_gpt_every_tp_pp_and_round_trip(daemon, make_ckpt, tmp_path):
    start = (2, 2, 1)
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", start, seed=21, **GPT)
    imported = content_snapshot(daemon.step_dir("j", "1"))
    # Visits all 12 (tp, pp) pairs of {1,2,4,8} x {1,2,4}, then comes back to the start.
    chain = [(4, 1, 1), (8, 4, 1), (1, 4, 1), (2, 1, 1), (8, 2, 1), (1, 1, 1), (4, 4, 1), (4, 2, 1),
             (1, 2, 1), (8, 1, 1), (2, 4, 1), start]
    assert {(t, p) for t, p, _ in chain} == {(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4)}
    version = _run_chain(daemon, ck, oracles, chain)
    assert version == 1 + len(chain)
    # Back at the start: the very bytes that were imported, in every view.
    assert content_snapshot(daemon.step_dir("j", "1")) == imported
    verify_step(daemon, "j", "1", ck)


def test_llama_chain_with_dp_changes_round_trip(daemon, make_ckpt, tmp_path):
    start = (1, 2, 1)
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "llama", start, seed=22, **LLAMA)
    imported = content_snapshot(daemon.step_dir("j", "1"))
    chain = [(2, 4, 2), (8, 1, 4), (4, 2, 1), (1, 1, 8), (8, 4, 1), (2, 2, 3), (4, 1, 2), (4, 4, 2),
             (2, 1, 1), (8, 2, 2), start]
    _run_chain(daemon, ck, oracles, chain)
    assert content_snapshot(daemon.step_dir("j", "1")) == imported
    verify_step(daemon, "j", "1", ck)


def test_dp_only_change_rewrites_only_ptc_json(daemon, make_ckpt, tmp_path):
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", (2, 2, 1), seed=23, **GPT)
    sd = daemon.step_dir("j", "1")
    before = content_snapshot(sd)
    version = 1
    for dp in (4, 3, 1):
        frm = (2, 2, read_ptc_json(daemon, "j", "1")["parallelism"]["dp"])
        repartition(daemon, "j", "1", (2, 2, dp), frm=frm, ptc=ck.ptc, version=version)
        version += 1
        check_current(daemon, "j", "1", oracles((2, 2, dp)), version)
        after = content_snapshot(sd)
        assert read_ptc_json(daemon, "j", "1")["parallelism"] == {"tp": 2, "pp": 2, "dp": dp}
        assert sorted(after) == sorted(before)
        changed = sorted(k for k in before if before[k] != after[k])
        assert changed == ([] if dp == 1 else ["ptc.json"]), changed


def test_same_config_is_unchanged(daemon, make_ckpt, tmp_path):
    ck, _ = _setup(daemon, make_ckpt, tmp_path, "gpt", (2, 2, 1), seed=24, **GPT)
    before = snapshot(daemon.step_dir("j", "1"))
    ls_before = daemon.cli_json("ls", "j/1", "--json")
    for dry in (False, True):
        r = repartition(daemon, "j", "1", (2, 2, 1), frm=(2, 2, 1), ptc=ck.ptc, version=1, dry_run=dry)
        assert r["unchanged"] is True and r["version"] == 1, r
    assert snapshot(daemon.step_dir("j", "1")) == before
    assert daemon.cli_json("ls", "j/1", "--json") == ls_before
    r = daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=2,pp=2,dp=1")
    assert "tp=2,pp=2,dp=1" in r.stdout, r.stdout


def test_vocab_padding_recomputed(daemon, make_ckpt, tmp_path):
    # 1100 rows: padded to 1152 (tp=1), 1280 (tp=2), 1536 (tp=4), 2048 (tp=8); Llama pads both the
    # embedding (first stage) and the output layer (last stage).
    vocab, h = 1100, 64
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "llama", (2, 2, 1), seed=25, style="llama", layers=4,
                         hidden=h, vocab=vocab)
    sd = daemon.step_dir("j", "1")
    names = {"embedding.word_embeddings.weight": 0, "output_layer.weight": -1}
    cur, version = (2, 2, 1), 1
    for to, padded in (((8, 1, 1), 2048), ((1, 2, 1), 1152), ((4, 4, 1), 1536), ((8, 2, 1), 2048), ((2, 2, 1), 1280)):
        tp, pp, _ = to
        r = repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version)
        version += 1
        assert r["bytes_fill"] == 2 * (padded - vocab) * h * 2, r
        check_current(daemon, "j", "1", oracles(to), version)
        cur = to
        rows = padded // tp
        for name, stage in names.items():
            p = stage % pp
            full = ck.full[name]
            for t in range(tp):
                a = np.load(os.path.join(sd, f"tp{t}-pp{p}", name + ".npy"))
                assert a.shape == (rows, h) and a.dtype == np.dtype("<u2"), (name, t, a.shape)
                lo, hi = t * rows, min((t + 1) * rows, vocab)
                n = max(0, hi - lo)
                assert np.array_equal(a[:n], full[lo:hi]), (to, name, t)
                assert not a[n:].any(), f"{to} {name} tp{t}: padding rows are not zero"
                if n < rows:
                    assert n == 0 or a[n - 1].any(), "the last logical row is all zeros (suspicious)"
            # The same slice inside the safetensors file, and the full view without padding.
            last = tp - 1
            got = ptcgen.read_safetensors(os.path.join(sd, f"tp{last}-pp{p}.safetensors"))
            dt, arr = got[name]
            assert dt == "BF16" and arr.shape == (rows, h)
            n = max(0, vocab - last * rows)
            assert np.array_equal(arr[:n], full[last * rows:]) and not arr[n:].any()
            f = np.load(os.path.join(sd, "full", name + ".npy"))
            assert f.shape == (vocab, h) and np.array_equal(f, full)


def test_open_files_keep_old_version_and_its_blobs_are_freed(daemon, make_ckpt, tmp_path):
    A, B = (2, 2, 1), (4, 1, 1)
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", A, seed=26, **GPT)
    # A daemon that does the same repartitions with nothing open shows what our blobs must come to.
    ref_count, ref_bytes = reference_blob_usage(str(tmp_path / "ref"), ck, [B, A], like=daemon)

    repartition(daemon, "j", "1", B, frm=A, ptc=ck.ptc, version=1)
    ob = oracles(B)
    check_current(daemon, "j", "1", ob, 2)
    sd = daemon.step_dir("j", "1")
    dense = "layers.0.self_attention.dense.weight"
    held = {  # path in the mount -> the bytes it must keep serving
        "tp0-pp0.safetensors": open(ob.shard_path(0, 0), "rb").read(),  # also a shard of A, other bytes
        "tp3-pp0.safetensors": open(ob.shard_path(3, 0), "rb").read(),  # not a shard of A
        "ptc.json": None,
        f"tp1-pp0/{dense}.npy": None,
        f"full/{dense}.npy": None,
    }
    fds = {}
    for rel in held:
        fds[rel] = os.open(os.path.join(sd, rel), os.O_RDONLY)
        data = os.pread(fds[rel], 1 << 24, 0)  # the whole file, into the page cache too
        if held[rel] is not None:
            assert data == held[rel], rel
        held[rel] = data
    assert json.loads(held["ptc.json"])["parallelism"] == {"tp": 4, "pp": 1, "dp": 1}
    assert np.array_equal(np.load(os.path.join(sd, f"tp1-pp0/{dense}.npy")), ob.slices[(1, 0)][dense])
    try:
        repartition(daemon, "j", "1", A, frm=B, ptc=ck.ptc, version=2)
        usage_open = blob_usage(daemon)
        # Old bytes through the old descriptors, from the start and from the middle.
        for rel, want in held.items():
            assert os.pread(fds[rel], len(want) + 4096, 0) == want, f"{rel}: held file changed"
            mid = len(want) // 3
            assert os.pread(fds[rel], 1000, mid) == want[mid:mid + 1000], rel
        # Fresh opens see the new layout, while the old files are still open.
        check_current(daemon, "j", "1", ck, 3)
        assert not os.path.exists(os.path.join(sd, "tp3-pp0.safetensors"))
        assert open(os.path.join(sd, "tp0-pp0.safetensors"), "rb").read() == open(ck.shard_path(0, 0), "rb").read()
        for rel, want in held.items():  # and the old descriptors still serve the old bytes
            assert os.pread(fds[rel], len(want) + 4096, 0) == want, f"{rel}: held file changed"
    finally:
        for fd in fds.values():
            os.close(fd)
    # The old version kept blobs of its own (else this test proves nothing about freeing them) ...
    assert usage_open[1] > ref_bytes, (usage_open[:2], ref_count, ref_bytes)
    # ... and once the last reader is gone they go.
    wait_for(lambda: blob_usage(daemon)[:2] == (ref_count, ref_bytes), 15,
             lambda: f"blobs {blob_usage(daemon)[:2]} (with the old version held: {usage_open[:2]}), "
                     f"want (count, bytes) {(ref_count, ref_bytes)} as a daemon that held nothing")
    names = set(blob_usage(daemon)[2])
    daemon.restart()  # a restart removes every blob no version uses: nothing must be left to remove
    assert set(blob_usage(daemon)[2]) == names
    check_current(daemon, "j", "1", ck, 3)


def test_files_held_across_several_repartitions(daemon, make_ckpt, tmp_path):
    """Each open file keeps its own version while later ones come and go; all are freed at the end."""
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "llama", (2, 2, 1), seed=32, **LLAMA)
    sd = daemon.step_dir("j", "1")
    chain = [(8, 1, 1), (1, 4, 1), (4, 2, 2), (2, 2, 1)]
    held = []  # (fd, path, bytes it must keep serving)
    cur, version = (2, 2, 1), 1
    try:
        for to in chain:
            o = oracles(cur)
            for rel in ("tp0-pp0.safetensors", f"tp{cur[0] - 1}-pp{cur[1] - 1}.safetensors"):
                fd = os.open(os.path.join(sd, rel), os.O_RDONLY)
                held.append((fd, f"v{version}:{rel}", os.pread(fd, 1 << 24, 0)))
                t, p = int(rel[2:rel.index("-")]), int(rel[rel.index("pp") + 2:rel.index(".")])
                assert held[-1][2] == open(o.shard_path(t, p), "rb").read(), held[-1][1]
            repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version)
            cur, version = to, version + 1
            for fd, what, want in held:
                assert os.pread(fd, len(want) + 1, 0) == want, f"{what} changed after the switch to v{version}"
        check_current(daemon, "j", "1", ck, version)
    finally:
        for fd, _, _ in held:
            os.close(fd)
    # With nothing open, the blobs come down to what the current version needs: a restart frees nothing more.
    want = reference_blob_usage(str(tmp_path / "ref"), ck, chain, like=daemon)
    wait_for(lambda: blob_usage(daemon)[:2] == want, 15,
             lambda: f"blobs (count, bytes) {blob_usage(daemon)[:2]}, want {want} as a daemon that held nothing")
    names = set(blob_usage(daemon)[2])
    daemon.restart()
    assert set(blob_usage(daemon)[2]) == names
    check_current(daemon, "j", "1", ck, version)


def test_blob_bytes_bounded_over_round_trips(daemon, make_ckpt, tmp_path):
    A, B, C = (2, 2, 1), (4, 1, 1), (1, 4, 2)
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", A, seed=27, **GPT)
    imported = ck.summary["bytes"]
    assert blob_usage(daemon)[1] == imported
    version, cur, history = 1, A, []
    for trip in range(6):
        for to in (B, C, A):
            repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version)
            version, cur = version + 1, to
        history.append(blob_usage(daemon)[:2])  # (count, bytes), nothing open
    check_current(daemon, "j", "1", ck, version)
    assert version == 1 + 18
    # Replaced versions' blobs go: the later round trips hold no more than the first ones did ...
    peak = max(b for _, b in history[:3])
    wait_for(lambda: blob_usage(daemon)[1] <= peak, 15,
             lambda: f"blobs keep growing: {blob_usage(daemon)[:2]} now, (count, bytes) after each round trip: "
                     f"{history} ({imported} bytes imported)")
    assert max(b for _, b in history[3:]) <= peak, history
    # ... and hold at most twice the checkpoint.
    wait_for(lambda: blob_usage(daemon)[1] <= 2 * imported, 15,
             lambda: f"after 6 round trips the blobs hold {blob_usage(daemon)[1]} bytes in {blob_usage(daemon)[0]} "
                     f"files, more than 2 x the {imported} imported; (count, bytes) after each round trip: {history}")


def test_reply_byte_counters_add_up(daemon, make_ckpt, tmp_path):
    """bytes_remapped + bytes_compacted + bytes_fill == bytes_total, none out of range, for dry and real
    runs, through tp changes that move the vocabulary padding (1100 rows) and pp changes."""
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "llama", (2, 2, 1), seed=33, style="llama", layers=4,
                         hidden=64, vocab=1100)
    cur, version, bad = (2, 2, 1), 1, []
    for to in ((8, 1, 1), (1, 2, 1), (4, 4, 1), (8, 2, 1), (1, 1, 1), (2, 4, 1), (2, 2, 1)):
        for dry in (True, False):
            r = repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version, dry_run=dry)
            try:
                check_byte_counters(r)
            except AssertionError as e:
                bad.append(f"{par_str(cur)} -> {par_str(to)}{' (dry run)' if dry else ''}: {e}")
        cur, version = to, version + 1
        check_current(daemon, "j", "1", oracles(to), version, full_views=False)
    assert not bad, "\n".join(bad)


def test_dry_run_changes_nothing_and_matches_real_run(daemon, make_ckpt, tmp_path):
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", (2, 2, 1), seed=28, **GPT)
    sd = daemon.step_dir("j", "1")
    cur, version = (2, 2, 1), 1
    for to in ((8, 1, 1), (1, 4, 2), (4, 2, 1), (2, 2, 1)):
        before = snapshot(sd)
        ls_before = daemon.cli_json("ls", "j/1", "--json")
        blobs_before = blob_usage(daemon)[2]
        dry = repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version, dry_run=True)
        dry2 = repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version, dry_run=True)
        assert {k: dry[k] for k in PLAN_KEYS} == {k: dry2[k] for k in PLAN_KEYS}
        assert snapshot(sd) == before
        assert daemon.cli_json("ls", "j/1", "--json") == ls_before
        assert blob_usage(daemon)[2] == blobs_before
        human = daemon.cli("repartition", "--job", "j", "--step", "1", "--to", par_str(to), "--dry-run").stdout
        assert par_str(cur) in human and par_str(to) in human, human
        assert snapshot(sd) == before and step_version(daemon, "j", "1") == version

        real = repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version)
        mismatch = {k: (dry[k], real[k]) for k in PLAN_KEYS if dry[k] != real[k]}
        assert not mismatch, f"{par_str(cur)} -> {par_str(to)}: dry run vs real run (dry, real): {mismatch}"
        version += 1
        cur = to
        check_current(daemon, "j", "1", oracles(to), version)


def test_new_layout_survives_restart(daemon, make_ckpt, tmp_path):
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "llama", (2, 2, 1), seed=29, **LLAMA)
    repartition(daemon, "j", "1", (4, 4, 1), frm=(2, 2, 1), ptc=ck.ptc, version=1)
    repartition(daemon, "j", "1", (8, 1, 2), frm=(4, 4, 1), ptc=ck.ptc, version=2)
    sd = daemon.step_dir("j", "1")
    before = snapshot(sd)
    ls_before = daemon.cli_json("ls", "j/1", "--json")
    blobs_before = blob_usage(daemon)[2]
    assert daemon.stop(cleanup_mount=False) == 0
    daemon.start()
    assert snapshot(sd) == before  # same bytes, same inode numbers
    assert daemon.cli_json("ls", "j/1", "--json") == ls_before
    assert blob_usage(daemon)[2] == blobs_before
    check_current(daemon, "j", "1", oracles((8, 1, 2)), 3)
    # Versions go on from the persisted one.
    repartition(daemon, "j", "1", (1, 2, 1), frm=(8, 1, 2), ptc=ck.ptc, version=3)
    daemon.restart()
    check_current(daemon, "j", "1", oracles((1, 2, 1)), 4)


def test_cli_help_and_human_output(daemon, make_ckpt, tmp_path):
    r = daemon.cli("repartition", "--help")
    assert r.returncode == 0 and "--to" in r.stdout and "--dry-run" in r.stdout, r.stdout
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", (2, 2, 1), seed=30, **GPT)
    r = daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1,dp=2")
    assert "tp=2,pp=2,dp=1" in r.stdout and "tp=4,pp=1,dp=2" in r.stdout, r.stdout
    assert not r.stderr.strip() or "error" not in r.stderr, r.stderr
    check_current(daemon, "j", "1", oracles((4, 1, 2)), 2)
    # Missing required options are usage errors, not requests.
    r = daemon.cli("repartition", "--job", "j", "--step", "1", check=False)
    assert r.returncode != 0 and "--to" in r.stderr, r.stderr
    assert_error(daemon.cli("repartition", "--job", "j", "--step", "1", "--to", "tp=4,pp=1", check=False), "tp=4,pp=1")
    check_current(daemon, "j", "1", oracles((4, 1, 2)), 2)


def test_concurrent_readers_see_whole_versions(daemon, make_ckpt, tmp_path):
    """Files opened and read while repartitions commit show one whole version each: a shard file, a
    per-shard .npy and ptc.json equal those of one of the layouts in play, and the full view never changes."""
    layouts = [(2, 2, 1), (4, 1, 1), (1, 4, 1), (8, 2, 1)]
    ck, oracles = _setup(daemon, make_ckpt, tmp_path, "gpt", layouts[0], seed=31, **GPT)
    sd = daemon.step_dir("j", "1")
    name = "layers.0.self_attention.dense.weight"  # layer 0: on stage 0 in every layout
    valid = {"tp0-pp0.safetensors": set(), f"tp0-pp0/{name}.npy": set(), "ptc.json": set()}
    for par in layouts:
        o = oracles(par)
        valid["tp0-pp0.safetensors"].add(open(o.shard_path(0, 0), "rb").read())
        valid["ptc.json"].add(json.dumps(o.ptc, sort_keys=True))
    full = read_file(os.path.join(sd, f"full/{name}.npy"))
    stop = threading.Event()
    seen, bad = {}, []

    def reader():
        while not stop.is_set():
            for rel in ("tp0-pp0.safetensors", f"tp0-pp0/{name}.npy", "ptc.json", f"full/{name}.npy"):
                try:
                    data = read_file(os.path.join(sd, rel))
                except OSError as e:
                    bad.append((rel, f"errno {e.errno}"))
                    continue
                if rel == "ptc.json":
                    key = json.dumps(json.loads(data), sort_keys=True)
                    ok = key in valid[rel]
                elif rel.endswith(".safetensors"):
                    ok = data in valid[rel]
                elif rel.startswith("full/"):
                    ok = data == full
                else:  # the tp0 slice of `name` in whichever layout: check it against the full tensor
                    arr = np.load(io.BytesIO(data))
                    tp = ck.full[name].shape[1] // arr.shape[1]
                    spec = ck.ptc["tensors"][name]
                    ok = tp in (1, 2, 4, 8) and np.array_equal(arr, ptcgen.tp_slice(ck.full[name], spec, tp, 0))
                seen[rel] = seen.get(rel, 0) + 1
                if not ok:
                    bad.append((rel, len(data)))

    th = threading.Thread(target=reader)
    th.start()
    try:
        cur, version = layouts[0], 1
        for k in range(40):
            to = layouts[(k + 1) % len(layouts)]
            repartition(daemon, "j", "1", to, frm=cur, ptc=ck.ptc, version=version)
            cur, version = to, version + 1
    finally:
        stop.set()
        th.join(timeout=60)
    assert not bad, f"reads that matched no whole version: {bad[:10]} ({len(bad)} in all; reads: {seen})"
    assert all(n >= 10 for n in seen.values()), seen
    check_current(daemon, "j", "1", oracles(cur), version)


# The same chains with re-cut slices left strided (never compacted): every read of a re-cut
# slice walks strided extents, and later re-cuts compose them.
def test_gpt_round_trip_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    test_gpt_every_tp_pp_and_round_trip(remap_daemon, make_ckpt, tmp_path)


def test_llama_round_trip_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    test_llama_chain_with_dp_changes_round_trip(remap_daemon, make_ckpt, tmp_path)


def test_padding_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    test_vocab_padding_recomputed(remap_daemon, make_ckpt, tmp_path)


def test_open_files_and_blobs_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    test_open_files_keep_old_version_and_its_blobs_are_freed(remap_daemon, make_ckpt, tmp_path)


def test_blob_bytes_bounded_with_strided_slices(remap_daemon, make_ckpt, tmp_path):
    test_blob_bytes_bounded_over_round_trips(remap_daemon, make_ckpt, tmp_path)
