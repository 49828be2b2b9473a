#!/usr/bin/env bash
# Starts N ptcfsd daemons on loopback as one cluster, for experiments: a secret, a cluster.json,
# and per node a data dir, a mount point and a port. Prints how to talk to them; stops them on
# Ctrl-C (SIGINT/SIGTERM to this script).
#
# Usage: deploy/local-cluster.sh [N=3] [BASE_PORT=7300] [DIR=/tmp/ptcfs-cluster]
# Environment: PTCFS_BUILD (build dir, default <repo>/build).
set -euo pipefail
N="${1:-3}"
BASE="${2:-7300}"
DIR="${3:-/tmp/ptcfs-cluster}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${PTCFS_BUILD:-$REPO/build}"

mkdir -p "$DIR"
if [[ ! -s "$DIR/secret" ]]; then
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/secret"
  chmod 600 "$DIR/secret"
fi
{
  echo '{"secret_file": "secret", "nodes": ['
  for i in $(seq 0 $((N - 1))); do
    sep=","; [[ $i -eq $((N - 1)) ]] && sep=""
    echo "  {\"id\": \"n$i\", \"addr\": \"127.0.0.1:$((BASE + i))\", \"gpus\": 2}$sep"
  done
  echo ']}'
} > "$DIR/cluster.json"

pids=()
stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
}
trap stop EXIT INT TERM
for i in $(seq 0 $((N - 1))); do
  "$BUILD/daemon/ptcfsd" --data "$DIR/n$i/data" --mount "$DIR/n$i/mnt" \
    --cluster "$DIR/cluster.json" --node "n$i" >>"$DIR/n$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 0 $((N - 1))); do
  for _ in $(seq 100); do
    "$BUILD/cli/ptcfs" --daemon "127.0.0.1:$((BASE + i))" --secret-file "$DIR/secret" status >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$BUILD/cli/ptcfs" --daemon "127.0.0.1:$((BASE + i))" --secret-file "$DIR/secret" status
done
echo
echo "cluster of $N nodes in $DIR; for example:"
echo "  PTCFS_SECRET_FILE=$DIR/secret $BUILD/cli/ptcfs --daemon 127.0.0.1:$BASE status --json"
echo "logs: $DIR/n*.log; Ctrl-C stops the daemons"
wait
