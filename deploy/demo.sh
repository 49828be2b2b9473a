#!/usr/bin/env bash
# ptcfs demo (what `make demo` runs): start a daemon on a temporary data dir and mount point,
# generate a GPT-style checkpoint of about 100 MB (tp=2, pp=2), import it, list it, read
# tensors back through the FUSE mount, checking them against the generator's reference output,
# save the same checkpoint into the mount with cp -r and read it back,
# add a JSONL dataset and record some training progress, then repartition it to
# tp=4,pp=1,dp=2 and check every new shard byte for byte and the dataset's two rank views
# against the documented sample order.
#
# Environment: PTCFS_BUILD (build dir, default <repo>/build), PTCFS_DEMO_PORT (default 7071),
# PTCFS_DEMO_MB (checkpoint size in MB, default 100), PTCFS_DEMO_KEEP=1 keeps the temp dirs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${PTCFS_BUILD:-$REPO/build}"
PTCFSD="$BUILD/daemon/ptcfsd"
PTCFS="$BUILD/cli/ptcfs"
PY="${PTCFS_PYTHON:?set it to the project venv python, as make demo does (docs/PYTHON.md)}"
PORT="${PTCFS_DEMO_PORT:-7071}"
ADDR="127.0.0.1:$PORT"
MB="${PTCFS_DEMO_MB:-100}"
JOB=gpt
STEP=1000

for b in "$PTCFSD" "$PTCFS"; do
  if [[ ! -x "$b" ]]; then
    echo "demo: $b not found; build first (make build) or set PTCFS_BUILD" >&2
    exit 1
  fi
done

WORK="$(mktemp -d -t ptcfs-demo.XXXXXX)"
WORK="$(realpath "$WORK")"
DATA="$WORK/data"
MNT="$WORK/mnt"
CKPT="$WORK/ckpt"
REF="$WORK/ref"
LOG="$WORK/ptcfsd.log"
mkdir -p "$DATA" "$MNT"
DAEMON_PID=""
declare -a SUMMARY=()

is_mounted() { awk -v m="$MNT" '$2 == m { found = 1 } END { exit !found }' /proc/mounts; }

