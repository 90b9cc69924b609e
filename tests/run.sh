#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
#
#   ./tests/run.sh              everything
#   ./tests/run.sh -R Daemon    only tests whose name matches (ctest -R)
#
# Build directory: build/ (or $BUILD_DIR). GPU tests skip where no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install-deps.sh

build_dir=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=ON
cmake --build "$build_dir" -j "$jobs"

cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$jobs" "$@"
