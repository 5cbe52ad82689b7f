#!/bin/sh
# meshhealth-certs: the compose lab's CA and certificates (gen-compose.sh --etcd-members
# M), made once into the etcd-pki volume with openssl (meshhealth.lab.certs): a server
# certificate per etcd member (its service name and address) and a client certificate
# `meshhealth` for the agents and etcdctl. Kept when the volume has them already.
#   usage: meshhealth-certs DIR --server etcd1=10.79.0.2 ... --client meshhealth
set -eu
exec python -m meshhealth.lab.certs "$@"
