#!/bin/sh
# meshhealth-etcd: the compose lab's single-member etcd (Debian's etcd-server), data in
# /var/lib/etcd (a named volume), clients on port 2379 of every address of the container.
# Arguments are passed on to etcd.
set -eu
name="${ETCD_LAB_NAME:-etcd}"
advertise="${ETCD_LAB_ADVERTISE:-http://$(hostname):2379}"
mkdir -p /var/lib/etcd
exec etcd \
    --name "$name" \
    --data-dir "/var/lib/etcd/$name" \
    --listen-client-urls http://0.0.0.0:2379 \
    --advertise-client-urls "$advertise" \
    --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$name=http://127.0.0.1:2380" \
    "$@"
