#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
#
#   ./tests/run.sh              everything
#   ./tests/run.sh -R Daemon    only tests whose name matches (ctest -R)
#
# Build directory: build/ (or $BUILD_DIR). GPU tests skip where no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install-deps.sh --tests
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

build_dir=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=ON
cmake --build "$build_dir" -j "$jobs"

cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$jobs" "$@"
