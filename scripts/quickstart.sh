#!/usr/bin/env bash
# README quick start command 1: install what is needed, then bring up a 4-node lab of
# network namespaces (a fabric with etcd, four nodes with agents and health endpoints)
# and show what node1 sees. Tear it down with: .venv/bin/meshhealth lab down
# Extra arguments go to `meshhealth lab up` (e.g. --nodes 8, --clusters 2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLER_PWD="$PWD"
if [[ $(id -u) -ne 0 ]]; then
  echo "quickstart: the lab builds network namespaces: run as root (sudo $0)" >&2
  exit 2
fi
# shellcheck source=scripts/setup.sh
source "$ROOT/scripts/setup.sh"
# Back to the caller's directory: the commands `lab up` prints at the end name the
# program by its path from there (.venv/bin/meshhealth when run from the clone), since
# the virtualenv is on PATH only inside this script.
cd "$CALLER_PWD"
exec meshhealth lab up --nodes 4 "$@"
