#!/usr/bin/env bash
# Makes the Debian 12 base image locally, for machines that reach Debian's
# package mirror but no container registry: debootstrap --variant=minbase
# bookworm into a scratch directory, imported into podman (or Docker) as
# IMAGE. Idempotent: an existing IMAGE is kept (pass --force to remake it).
#
#   deploy/docker/base-image.sh [--engine podman|docker] [--force] [IMAGE]
#
# IMAGE defaults to localhost/traind-debian:bookworm; build with
#   --build-arg DEBIAN_IMAGE=localhost/traind-debian:bookworm
# The mirror is the first Debian one this machine's apt uses (MIRROR
# overrides it); the image's apt sources name it too, with bookworm-updates
# and bookworm-security. Needs root (debootstrap) and the debootstrap package.
# About a minute and 120 MB.
set -euo pipefail
engine=podman
force=0
image=localhost/traind-debian:bookworm
while [[ $# -gt 0 ]]; do
  case $1 in
    --engine) engine=$2; shift 2 ;;
    --force) force=1; shift ;;
    -*) echo "usage: $0 [--engine podman|docker] [--force] [IMAGE]" >&2; exit 2 ;;
    *) image=$1; shift ;;
  esac
done

if [[ $force == 0 ]] && "$engine" image inspect "$image" >/dev/null 2>&1; then
  echo "base-image: $image exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image: debootstrap is not installed" >&2; exit 1; }

# The mirror this machine's apt uses (deb822 sources or a one-line list).
mirror=${MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ {print $2}' | grep -v -- '-security' | head -n1 || true)
fi
if [[ -z $mirror ]]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
security=${SECURITY_MIRROR:-}
if [[ -z $security ]]; then
  security=$( (cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true) |
    awk '/^URIs:/ {print $2}' | grep -- '-security' | head -n1 || true)
fi
if [[ -z $security ]]; then
  security=$(awk '$1 == "deb" && $3 ~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
security=${security:-http://deb.debian.org/debian-security}

rootfs=$(mktemp -d /var/tmp/traind-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
start=$(date +%s)
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  echo "base-image: debootstrap from $mirror failed; its log's tail:" >&2
  tail -n 20 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  exit 1
}
rm -f "$rootfs.log"
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
# As Debian's own slim images: no apt caches or man pages kept.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
tar -C "$rootfs" -c . | "$engine" import - "$image" >/dev/null
echo "base-image: $image from $mirror in $(($(date +%s) - start)) s"
