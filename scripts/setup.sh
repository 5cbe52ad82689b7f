#!/usr/bin/env bash
# Installs what meshhealth needs on a Debian machine, idempotently:
#   - Debian packages (etcd, iproute2, nftables, fping, tmux; for the tests of deploy/ and
#     of the web page: promtool from prometheus, systemd-analyze from systemd, chromium,
#     libatomic1 for playwright's driver, curl) through apt-get when missing
#   - python3 and, when uv is missing, python3-pip to install it (a minimal Debian, e.g. a
#     stock container, has neither)
#   - uv, then the virtualenv .venv from pyproject.toml + uv.lock (locked, reproducible)
# Sourced by scripts/test.sh and scripts/quickstart.sh; safe to run by itself.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

# binary -> Debian package that provides it
declare -A NEEDED=(
  [python3]=python3
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [ip]=iproute2
  [nft]=nftables
  [fping]=fping
  [tmux]=tmux
  [promtool]=prometheus
  [systemd-analyze]=systemd
  [chromium]=chromium
  [openssl]=openssl
  [update-ca-certificates]=ca-certificates
  [curl]=curl
)

missing=()
for bin in "${!NEEDED[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${NEEDED[$bin]}")
done
# libraries, not binaries: playwright's node driver (the web page's tests) needs libatomic
for lib in libatomic1; do
  dpkg-query -W -f='${Status}' "$lib" 2>/dev/null | grep -q "ok installed" || missing+=("$lib")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]} (run as root, or: apt-get install ${missing[*]})" >&2
    exit 2
  fi
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if ! command -v uv >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    # a minimal Debian (a stock container) has python3 without pip
    echo "setup: installing Debian package python3-pip (to install uv)" >&2
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends python3-pip >&2
  fi
  echo "setup: installing uv" >&2
  python3 -m pip install --quiet --disable-pip-version-check uv >&2 \
    || python3 -m pip install --quiet --break-system-packages uv >&2
  hash -r
fi
if ! command -v uv >/dev/null 2>&1; then
  # pip may have put it in a user bin directory that is not on PATH
  PATH="$(python3 -m site --user-base)/bin:$PATH"
  export PATH
fi

cd "$ROOT"
# uv trusts the system's CA store (ca-certificates, with a site's own CAs from
# /usr/local/share/ca-certificates), not only its built-in roots: behind a TLS-inspecting
# proxy PyPI is reachable as it is for apt and pip.
export UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-true}"
uv sync --locked --quiet
export PATH="$ROOT/.venv/bin:$PATH"
