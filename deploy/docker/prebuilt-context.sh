#!/usr/bin/env bash
# Lays out the build context of deploy/docker/Dockerfile's targets
# cpu-prebuilt and gpu: the image takes traind, traind-worker and trainctl as
# built here (by tests/run.sh or cmake) instead of compiling them again.
#
#   deploy/docker/prebuilt-context.sh BIN_DIR CONTEXT_DIR [--gpu]
#
# CONTEXT_DIR (made afresh) then holds:
#   deploy/install-deps.sh, deploy/docker/traind.yaml   what the image copies
#   out/bin/{traind,traind-worker,trainctl}             debug info stripped
# and with --gpu (a build with -DTRAIND_WITH_CUDA=ON):
#   out/lib/traind/libtraind_cuda.so                    the worker's CUDA plugin
#   out/cuda/                                           the CUDA runtime libraries the
#                                                       plugin loads, from $CUDA_HOME
# The CUDA libraries (cuBLAS, cuBLASLt, NCCL, cuDNN 9 and the sublibraries
# libcudnn.so.9 loads at run time; about 1.3 GB) are copied from the CUDA
# toolkit the plugin was built with: CUDA_HOME (default /usr/local/cuda), its
# lib64/ or targets/x86_64-linux/lib/. No registry is used. A library the plugin
# needs that is found nowhere there fails the script, naming it.
set -euo pipefail
usage() { echo "usage: $0 BIN_DIR CONTEXT_DIR [--gpu]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
bin_dir=$1
ctx=$2
gpu=0
if [[ $# -ge 3 ]]; then [[ $3 == --gpu ]] || usage; gpu=1; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}

for b in traind traind-worker trainctl; do
  [[ -x $bin_dir/$b ]] || { echo "prebuilt-context: $bin_dir/$b: no such executable" >&2; exit 1; }
done
rm -rf "$ctx"
mkdir -p "$ctx/deploy/docker" "$ctx/out/bin"
cp "$root/deploy/install-deps.sh" "$ctx/deploy/"
cp "$root/deploy/docker/traind.yaml" "$ctx/deploy/docker/"
for b in traind traind-worker trainctl; do
  cp "$bin_dir/$b" "$ctx/out/bin/"
  strip --strip-debug "$ctx/out/bin/$b"
done
[[ $gpu == 1 ]] || exit 0

plugin=$bin_dir/libtraind_cuda.so
[[ -f $plugin ]] || {
  echo "prebuilt-context: $plugin: no CUDA plugin (build with -DTRAIND_WITH_CUDA=ON)" >&2
  exit 1
}
mkdir -p "$ctx/out/lib/traind" "$ctx/out/cuda"
cp "$plugin" "$ctx/out/lib/traind/"
strip --strip-debug "$ctx/out/lib/traind/libtraind_cuda.so"
dirs=("$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib")
# find_lib NAME: the first regular file (links followed) called NAME.
find_lib() {
  local d
  for d in "${dirs[@]}"; do
    if [[ -e $d/$1 ]]; then echo "$d/$1"; return 0; fi
  done
  return 1
}
# What the plugin links (its NEEDED entries that are CUDA's), and cuDNN's
# sublibraries, which libcudnn.so.9 opens by name at run time.
mapfile -t needed < <(readelf -d "$plugin" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' |
  grep -E '^lib(cublas|cublasLt|cudnn|nccl|cudart)')
libs=("${needed[@]}")
for d in "${dirs[@]}"; do
  for f in "$d"/libcudnn_*.so.9; do [[ -e $f ]] && libs+=("$(basename "$f")"); done
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)
for name in "${libs[@]}"; do
  path=$(find_lib "$name") || {
    echo "prebuilt-context: $name (needed by the CUDA plugin) is not under ${dirs[*]}" >&2
    exit 1
  }
  # Hard links where the context is on the same file system (no 1.3 GB copy).
  ln -f "$(readlink -f "$path")" "$ctx/out/cuda/$name" 2>/dev/null ||
    cp -L "$path" "$ctx/out/cuda/$name"
done
echo "prebuilt-context: $ctx: 3 binaries, the CUDA plugin and ${#libs[@]} CUDA libraries"
