#!/usr/bin/env bash
# Builds traind's image from source (the Dockerfile's build stage compiles it,
# CPU only) or from binaries built on this machine, with podman or Docker.
#
#   deploy/docker/build-image.sh [--engine podman|docker] [--local-base]
#                                [--prebuilt BIN_DIR] [--target cpu|gpu] [--tag TAG]
#
#   --local-base   build FROM the local Debian 12 base image
#                  (deploy/docker/base-image.sh makes it when missing), for
#                  machines that reach Debian's mirror but no registry
#   --prebuilt     take traind, traind-worker and trainctl (and, for --target
#                  gpu, the CUDA plugin and CUDA_HOME's libraries) from BIN_DIR
#                  instead of compiling (deploy/docker/prebuilt-context.sh)
#   --tag          default traind:cpu or traind:gpu
#
# With podman, CONTAINERS_CONF defaults to deploy/docker/containers-conf.sh's
# output (runc, ulimits within the host's). Prints the build's time.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
engine=podman
local_base=0
prebuilt=""
target=cpu
tag=""
usage() {
  echo "usage: $0 [--engine podman|docker] [--local-base] [--prebuilt BIN_DIR] [--target cpu|gpu] [--tag TAG]" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --engine) [[ $# -ge 2 ]] || usage; engine=$2; shift 2 ;;
    --local-base) local_base=1; shift ;;
    --prebuilt) [[ $# -ge 2 ]] || usage; prebuilt=$2; shift 2 ;;
    --target) [[ $# -ge 2 ]] || usage; target=$2; shift 2 ;;
    --tag) [[ $# -ge 2 ]] || usage; tag=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $target == cpu || $target == gpu ]] || usage
[[ $target == cpu || -n $prebuilt ]] || {
  echo "build-image: the gpu target needs --prebuilt (a build with -DTRAIND_WITH_CUDA=ON)" >&2
  exit 2
}
tag=${tag:-traind:$target}

stage=$target
[[ $target == cpu && -n $prebuilt ]] && stage=cpu-prebuilt
args=(build -f "$root/deploy/docker/Dockerfile" --target "$stage" -t "$tag")
conf=""
if [[ $engine == podman ]]; then
  # docker format keeps the HEALTHCHECK (OCI images have none).
  args+=(--format docker)
  if [[ -z ${CONTAINERS_CONF:-} ]]; then
    conf=$(mktemp)
    "$root/deploy/docker/containers-conf.sh" >"$conf"
    export CONTAINERS_CONF=$conf
  fi
fi
if [[ $local_base == 1 ]]; then
  base=localhost/traind-debian:bookworm
  "$root/deploy/docker/base-image.sh" --engine "$engine" "$base"
  args+=(--build-arg "DEBIAN_IMAGE=$base")
fi
context=$root
ctx_dir=""
if [[ -n $prebuilt ]]; then
  ctx_dir=$(mktemp -d /var/tmp/traind-context.XXXXXX)
  gpu=()
  [[ $target == gpu ]] && gpu=(--gpu)
  "$root/deploy/docker/prebuilt-context.sh" "$prebuilt" "$ctx_dir/ctx" "${gpu[@]}"
  context=$ctx_dir/ctx
fi
trap 'rm -rf ${ctx_dir:+"$ctx_dir"} ${conf:+"$conf"}' EXIT
start=$(date +%s)
"$engine" "${args[@]}" "$context"
echo "build-image: $tag ($target, $([[ -n $prebuilt ]] && echo "binaries from $prebuilt" || echo "compiled from source")) in $(($(date +%s) - start)) s"
