#!/usr/bin/env bash
# The CPU benchmark, one command: traind's engine against PyTorch (and
# scikit-learn), same data / model / init / optimizer / batch / threads, runs
# alternated, medians, ratios. Case 1 also runs both in bf16 (traind's
# training.precision: bf16; PyTorch's bf16 autocast). Prints markdown tables
# (also written to $BUILD/cpu-bench-work/results.md); docs/benchmarks.md
# records a run.
#
#   bench/run_cpu_bench.sh [--repeats N] [--only 1,2,3,4] [--isa avx2]
#
# Case 1 and 3 also time the step's GEMM set alone (the ceiling of an fp32
# step) in each traind run's process after every epoch, and one step op by op
# beside the set's products (where the rest goes);
# --isa avx2 caps both sides at AVX2 to measure those code paths here.
#
# Environment: BUILD (default build-bench: its own CMake build dir, Release);
# SKIP_BUILD=1 measures the binaries already in $BUILD/bin; NICE (default -10
# when root, else 0): the priority the benchmark runs at, so that other work on
# a shared machine disturbs the timings less (both sides get it alike).
# Installs with apt, only when missing: python3-torch python3-sklearn. OpenBLAS
# (the peer's best BLAS): the system's /usr/lib/x86_64-linux-gnu/openblas-openmp
# when libopenblas0-openmp is installed, else the package is unpacked into
# $BUILD/peer-blas (apt-get download + dpkg-deb -x), so installing it never
# switches the system's libblas.so.3 alternative under other users.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-bench}"
cd "$ROOT"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
missing=()
for p in python3-torch python3-sklearn python3-numpy; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${missing[@]}" >&2
fi
OPENBLAS_OMP=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [ ! -e "$OPENBLAS_OMP/libblas.so.3" ]; then
  OPENBLAS_OMP="$BUILD/peer-blas/usr/lib/x86_64-linux-gnu/openblas-openmp"
  if [ ! -e "$OPENBLAS_OMP/libblas.so.3" ]; then
    echo "unpacking libopenblas0-openmp into $BUILD/peer-blas (the system is not changed)" >&2
    tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download libopenblas0-openmp >/dev/null 2>&1) ||
      { $SUDO apt-get update -qq && (cd "$tmp" && apt-get download libopenblas0-openmp >/dev/null); }
    mkdir -p "$BUILD/peer-blas"
    dpkg-deb -x "$tmp"/libopenblas0-openmp_*.deb "$BUILD/peer-blas"
    rm -rf "$tmp"
  fi
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=OFF >&2
  fi
  cmake --build "$BUILD" --target cpu_bench traind traind-worker trainctl >&2
fi

if [ "$(id -u)" = 0 ]; then NICE="${NICE:--10}"; else NICE="${NICE:-0}"; fi
echo "(benchmark runs at nice $NICE; load average now: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
exec nice -n "$NICE" /usr/bin/python3 "$ROOT/bench/peers/driver.py" --bin "$BUILD/bin" --work "$BUILD/cpu-bench-work" \
  --openblas-openmp "$OPENBLAS_OMP" --out "$BUILD/cpu-bench-work/results.md" "$@"
