#!/usr/bin/env bash
# make test-gpu: every test that needs a GPU. Without one it says so and exits non-zero; it
# never skips silently. PTCFS_BUILD: the build folder; PTCFS_PYTHON: an interpreter whose torch
# has CUDA (else the first of python3, /usr/bin/python3 whose torch sees a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PTCFS_BUILD="${PTCFS_BUILD:-$PWD/build}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test-gpu: no GPU on this machine (nvidia-smi finds none); no GPU test ran" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ ! -f "$PTCFS_BUILD/client/libptcfs_client.so" ]; then
  echo "test-gpu: $PTCFS_BUILD/client/libptcfs_client.so is missing (build first)" >&2
  exit 1
fi
py=""
for c in ${PTCFS_PYTHON:-} python3 /usr/bin/python3; do
  if "$c" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "test-gpu: no Python whose torch sees a CUDA device (set PTCFS_PYTHON); no GPU test ran" >&2
  exit 1
fi
echo "test-gpu: $py, torch $("$py" -c 'import torch; print(torch.__version__)')"
exec "$py" -m pytest -q -p no:cacheprovider tests/gpu "$@"
