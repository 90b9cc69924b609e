#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
#
#   ./tests/run.sh              everything
#   ./tests/run.sh -R Daemon    only tests whose name matches (ctest -R)
#
# Build directory: build/ (or $BUILD_DIR). GPU tests skip where no GPU is found.
# Slurm: tests/slurm/start.sh brings up a single-node Slurm (or finds one that
# works) before ctest; then the Slurm tests fail rather than skip without it.
# Where it cannot (not root, no apt), they skip. Slurm is stopped on exit only
# when start.sh started it (its marker: $TRAIND_SLURM_DIR/started).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

./deploy/install-deps.sh --tests
# podman, runc, debootstrap and the local Debian base image for the container
# image's test, made while the build runs (mostly downloads).
container_log=$(mktemp)
tests/container/prepare.sh >"$container_log" 2>&1 &
container_pid=$!
# playwright-core for the dashboard's browser test (from npm, pinned by its
# package-lock.json; it drives Debian's chromium, never a downloaded browser).
if [[ ! -f tests/integration/dashboard/node_modules/playwright-core/package.json ]]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/integration/dashboard --no-audit --no-fund
fi
# onnxruntime-node for the ONNX export's tests (pinned by tests/onnx's
# package-lock.json): its Linux x64 CPU library ships inside the package;
# its install script, which would fetch CUDA files, is skipped.
if [[ ! -f tests/onnx/node_modules/onnxruntime-node/package.json ]]; then
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix tests/onnx --ignore-scripts --no-audit --no-fund
fi
# ONNX Runtime is installed: its tests fail rather than skip without it.
export TRAIND_REQUIRE_ONNXRUNTIME=1
# So is OpenBLAS's OpenMP build (install-deps.sh): the CPU backend's OpenBLAS
# products are tested on every machine, whatever its ISA.
export TRAIND_REQUIRE_OPENBLAS=1

build_dir=${BUILD_DIR:-build}
jobs=$(nproc)
# The target graph that tests/layering_check.py reads (CMake's file API).
mkdir -p "$build_dir/.cmake/api/v1/query/client-traind"
touch "$build_dir/.cmake/api/v1/query/client-traind/codemodel-v2"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=ON
cmake --build "$build_dir" -j "$jobs"

# Slurm for the Slurm launcher's tests. start.sh leaves its marker when it
# started a daemon (even if it then failed): only then is Slurm stopped on
# exit; a Slurm that was already running is left running.
export TRAIND_SLURM_DIR=${TRAIND_SLURM_DIR:-/tmp/traind-slurm}
stop_slurm() {
  local rc=$?
  "$root/tests/slurm/stop.sh" || echo "run.sh: warning: tests/slurm/stop.sh failed" >&2
  exit "$rc"
}
if tests/slurm/start.sh; then
  export TRAIND_REQUIRE_SLURM=1
else
  echo "run.sh: warning: Slurm could not be started (reason above): the Slurm tests will skip" >&2
fi
if [[ -f "$TRAIND_SLURM_DIR/started" ]]; then
  trap stop_slurm EXIT
fi

# The container image's test fails rather than skips once podman and the
# base image are ready.
if wait "$container_pid"; then
  export TRAIND_REQUIRE_CONTAINER=1
  tail -n 1 "$container_log"
else
  cat "$container_log" >&2
  echo "run.sh: warning: tests/container/prepare.sh failed (above): the container image test will skip" >&2
fi
rm -f "$container_log"

cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$jobs" "$@"
