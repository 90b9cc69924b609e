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

build_dir=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_BUILD_TESTS=ON
cmake --build "$build_dir" -j "$jobs"

cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$jobs" "$@"
