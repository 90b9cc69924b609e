#!/usr/bin/env bash
# ASHA against the exhaustive search of the same trials, through a real
# traind: examples/digits-search.yaml (digits, 27 random trials × 5 folds, 27
# epochs, rungs at 1, 3 and 9) as it is, and with its asha removed. Prints the
# epochs each run trained, their ratio, each run's best fold-mean
# val.accuracy and the wall time; docs/benchmarks.md records a run.
#
#   bench/search_bench.sh            (after ./tests/run.sh or a build in build/)
#
# Environment: BUILD (default build): where bin/traind and bin/trainctl are;
# SLOTS (default: the number of CPUs): traind's --cpu-slots.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
SLOTS="${SLOTS:-$(nproc)}"
cd "$ROOT"

work="$(mktemp -d)"
traind_pid=""
cleanup() {
  if [ -n "$traind_pid" ]; then kill "$traind_pid" 2>/dev/null || true; wait "$traind_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$BUILD/bin/traind" --state-dir="$work/state" --listen="unix:$work/traind.sock" \
  --http-listen=off --cpu-slots="$SLOTS" --data-root="$ROOT" 2>"$work/traind.log" &
traind_pid=$!
for _ in $(seq 1 200); do [ -S "$work/traind.sock" ] && break; sleep 0.05; done
ctl() { "$BUILD/bin/trainctl" --address "unix:$work/traind.sock" "$@"; }

run() {  # $1: name, then --set overrides; prints "epochs best seconds pruned best_trial"
  local name=$1 start end id
  shift
  start=$(date +%s.%N)
  id=$(ctl submit examples/digits-search.yaml --set search.refit_best=false "$@" |
    awk '/^submitted job/ {print $3}')
  ctl watch "$id" >/dev/null || true  # ends with the job
  end=$(date +%s.%N)
  ctl -o json result "$id" >"$work/$name.json"
  python3 - "$work/$name.json" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
trials = r.get("trials", [])
epochs = sum(t.get("epochs_run", 0) for t in trials)
best = r["trials"][r["best_trial"]]["score"] if r.get("best_trial", -1) >= 0 else float("nan")
pruned = sum(1 for t in trials if t.get("state") == "PRUNED")
print(epochs, best, float(sys.argv[3]) - float(sys.argv[2]), pruned, r.get("best_trial", -1))
PY
}

read -r e_all best_all s_all _ t_all < <(run exhaustive --set search.asha=)
read -r e_asha best_asha s_asha pruned t_asha < <(run asha)

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512_bf16)$' | tr '\n' ' ')
echo "machine: $cpu, $(nproc) CPUs ($flags), traind --cpu-slots=$SLOTS"
echo
echo "| search | epochs trained | best trial | its fold-mean val.accuracy | wall s | trials pruned |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '| exhaustive (27 trials × 5 folds × 27 epochs) | %d | %d | %.4f | %.1f | 0 |\n' "$e_all" "$t_all" "$best_all" "$s_all"
printf '| ASHA (grace 1, factor 3: rungs 1, 3, 9) | %d | %d | %.4f | %.1f | %d |\n' "$e_asha" "$t_asha" "$best_asha" "$s_asha" "$pruned"
python3 -c "
e_all, e_asha, b_all, b_asha = $e_all, $e_asha, $best_all, $best_asha
print()
print('ASHA epochs / exhaustive epochs: %.1f%% (target <= 35%%)' % (100.0 * e_asha / e_all))
print('best val.accuracy, exhaustive - ASHA: %.4f (target <= 0.01)' % (b_all - b_asha))
"
