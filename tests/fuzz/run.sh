#!/usr/bin/env bash
# Runs every fuzz target of build-fuzz/ for SECONDS each (default 30): first the regression
# inputs of tests/fuzz/regressions/<target>/ (each a crash once found, now fixed), then
# libFuzzer from the seed corpus (tests/fuzz/make_seeds.py) and the corpus kept in
# build-fuzz/corpus/<target>/ from earlier runs. Prints one line per target (runs, coverage)
# and exits 1 at the first crash, leaking or hanging input, which stays in build-fuzz/crashes/.
# FUZZ_TARGETS="npy frame" runs only those targets; FUZZ_SEEDS=DIR puts the seeds elsewhere (two runs at once).
set -euo pipefail
SECONDS_EACH=${1:-30}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
SEEDS=${FUZZ_SEEDS:-$BUILD/seeds}
rm -rf "$SEEDS"
"${PTCFS_PYTHON:?the project venv python, as make fuzz sets it}" "$ROOT/tests/fuzz/make_seeds.py" "$SEEDS"
mkdir -p "$BUILD/crashes"
status=0
for bin in "$BUILD"/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); target=${name#fuzz_}
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $target "* ]]; then continue; fi
  corpus=$BUILD/corpus/$target
  mkdir -p "$corpus" "$SEEDS/$target"
  regress=$ROOT/tests/fuzz/regressions/$target
  if [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    if ! "$bin" -runs=1 "$regress"/* > "$BUILD/$target.regress.log" 2>&1; then
      echo "fuzz $target: a regression input fails again (log: $BUILD/$target.regress.log)"; status=1; continue
    fi
  fi
  log=$BUILD/$target.log
  if "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$BUILD/crashes/$target-" -print_final_stats=1 "$corpus" "$SEEDS/$target" > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    echo "fuzz $target: ${runs} runs in ${SECONDS_EACH} s, coverage ${cov} edges, corpus $(ls "$corpus" | wc -l) inputs, no crash"
  else
    echo "fuzz $target: FAILED (log: $log; input in $BUILD/crashes/)"; tail -30 "$log"; status=1
  fi
done
exit $status
