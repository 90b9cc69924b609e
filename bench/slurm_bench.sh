#!/usr/bin/env bash
# traind in front of Slurm, against the local launcher in the same run:
#  1. launch latency: examples/iris-cv.yaml (10 folds, 1 epoch, one task at a
#     time), per task the time from its attempt's start (STARTING: the
#     launch) to the worker's first report (RUNNING), and per job the time
#     from submit to the first RUNNING; medians through Slurm and locally,
#     and their ratio;
#  2. polling load: 100 tasks held in Slurm's queue (sbatch --hold) for
#     WINDOW seconds; every squeue and sbatch traind runs is counted (through
#     a PATH wrapper that logs each call), printed as calls per minute.
# Needs a working Slurm (tests/slurm/start.sh starts a single-node one).
# docs/benchmarks.md records a run.
#
#   bench/slurm_bench.sh            (after ./tests/run.sh or a build in build/)
#
# Environment: BUILD (default build): where bin/traind and bin/trainctl are;
# WINDOW (default 60): seconds the 100 tasks stay queued.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
WINDOW="${WINDOW:-60}"
cd "$ROOT"
sinfo --noheader >/dev/null || { echo "slurm_bench: no Slurm (tests/slurm/start.sh)" >&2; exit 1; }

work="$(mktemp -d)"
traind_pid=""
stop_traind() {
  if [ -n "$traind_pid" ]; then kill "$traind_pid" 2>/dev/null || true; wait "$traind_pid" 2>/dev/null || true; fi
  traind_pid=""
}
cleanup() {
  stop_traind
  rm -rf "$work"
}
trap cleanup EXIT

# Every sbatch and squeue traind runs, logged with its time.
mkdir -p "$work/wrap"
for cmd in sbatch squeue; do
  real=$(command -v "$cmd")
  printf '#!/bin/sh\necho "%s $(date +%%s.%%N)" >> "%s/calls.log"\nexec %s "$@"\n' \
    "$cmd" "$work" "$real" >"$work/wrap/$cmd"
  chmod +x "$work/wrap/$cmd"
done

start_traind() {  # $1: state name, then traind flags
  local name=$1
  shift
  PATH="$work/wrap:$PATH" "$BUILD/bin/traind" --state-dir="$work/$name" \
    --listen="unix:$work/$name.sock" --http-listen=off --data-root="$ROOT" "$@" \
    2>"$work/$name.log" &
  traind_pid=$!
  for _ in $(seq 1 200); do [ -S "$work/$name.sock" ] && break; sleep 0.05; done
  [ -S "$work/$name.sock" ] || { cat "$work/$name.log" >&2; exit 1; }
  sock="unix:$work/$name.sock"
}
ctl() { "$BUILD/bin/trainctl" --address "$sock" "$@"; }
port=$((20000 + RANDOM % 20000))
slurm_flags() {  # $1: name (one shared directory per traind)
  echo --launcher=slurm --slurm-shared-dir="$work/$1.shared" --slurm-worker-address="127.0.0.1:$port"
}

latency() {  # $1: name; prints "median_launch_ms median_submit_to_first_ms"
  local name=$1 id submitted
  submitted=$(date +%s.%N)
  id=$(ctl submit examples/iris-cv.yaml --set training.epochs=1 --set cross_validation.folds=10 \
    --set resources.max_parallel_tasks=1 | awk '/^submitted job/ {print $3}')
  ctl -o json watch "$id" >"$work/$name.events" || true
  python3 - "$work/$name.events" "$submitted" <<'EOF'
import json, sys, statistics
from datetime import datetime
def t(s):
    return datetime.strptime(s.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
start, first, launch = {}, None, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    ts = e.get("task_state")
    if not ts:
        continue
    key = (ts["task"], ts["attempt"])
    if ts["state"] == "STARTING":
        start[key] = t(e["time"])
    elif ts["state"] == "RUNNING" and key in start:
        launch.append(t(e["time"]) - start[key])
        first = first or t(e["time"])
print("%.1f %.1f %d" % (statistics.median(launch) * 1e3, (first - float(sys.argv[2])) * 1e3, len(launch)))
EOF
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; $(sinfo --version)"
start_traind local
read -r local_launch local_first local_n < <(latency local)
stop_traind
# shellcheck disable=SC2046
start_traind slurm $(slurm_flags slurm)
read -r slurm_launch slurm_first slurm_n < <(latency slurm)
stop_traind
echo "launch → worker's first report (median of $slurm_n tasks): slurm ${slurm_launch} ms, local ${local_launch} ms (ratio $(python3 -c "print('%.0f' % ($slurm_launch / $local_launch))")x)"
echo "submit → first task running: slurm ${slurm_first} ms, local ${local_first} ms"

# Polling load: 100 tasks waiting in Slurm's queue.
# shellcheck disable=SC2046
start_traind held $(slurm_flags held) --slurm-sbatch-arg=--hold
: >"$work/calls.log"
id=$(ctl submit examples/iris-cv.yaml --set cross_validation.folds=10 --set cross_validation.repeats=10 |
  awk '/^submitted job/ {print $3}')
for _ in $(seq 1 600); do
  [ "$(grep -c '^sbatch' "$work/calls.log")" -ge 100 ] && break
  sleep 0.1
done
from=$(date +%s.%N)
sleep "$WINDOW"
to=$(date +%s.%N)
held=$(ctl get "$id" | grep -c 'HELD' || true)
python3 - "$work/calls.log" "$from" "$to" "$held" <<'EOF'
import sys
calls = [l.split() for l in open(sys.argv[1])]
lo, hi = float(sys.argv[2]), float(sys.argv[3])
n = {c: sum(1 for name, ts in calls if name == c and lo <= float(ts) < hi) for c in ("squeue", "sbatch")}
total_sbatch = sum(1 for name, _ in calls if name == "sbatch")
print("100 tasks queued in Slurm (%s shown HELD): %d sbatch in all; over %.0f s: %d squeue = %.1f per minute, %d sbatch"
      % (sys.argv[4], total_sbatch, hi - lo, n["squeue"], n["squeue"] * 60 / (hi - lo), n["sbatch"]))
EOF
ctl cancel --force "$id" >/dev/null || true
for _ in $(seq 1 100); do
  [ -z "$(squeue --noheader --name="$id" --states=pending,running 2>/dev/null)" ] && break
  sleep 0.2
done
