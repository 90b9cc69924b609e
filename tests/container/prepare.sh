#!/usr/bin/env bash
# Readies this machine for tests/container/image_test.sh: podman with runc and
# debootstrap (Debian's packages), and the local Debian 12 base image
# (deploy/docker/base-image.sh; kept in podman's storage, so made once per
# machine). tests/run.sh runs it before ctest and, when it succeeds, sets
# TRAIND_REQUIRE_CONTAINER=1 so the image test fails rather than skips.
# Needs root (apt-get, debootstrap, rootful podman); exits non-zero naming
# what failed otherwise.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ $(id -u) -ne 0 ]]; then
  echo "container: not root: podman's rootful storage and debootstrap need it" >&2
  exit 1
fi
pkgs=(podman runc debootstrap uidmap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "container: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -o DPkg::Lock::Timeout=600 -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
fi
conf=$(mktemp)
trap 'rm -f "$conf"' EXIT
"$root/deploy/docker/containers-conf.sh" >"$conf"
export CONTAINERS_CONF=$conf
podman info >/dev/null || { echo "container: podman info fails" >&2; exit 1; }
"$root/deploy/docker/base-image.sh" "${TRAIND_BASE_IMAGE:-localhost/traind-debian:bookworm}"
