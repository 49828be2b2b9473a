#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and the demo need (Debian's torch
# trains the elastic GPT example in the tests); with the argument `bench`, also what
# `make bench` needs (gnuplot for the plot). Idempotent and quiet when everything is already there. Run as root.
set -euo pipefail

PACKAGES=(
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
  python3-numpy python3-pytest python3-torch
  etcd-server etcd-client
  libglpk-dev
  prometheus-cpp-dev prometheus
  clang libclang-rt-14-dev
)
if [ "${1:-}" = "bench" ]; then
  PACKAGES+=(gnuplot-nox)
elif [ $# -gt 0 ]; then
  echo "usage: install-deps.sh [bench]" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
