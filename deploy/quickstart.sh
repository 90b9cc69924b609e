#!/usr/bin/env bash
# From a fresh clone on Debian 12: installs what is missing, builds (Release),
# starts traind on its defaults (state in ./.traind, API on
# unix:./.traind/traind.sock and 127.0.0.1:7070), runs the example 5-fold
# cross-validation on iris while streaming its per-epoch metrics, prints the
# per-fold table and the mean ± std validation accuracy, and stops the traind
# it started. Exits 0 when the job succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target traind traind-worker trainctl

state_dir=${TRAIND_STATE_DIR:-$PWD/.traind}
mkdir -p "$state_dir"
log="$state_dir/quickstart-traind.log"
echo "quickstart: starting traind (state in $state_dir, log in $log)"
build/bin/traind --state-dir "$state_dir" 2>"$log" &
traind_pid=$!
stop_traind() {
  if kill -0 "$traind_pid" 2>/dev/null; then
    kill -TERM "$traind_pid"
    wait "$traind_pid" || true
  fi
}
trap stop_traind EXIT

export TRAIND_ADDRESS="unix:$state_dir/traind.sock"
for _ in $(seq 1 100); do
  if build/bin/trainctl info --timeout 1 >/dev/null 2>&1; then break; fi
  if ! kill -0 "$traind_pid" 2>/dev/null; then
    echo "quickstart: traind exited; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
build/bin/trainctl info

echo
echo "quickstart: trainctl submit examples/iris-cv.yaml --watch"
status=0
build/bin/trainctl submit examples/iris-cv.yaml --watch || status=$?
echo
if [[ $status -eq 0 ]]; then
  echo "quickstart: done. traind's log: $log"
else
  echo "quickstart: the job did not succeed (exit $status); traind's log: $log" >&2
fi
exit $status
