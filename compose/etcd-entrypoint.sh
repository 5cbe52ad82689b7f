#!/bin/sh
# meshhealth-etcd: one etcd member of the compose lab (Debian's etcd-server), data in
# /var/lib/etcd (a named volume), clients on port 2379 of every address of the container.
#
# One member, plain http (the default file):
#   ETCD_LAB_NAME (etcd), ETCD_LAB_ADVERTISE (http://<hostname>:2379)
# A member of a multi-member etcd with TLS (gen-compose.sh --etcd-members 3):
#   ETCD_LAB_CLUSTER  the initial cluster, etcd1=https://etcd1:2380,etcd2=...
#   ETCD_LAB_PKI      the directory of the lab's CA and certificates (certs service):
#                     meshhealth-lab-ca.crt, <name>.crt, <name>.key; clients and peers
#                     must show a certificate of that CA.
# Arguments are passed on to etcd.
set -eu
name="${ETCD_LAB_NAME:-etcd}"
mkdir -p /var/lib/etcd
if [ -z "${ETCD_LAB_CLUSTER:-}" ]; then
    advertise="${ETCD_LAB_ADVERTISE:-http://$(hostname):2379}"
    exec etcd \
        --name "$name" \
        --data-dir "/var/lib/etcd/$name" \
        --listen-client-urls http://0.0.0.0:2379 \
        --advertise-client-urls "$advertise" \
        --listen-peer-urls http://127.0.0.1:2380 \
        --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster "$name=http://127.0.0.1:2380" \
        "$@"
fi

pki="${ETCD_LAB_PKI:-/etc/meshhealth/pki}"
for f in meshhealth-lab-ca.crt "$name.crt" "$name.key"; do
    if [ ! -r "$pki/$f" ]; then
        echo "meshhealth-etcd: $pki/$f is missing (the certs service makes it)" >&2
        exit 1
    fi
done
exec etcd \
    --name "$name" \
    --data-dir "/var/lib/etcd/$name" \
    --listen-client-urls https://0.0.0.0:2379 \
    --advertise-client-urls "https://$name:2379" \
    --listen-peer-urls https://0.0.0.0:2380 \
    --initial-advertise-peer-urls "https://$name:2380" \
    --initial-cluster "$ETCD_LAB_CLUSTER" \
    --initial-cluster-state new \
    --initial-cluster-token meshhealth-compose \
    --trusted-ca-file "$pki/meshhealth-lab-ca.crt" \
    --cert-file "$pki/$name.crt" \
    --key-file "$pki/$name.key" \
    --client-cert-auth \
    --peer-trusted-ca-file "$pki/meshhealth-lab-ca.crt" \
    --peer-cert-file "$pki/$name.crt" \
    --peer-key-file "$pki/$name.key" \
    --peer-client-cert-auth \
    "$@"
