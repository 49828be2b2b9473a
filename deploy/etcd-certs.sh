#!/usr/bin/env bash
# Makes the certificates of etcd's TLS (docs/DEPLOY.md "etcd and TLS") with openssl:
#   OUT/ca.crt, ca.key          a CA of their own (keep ca.key offline)
#   OUT/server.crt, server.key  etcd's members: serves clients and peers, and is a client too
#                               (etcd's JSON gateway dials etcd's gRPC with it, and members
#                               dial each other with it), so it carries both usages
#   OUT/client.crt, client.key  the daemons' client certificate (CN ptcfsd)
# usage: etcd-certs.sh OUT [NAME...]   NAMEs: the DNS names and IP addresses etcd is reached at
# (default: the members of deploy/k8s/etcd.yaml). Valid for DAYS days (default 825).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: etcd-certs.sh OUT [NAME...]" >&2
  exit 2
fi
out=$1
shift
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(etcd-0.etcd.ptcfs.svc etcd-1.etcd.ptcfs.svc etcd-2.etcd.ptcfs.svc
         '*.etcd.ptcfs.svc' '*.etcd.ptcfs.svc.cluster.local' localhost 127.0.0.1)
fi
days=${DAYS:-825}
mkdir -p "$out"
cd "$out"
umask 077

san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
san=${san%,}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=ptcfs etcd CA" -keyout ca.key -out ca.crt \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

issue() {  # issue NAME CN EXTENSIONS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile <(printf '%s\n' "$3") -out "$1.crt" 2>/dev/null
  rm -f "$1.csr"
}
issue server etcd "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"
issue client ptcfsd "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
rm -f ca.srl
chmod 0644 ca.crt server.crt client.crt
echo "wrote $out/{ca,server,client}.{crt,key}"
