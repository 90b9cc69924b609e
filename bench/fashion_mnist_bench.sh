#!/usr/bin/env bash
# The convolutional benchmark, one command: examples/fashion-mnist-cnn.yaml's
# network trained by traind and by PyTorch on Fashion-MNIST, runs alternated,
# medians, ratios (speed); then the accuracy of both on the t10k images after
# a refit on all 60,000 training images (and with --folds, the 5-fold CV of
# both); and traind's step op by op beside its image kernels alone (cpu_bench
# convprofile). docs/benchmarks.md records a run.
#
#   bench/fashion_mnist_bench.sh [--repeats N] [--epochs N] [--accuracy-epochs N]
#                                [--folds] [--isa avx2] [--precision bf16] [--skip-accuracy]
#                                [--skip-speed]
#
# Environment: BUILD (default build-bench: its own Release build dir);
# SKIP_BUILD=1 measures the binaries already in $BUILD/bin. Installs with
# apt, only when missing: dataset-fashion-mnist python3-torch python3-sklearn.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-bench}"
cd "$ROOT"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
missing=()
for p in dataset-fashion-mnist python3-torch python3-sklearn python3-numpy; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${missing[@]}" >&2
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=OFF >&2
  fi
  cmake --build "$BUILD" --target traind-worker cpu_bench >&2
fi
if [ "$(id -u)" = 0 ]; then NICE="${NICE:--10}"; else NICE="${NICE:-0}"; fi
exec nice -n "$NICE" /usr/bin/python3 "$ROOT/bench/peers/cnn_driver.py" --bin "$BUILD/bin" \
  --work "$BUILD/cnn-bench-work" --out "$BUILD/cnn-bench-work/results.md" "$@"