cleanup() {
  local rc=$?
  set +e
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
      echo "demo: ptcfsd did not stop on SIGTERM; killing it" >&2
      kill -KILL "$DAEMON_PID"
    fi
    wait "$DAEMON_PID" 2>/dev/null
  fi
  for _ in 1 2 3; do
    is_mounted || break
    fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
  done
  if [[ "${PTCFS_DEMO_KEEP:-0}" == 1 ]]; then
    echo "demo: kept $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# run_step "what it does" command...: prints the step, runs it, times it; a failure ends the demo.
run_step() {
  local what="$1"; shift
  echo
  echo "==> $what"
  echo "    \$ $*"
  local t0 t1 rc=0
  t0="$(now)"
  "$@" || rc=$?
  t1="$(now)"
  local secs; secs="$(elapsed "$t0" "$t1")"
  printf '    [%s s]\n' "$secs"
  if [[ $rc -ne 0 ]]; then
    SUMMARY+=("$(printf '%8s s  FAIL  %s' "$secs" "$what")")
    echo "demo: step failed (exit $rc): $what" >&2
    if [[ -f "$LOG" ]]; then echo "--- ptcfsd log (tail) ---" >&2; tail -n 40 "$LOG" >&2; fi
    print_summary
    exit 1
  fi
  SUMMARY+=("$(printf '%8s s  ok    %s' "$secs" "$what")")
}

print_summary() {
  echo
  echo "==> summary"
  local s; for s in "${SUMMARY[@]}"; do echo "  $s"; done
}

start_daemon() {
  "$PTCFSD" --data "$DATA" --mount "$MNT" --listen "$ADDR" >>"$LOG" 2>&1 &
  DAEMON_PID=$!
  local deadline=$((SECONDS + 20))
  while (( SECONDS < deadline )); do
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
      echo "demo: ptcfsd exited while starting" >&2
      return 1
    fi
    if "$PTCFS" --daemon "$ADDR" status --json >/dev/null 2>&1 && is_mounted; then
      echo "    ptcfsd pid $DAEMON_PID, data $DATA, mount $MNT, listening on $ADDR"
      return 0
    fi
    sleep 0.1
  done
  echo "demo: ptcfsd not ready after 20 s" >&2
  return 1
}

cli() { "$PTCFS" --daemon "$ADDR" "$@"; }

echo "ptcfs demo: build $BUILD, work dir $WORK"

run_step "generate a GPT-style checkpoint of about $MB MB (tp=2, pp=2, 4 layers) and its reference tensors" \
  "$PY" "$REPO/tests/tools/ptcgen.py" "$CKPT" --style gpt --tp 2 --pp 2 --dp 1 --layers 4 --vocab 50257 \
  --seed 0 --target-mb "$MB" --ref "$REF"
run_step "checkpoint directory" ls -l "$CKPT"
run_step "start ptcfsd" start_daemon
run_step "import the checkpoint as $JOB/$STEP" cli import "$CKPT" --job "$JOB" --step "$STEP"
run_step "list jobs" cli ls
run_step "list step $JOB/$STEP" cli ls "$JOB/$STEP"
run_step "daemon status" cli status
run_step "the step in the mount" ls -l "$MNT/$JOB/$STEP"

check_views() {
  "$PY" - "$MNT/$JOB/$STEP" "$CKPT" "$REF" "$REPO/tests/tools" <<'EOF'
import json, os, sys, time
import numpy as np
step, ckpt, ref, tools = sys.argv[1:5]
sys.path.insert(0, tools)
import ptcgen

with open(os.path.join(step, "ptc.json")) as f:
    ptc = json.load(f)
tp = ptc["parallelism"]["tp"]
failed = 0

def check(what, fn):
    global failed
    t0 = time.monotonic()
    try:
        ok, detail = fn()
    except Exception as e:  # a read error is a failure, reported as such
        ok, detail = False, repr(e)
    dt = time.monotonic() - t0
    print(f"    {'PASS' if ok else 'FAIL'}  {what}  ({detail}; {dt:.2f} s)")
    if not ok:
        failed += 1

def load(path):
    a = np.load(path, allow_pickle=False)
    return a, f"{a.dtype.str} {list(a.shape)}"

def full_view(name):
    def fn():
        got, d = load(os.path.join(step, "full", name + ".npy"))
        want = np.load(os.path.join(ref, name + ".npy"))
        return got.dtype == want.dtype and np.array_equal(got, want), d
    return fn

def shard_view(t, p, name):
    def fn():
        got, d = load(os.path.join(step, f"tp{t}-pp{p}", name + ".npy"))
        want = ptcgen.tp_slice(np.load(os.path.join(ref, name + ".npy")), ptc["tensors"][name], tp, t)
        return got.dtype == want.dtype and np.array_equal(got, want), d
    return fn

def rank_file(t, p):
    def fn():
        path = os.path.join(step, f"tp{t}-pp{p}.safetensors")
        t0 = time.monotonic()
        with open(path, "rb") as f:
            got = f.read()
        mbs = len(got) / 1e6 / max(time.monotonic() - t0, 1e-9)
        with open(os.path.join(ckpt, f"tp{t}-pp{p}.safetensors"), "rb") as f:
            want = f.read()
        return got == want and os.stat(path).st_size == len(got), f"{len(got)} bytes, {mbs:.0f} MB/s"
    return fn

check("full/embedding.word_embeddings.weight.npy == reference (vocab 50257, padding excluded)",
      full_view("embedding.word_embeddings.weight"))
check("full/layers.0.mlp.dense_h_to_4h.weight.npy == reference", full_view("layers.0.mlp.dense_h_to_4h.weight"))
check("tp1-pp0/embedding.word_embeddings.weight.npy == rank 1's padded slice",
      shard_view(1, 0, "embedding.word_embeddings.weight"))
check("tp1-pp1/layers.3.mlp.dense_h_to_4h.weight.npy == rank 1's slice of both fused parts",
      shard_view(1, 1, "layers.3.mlp.dense_h_to_4h.weight"))
check("tp0-pp1/layers.2.self_attention.dense.weight.npy == rank 0's column slice",
      shard_view(0, 1, "layers.2.self_attention.dense.weight"))
check("tp0-pp1/extra/rng_state.npy == reference (a tensor name with a slash)",
      shard_view(0, 1, "extra/rng_state"))
check("tp1-pp1.safetensors is byte-identical to the generated rank file", rank_file(1, 1))
sys.exit(1 if failed else 0)
EOF
}
run_step "read tensors through the mount and compare with the reference" check_views

SAVED=2000
save_into_mount() {
  mkdir "$MNT/$JOB/$SAVED" && cp -r "$CKPT/." "$MNT/$JOB/$SAVED/" || return 1
  # The daemon commits once every shard is complete and closed (just after the last close).
  local deadline=$((SECONDS + 30))
  until cli ls "$JOB/$SAVED" --json | "$PY" -c 'import json,sys; sys.exit(json.load(sys.stdin)["state"] != "committed")'; do
    (( SECONDS < deadline )) || { echo "    $JOB/$SAVED never committed" >&2; return 1; }
    sleep 0.1
  done
  local f
  for f in "$CKPT"/*.safetensors; do cmp "$f" "$MNT/$JOB/$SAVED/$(basename "$f")" || return 1; done
  echo "    committed; every shard reads back byte for byte"
}
run_step "save the same checkpoint into the mount as $JOB/$SAVED (mkdir, cp -r)" save_into_mount
run_step "list step $JOB/$SAVED" cli ls "$JOB/$SAVED"
run_step "remove it again" cli rm "$JOB/$SAVED"

DATASET="$WORK/train.jsonl"
make_dataset() {
  "$PY" - "$DATASET" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(1000):
        f.write(json.dumps({"id": i, "text": "sample %d " % i * (1 + i % 7)}) + "\n")
print("    1000 JSON lines")
EOF
}
run_step "write a JSONL dataset of 1000 samples" make_dataset
run_step "add it to $JOB: seed 7, global batch 8, dp from the job (1)" \
  cli dataset add --job "$JOB" --name train --format jsonl --seed 7 --global-batch 8 "$DATASET"
run_step "training consumed 10 global batches" cli dataset progress --job "$JOB" --name train --consumed 80

TO="tp=4,pp=1,dp=2"
run_step "plan a repartition of $JOB/$STEP to $TO (dry run)" cli repartition --job "$JOB" --step "$STEP" --to "$TO" --dry-run
run_step "repartition $JOB/$STEP to $TO" cli repartition --job "$JOB" --step "$STEP" --to "$TO"
run_step "list step $JOB/$STEP after the repartition" cli ls "$JOB/$STEP"

check_repartitioned() {
  "$PY" - "$MNT/$JOB/$STEP" "$REF" "$REPO/tests/tools" <<'EOF'
import json, os, sys, time
import numpy as np
step, ref, tools = sys.argv[1:4]
sys.path.insert(0, tools)
import ptcgen

with open(os.path.join(step, "ptc.json")) as f:
    ptc = json.load(f)
par = ptc["parallelism"]
full = ptcgen.load_reference(ref, ptc)
want = ptcgen.shard_slices(ptc, tensors=full)
failed = 0
ok = par == {"tp": 4, "pp": 1, "dp": 2}
print(f"    {'PASS' if ok else 'FAIL'}  ptc.json shows the new parallelism ({par})")
failed += not ok
for (t, p), slices in sorted(want.items()):
    path = os.path.join(step, f"tp{t}-pp{p}.safetensors")
    t0 = time.monotonic()
    with open(path, "rb") as f:
        got = f.read()
    dt = max(time.monotonic() - t0, 1e-9)
    expect = ptcgen.safetensors_bytes({n: (ptc["tensors"][n]["dtype"], a) for n, a in slices.items()})
    ok = got == expect
    failed += not ok
    print(f"    {'PASS' if ok else 'FAIL'}  tp{t}-pp{p}.safetensors == the file tp=4,pp=1 would have saved "
          f"({len(got)} bytes, {len(got) / 1e6 / dt:.0f} MB/s)")
name = "embedding.word_embeddings.weight"
got = np.load(os.path.join(step, "tp3-pp0", name + ".npy"))
rows = full[name].shape[0] - 3 * got.shape[0]  # logical rows on rank 3; the rest is padding
ok = np.array_equal(got, want[(3, 0)][name]) and not got[rows:].any()
failed += not ok
print(f"    {'PASS' if ok else 'FAIL'}  tp3-pp0/{name}.npy: {rows} logical rows, {got.shape[0] - rows} zero rows "
      f"of padding recomputed for tp=4")
sys.exit(1 if failed else 0)
EOF
}
run_step "read the repartitioned shards through the mount and compare with what tp=4,pp=1 would save" \
  check_repartitioned

check_dataset() {
  "$PY" - "$MNT/$JOB/data/train" "$DATASET" "$REPO/tests/tools" <<'EOF'
import json, os, sys
folder, src, tools = sys.argv[1:4]
sys.path.insert(0, tools)
import ptcds
with open(src, "rb") as f:
    samples = f.read().split(b"\n")[:-1]
with open(os.path.join(folder, "state.json")) as f:
    st = json.load(f)
ranks = []
for d in range(2):
    with open(os.path.join(folder, f"dp{d}.jsonl"), "rb") as f:
        ranks.append(f.read().split(b"\n")[:-1])
merged = [x for b in range(len(ranks[0]) // 4) for r in ranks for x in r[b * 4:(b + 1) * 4]]
order = ptcds.epoch_order(7, 0, 1000)
checks = [(st["dp"] == 2 and st["consumed"] == 80, f"state.json: dp {st['dp']}, consumed {st['consumed']}"),
          (merged == [samples[i] for i in order[80:1000]],
           f"dp0.jsonl and dp1.jsonl interleaved = the remaining {len(merged)} samples in the global order")]
for ok, what in checks:
    print(f"    {'PASS' if ok else 'FAIL'}  {what}")
sys.exit(0 if all(ok for ok, _ in checks) else 1)
EOF
}
run_step "the dataset was re-split for dp=2: read both rank views and check the global order" check_dataset

stop_daemon() {
  kill -TERM "$DAEMON_PID"
  local rc=0
  wait "$DAEMON_PID" || rc=$?
  DAEMON_PID=""
  if is_mounted; then
    echo "demo: the mount is still there after ptcfsd exited" >&2
    return 1
  fi
  echo "    ptcfsd exited with status $rc; $MNT unmounted"
  return "$rc"
}
run_step "stop ptcfsd (SIGTERM)" stop_daemon

print_summary
echo
echo "demo: all checks passed"
