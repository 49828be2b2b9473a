#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and the demo need (Debian's torch
# trains the elastic GPT example in the tests), and the Kubernetes schema validator the
# manifest test uses (npm, tests/tools/k8s-validate); iproute2 and nsenter (util-linux) put a
# node of the partition test in its own network namespace. With the argument `build`, only what
# compiling needs (deploy/Dockerfile); with `bench`, also what `make bench` needs (gnuplot).
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
  libglpk-dev
  prometheus-cpp-dev libcivetweb-dev
)
TEST_PACKAGES=(
  python3-numpy python3-pytest python3-torch python3-yaml
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
  *) echo "usage: install-deps.sh [build|bench]" >&2; exit 2 ;;
esac
# Node.js and npm for the manifest validator: the machine's own where it has them, else Debian's.
if [ "$mode" != build ]; then
  command -v node >/dev/null || PACKAGES+=(nodejs)
  command -v npm >/dev/null || PACKAGES+=(npm)
fi

# The Kubernetes schema validator's packages, pinned by its package-lock.json, into
# tests/tools/k8s-validate/node_modules (ignored by git); again only when the lock changed.
install_k8s_validator() {
  local dir=$ROOT/tests/tools/k8s-validate
  [ "$mode" = build ] && return 0
  if [ -f "$dir/node_modules/.package-lock.json" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    return 0
  fi
  echo "install-deps: installing the Kubernetes schema validator (npm ci in $dir)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  install_k8s_validator
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
install_k8s_validator
