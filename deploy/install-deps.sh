#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and the demo need, and the project's
# Python environment (deploy/python-env.sh: a venv of python/requirements.lock, torch 2.x and the
# frameworks from PyPI, cached outside the clone), which the tests, the demo, the examples and
# the benches run on. iproute2 and nsenter (util-linux) put a node of the partition test in its
# own network namespace. With the argument `build`, only what compiling needs (deploy/Dockerfile);
# with `bench`, also what `make bench` needs (gnuplot); with `gpu`, what compiling needs and no
# Python environment (make test-gpu: the GPU machine's own torch). Nothing here uses npm.
# Idempotent and quiet when everything is already there. Run as root.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

BUILD_PACKAGES=(
  build-essential cmake pkg-config git
  libfuse3-dev fuse3 libmount-dev
  libboost-dev libboost-system-dev
  librocksdb-dev
  nlohmann-json3-dev
  catch2
  libxxhash-dev
  libcli11-dev
  libfmt-dev
  libssl-dev
  libcurl4-openssl-dev
  libglpk-dev
  prometheus-cpp-dev libcivetweb-dev
)
TEST_PACKAGES=(
  python3 python3-venv
  etcd-server etcd-client openssl
  prometheus
  clang libclang-rt-14-dev clang-format
  iproute2 util-linux
)
mode=${1:-test}
case "$mode" in
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  test) PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  bench) PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}" gnuplot-nox) ;;
  gpu) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "usage: install-deps.sh [build|bench|gpu]" >&2; exit 2 ;;
esac
# The Python environment, after the Debian packages (its venv is made from /usr/bin/python3).
python_env() {
  case "$mode" in build|gpu) return 0 ;; esac
  bash "$ROOT/deploy/python-env.sh"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  python_env
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
python_env
