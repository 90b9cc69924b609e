#!/usr/bin/env bash
# The cost of permutation importance (importance: {repeats: R}) per fold, and
# scikit-learn's permutation_importance on the same rows in the same run.
# For each example (iris: 4 features, breast cancer: 30, digits: 64), fold 0
# in one traind-worker process (--spec, standalone), without and with
# importance (best of RUNS runs each): the seconds the fold takes, the
# difference (the importance), and per validation pass (a difference
# within the runs' noise, as for iris's 30 rows, can come out near 0 or
# negative: the ratio column is then -1). The peer: scikit-
# learn's MLPClassifier of the example's first layer width, fitted on the
# fold's training rows, and permutation_importance(n_repeats=R,
# scoring=neg_log_loss) on its validation rows, timed alone. Prints a table;
# docs/benchmarks.md records a run with the machine.
#
#   bench/importance_bench.sh            (after ./tests/run.sh or a build in build/)
#
# Environment: BUILD (default build), REPEATS (default 5), RUNS (default 5).
# Installs with apt, only when missing: python3-sklearn python3-numpy.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
REPEATS="${REPEATS:-5}"
RUNS="${RUNS:-5}"
cd "$ROOT"
for p in python3-sklearn python3-numpy; do
  dpkg -s "$p" >/dev/null 2>&1 || apt-get install -y -q "$p" >/dev/null
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

best_seconds() {  # $1: spec file; prints the best wall time of RUNS runs of fold 0
  local best="" start end t
  for _ in $(seq "$RUNS"); do
    start=$(date +%s.%N)
    "$BUILD/bin/traind-worker" --spec "$1" --fold 0 >"$work/out.jsonl"
    end=$(date +%s.%N)
    t=$(echo "$end - $start" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
  done
  echo "$best"
}

printf '%s\n' "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; repeats $REPEATS; best of $RUNS"
printf '%-22s %8s %8s %8s %8s %12s %11s %10s %14s\n' example features val_rows fold_s with_s importance_s per_pass_ms sklearn_s sklearn/traind
for example in iris-cv breast-cancer-binary digits-multiclass; do
  spec="examples/$example.yaml"
  cp "$spec" "$work/plain.yaml"
  { cat "$spec"; printf '\nimportance: {repeats: %s}\n' "$REPEATS"; } >"$work/with.yaml"
  plain=$(best_seconds "$work/plain.yaml")
  with=$(best_seconds "$work/with.yaml")
  # The fold's facts from the last run's result line.
  read -r features val_rows < <(/usr/bin/python3 - "$work/out.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    r = d.get("fold_result")
    if r and r.get("importance"):
        print(len(r["importance"]), r.get("val_rows", 0))
        break
PY
  )
  sklearn=$(/usr/bin/python3 - "$spec" "$REPEATS" <<'PY'
import sys, time, warnings, yaml, numpy as np
warnings.filterwarnings("ignore")  # MLPClassifier's convergence notes
from sklearn.inspection import permutation_importance
from sklearn.model_selection import StratifiedKFold
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler
spec = yaml.safe_load(open(sys.argv[1]))
data = np.genfromtxt(spec["data"]["path"], delimiter=",", names=True, dtype=None, encoding="utf-8")
label = spec["data"]["label"]
names = [n for n in data.dtype.names if n != label]
X = np.column_stack([data[n].astype(float) for n in names])
y = data[label]
train, val = next(StratifiedKFold(spec["cross_validation"]["folds"], shuffle=True, random_state=0).split(X, y))
scaler = StandardScaler().fit(X[train])
units = spec["model"]["layers"][0]["dense"]["units"]
model = MLPClassifier((units,), max_iter=spec["training"]["epochs"], random_state=0).fit(scaler.transform(X[train]), y[train])
start = time.perf_counter()
permutation_importance(model, scaler.transform(X[val]), y[val], n_repeats=int(sys.argv[2]), scoring="neg_log_loss", random_state=0)
print("%.4f" % (time.perf_counter() - start))
PY
  )
  importance=$(echo "$with - $plain" | bc -l)
  passes=$(( features * REPEATS + 1 ))
  ratio=$(echo "if ($importance > 0) $sklearn / $importance else -1" | bc -l)
  printf '%-22s %8s %8s %8.3f %8.3f %12.3f %11.3f %10.3f %14.1f\n' "$example" "$features" "$val_rows" \
    "$plain" "$with" "$importance" "$(echo "1000 * $importance / $passes" | bc -l)" "$sklearn" "$ratio"
done
