#!/usr/bin/env bash
# Starts a local etcd and N ptcfsd daemons on loopback that register in it, for experiments:
# a secret, an etcd data dir, and per node a data dir, a mount point and a port. Prints how to
# talk to them; stops them all on Ctrl-C (SIGINT/SIGTERM to this script). With --static, no
# etcd: the daemons share a cluster.json instead.
#
# Usage: deploy/local-cluster.sh [--static] [N=3] [BASE_PORT=7300] [DIR=/tmp/ptcfs-cluster]
#   etcd listens on BASE_PORT-2 (clients) and BASE_PORT-1 (peers); node i on BASE_PORT+i.
# Environment: PTCFS_BUILD (build dir, default <repo>/build).
set -euo pipefail
STATIC=0
if [[ "${1:-}" == "--static" ]]; then STATIC=1; shift; fi
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,9p' "$0"; exit 0; fi
N="${1:-3}"
BASE="${2:-7300}"
DIR="${3:-/tmp/ptcfs-cluster}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${PTCFS_BUILD:-$REPO/build}"
ETCD_URL="http://127.0.0.1:$((BASE - 2))"

mkdir -p "$DIR"
if [[ ! -s "$DIR/secret" ]]; then
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/secret"
  chmod 600 "$DIR/secret"
fi

pids=()
stop() {
  # Daemons first (they leave etcd cleanly), then etcd.
  for p in "${pids[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
  [[ ${#pids[@]} -gt 0 ]] && kill -TERM "${pids[0]}" 2>/dev/null || true
  wait || true
}
trap stop EXIT INT TERM

if [[ $STATIC -eq 1 ]]; then
  {
    echo '{"secret_file": "secret", "nodes": ['
    for i in $(seq 0 $((N - 1))); do
      sep=","; [[ $i -eq $((N - 1)) ]] && sep=""
      echo "  {\"id\": \"n$i\", \"addr\": \"127.0.0.1:$((BASE + i))\", \"gpus\": 2}$sep"
    done
    echo ']}'
  } > "$DIR/cluster.json"
  pids+=(0)  # no etcd
else
  etcd --name local --data-dir "$DIR/etcd" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$((BASE - 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((BASE - 1))" \
    --initial-cluster "local=http://127.0.0.1:$((BASE - 1))" >>"$DIR/etcd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

for i in $(seq 0 $((N - 1))); do
  if [[ $STATIC -eq 1 ]]; then
    member=(--cluster "$DIR/cluster.json" --node "n$i")
  else
    member=(--etcd "$ETCD_URL" --node "n$i" --listen "127.0.0.1:$((BASE + i))" --gpus 2 --secret-file "$DIR/secret")
  fi
  "$BUILD/daemon/ptcfsd" --data "$DIR/n$i/data" --mount "$DIR/n$i/mnt" "${member[@]}" >>"$DIR/n$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 0 $((N - 1))); do
  for _ in $(seq 100); do
    "$BUILD/cli/ptcfs" --daemon "127.0.0.1:$((BASE + i))" --secret-file "$DIR/secret" status >/dev/null 2>&1 && break
    sleep 0.1
  done
done
"$BUILD/cli/ptcfs" --daemon "127.0.0.1:$BASE" --secret-file "$DIR/secret" status
echo
echo "cluster of $N nodes in $DIR$([[ $STATIC -eq 1 ]] || echo ", members in etcd at $ETCD_URL"); for example:"
echo "  PTCFS_SECRET_FILE=$DIR/secret $BUILD/cli/ptcfs --daemon 127.0.0.1:$BASE status --json"
[[ $STATIC -eq 1 ]] || echo "  ETCDCTL_API=3 etcdctl --endpoints $ETCD_URL get /ptcfs/ --prefix"
echo "logs: $DIR/n*.log; Ctrl-C stops the daemons"
wait
