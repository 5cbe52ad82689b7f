#!/usr/bin/env bash
# Build the local base image `meshhealth-base:bookworm` from Debian packages, with
# debootstrap + `docker import`: for hosts that cannot pull `debian:bookworm-slim` from a
# registry (air-gapped labs, no Docker Hub). Then build the lab on it:
#
#   compose/build-base-image.sh
#   BASE_IMAGE=meshhealth-base:bookworm docker compose -f compose/docker-compose.yml build
#
# The image is a minimal Debian bookworm (debootstrap --variant=minbase, docs and apt
# lists removed, the same dpkg excludes as the official slim images). When the image
# already exists the script says so and stops (use --force to rebuild).
#
# Site CAs: the host's own CA certificates in /usr/local/share/ca-certificates/ (the Debian
# place for a company or proxy CA) are copied into the image, so that a build behind a
# TLS-intercepting proxy can reach PyPI just as the host does. --no-host-ca leaves them out.
#
# Needs root, debootstrap and a running Docker engine. Takes about a minute.
set -euo pipefail

IMAGE="meshhealth-base:bookworm"
SUITE="bookworm"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-}"
FORCE=0
HOST_CA=1
HOST_CA_DIR="/usr/local/share/ca-certificates"

usage() {
  cat <<EOF
usage: $0 [--image NAME:TAG] [--mirror URL] [--security-mirror URL] [--force] [--no-host-ca]

Build the Docker base image $IMAGE from Debian $SUITE packages (debootstrap +
docker import), for hosts that cannot pull debian:bookworm-slim.

  --image NAME:TAG        tag of the image to build (default: $IMAGE)
  --mirror URL            Debian mirror (default: \$DEBIAN_MIRROR or $MIRROR)
  --security-mirror URL   Debian security mirror (default: \$DEBIAN_SECURITY_MIRROR or
                          the mirror URL with -security appended)
  --force                 rebuild even when the image exists
  --no-host-ca            do not copy $HOST_CA_DIR/*.crt into the image

example:
  $0 && BASE_IMAGE=$IMAGE docker compose -f compose/docker-compose.yml build
EOF
}

die() {
  echo "build-base-image: $*" >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --image) IMAGE="${2:?--image needs NAME:TAG}"; shift 2 ;;
    --mirror) MIRROR="${2:?--mirror needs a URL}"; shift 2 ;;
    --security-mirror) SECURITY_MIRROR="${2:?--security-mirror needs a URL}"; shift 2 ;;
    --force) FORCE=1; shift ;;
    --no-host-ca) HOST_CA=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
SECURITY_MIRROR="${SECURITY_MIRROR:-${MIRROR%/}-security}"

[[ $EUID -eq 0 ]] || die "needs root (debootstrap); run it with sudo"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
command -v docker >/dev/null || die "docker is missing: apt-get install docker.io"
docker info >/dev/null 2>&1 || die "cannot reach the Docker engine (is dockerd running?)"

if [[ $FORCE -eq 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-base-image: $IMAGE exists already (use --force to rebuild)"
  exit 0
fi

ROOTFS="$(mktemp -d /tmp/meshhealth-base.XXXXXX)"
cleanup() {
  # debootstrap may leave /proc or /sys mounted after a failure: unmount before rm.
  local mnt
  for mnt in proc sys dev/pts dev; do
    if mountpoint -q "$ROOTFS/$mnt" 2>/dev/null; then
      umount -l "$ROOTFS/$mnt" || true
    fi
  done
  rm -rf --one-file-system "$ROOTFS"
  rm -f "$ROOTFS.log"
}
trap cleanup EXIT

started=$SECONDS
echo "build-base-image: debootstrap $SUITE from $MIRROR into $ROOTFS"
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
  tail -n 20 "$ROOTFS.log" >&2
  rm -f "$ROOTFS.log"
  die "debootstrap failed (log above)"
}
rm -f "$ROOTFS.log"

# Sources as in the official image: the suite, its updates and the security archive.
rm -f "$ROOTFS/etc/apt/sources.list"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# Slim, like debian:*-slim: no docs, man pages or locales from later installs either.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
find "$ROOTFS/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
rm -rf "$ROOTFS/usr/share/man/"* "$ROOTFS/usr/share/info/"* "$ROOTFS/usr/share/locale/"*
rm -rf "$ROOTFS/var/lib/apt/lists/"* "$ROOTFS/var/cache/apt/"*.bin "$ROOTFS/var/cache/apt/archives/"*.deb
rm -rf "$ROOTFS/var/log/"*.log "$ROOTFS/tmp/"*

if [[ $HOST_CA -eq 1 && -d $HOST_CA_DIR ]]; then
  mapfile -t cas < <(find "$HOST_CA_DIR" -type f -name '*.crt' | sort)
  if [[ ${#cas[@]} -gt 0 ]]; then
    mkdir -p "$ROOTFS/usr/local/share/ca-certificates/host"
    for ca in "${cas[@]}"; do
      cp "$ca" "$ROOTFS/usr/local/share/ca-certificates/host/"
      echo "build-base-image: trusting the host's CA $(basename "$ca") (used once ca-certificates is installed)"
    done
  fi
fi

echo "build-base-image: importing as $IMAGE"
tar --numeric-owner --xattrs -C "$ROOTFS" -c . |
  docker import \
    --change 'CMD ["bash"]' \
    --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase built by meshhealth compose/build-base-image.sh\"" \
    - "$IMAGE" >/dev/null
echo "build-base-image: built $IMAGE in $((SECONDS - started)) s"
