#!/usr/bin/env bash
# The web dashboard in a real browser against a real traind.
#   dashboard_browser_test.sh BIN_DIR SOURCE_DIR [SCREENSHOT]
# Starts traind on a temporary state directory (a viewer token, the HTTP side
# door on a free loopback port), submits a 5-fold iris job slow enough to
# watch live, and runs tests/integration/dashboard/dashboard.test.mjs
# (playwright-core driving Debian's headless chromium) on its job page.
# SCREENSHOT (default: BIN_DIR/../dashboard.png) receives a screenshot of the
# job page.
# Needs node, chromium and playwright-core (npm ci in tests/integration/dashboard;
# run here when its node_modules is missing).
set -euo pipefail
bin_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
screenshot=${3:-$bin_dir/../dashboard.png}
test_dir=$source_dir/tests/integration/dashboard
chromium=${CHROMIUM:-/usr/bin/chromium}

command -v node >/dev/null || { echo "node is missing (apt-get install nodejs npm)" >&2; exit 1; }
[[ -x $chromium ]] || { echo "$chromium is missing (apt-get install chromium)" >&2; exit 1; }
if [[ ! -f $test_dir/node_modules/playwright-core/package.json ]]; then
  npm ci --prefix "$test_dir" --no-audit --no-fund
fi

tmp=$(mktemp -d)
traind_pid=
cleanup() {
  if [[ -n $traind_pid ]] && kill -0 "$traind_pid" 2>/dev/null; then
    kill -TERM "$traind_pid"
    for _ in $(seq 100); do kill -0 "$traind_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$traind_pid" 2>/dev/null || true
    wait "$traind_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  node -e "const s = require('net').createServer(); s.listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); });"
}

token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
admin_token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
cat > "$tmp/tokens.yaml" <<EOF
tokens:
  - {name: vera, role: viewer, sha256: $(printf %s "$token" | sha256sum | cut -d' ' -f1)}
  - {name: ada, role: admin, sha256: $(printf %s "$admin_token" | sha256sum | cut -d' ' -f1)}
EOF
chmod 0600 "$tmp/tokens.yaml"

http_port=$(free_port)
state=$tmp/state
socket=$state/traind.sock
mkdir -p "$state"
"$bin_dir/traind" --state-dir "$state" --listen "unix:$socket" --listen 127.0.0.1:0 \
  --http-listen "127.0.0.1:$http_port" --tokens-file "$tmp/tokens.yaml" \
  --data-root "$source_dir" --cpu-slots 5 2> "$tmp/traind.log" &
traind_pid=$!

trainctl=("$bin_dir/trainctl" --address "unix:$socket")
for _ in $(seq 200); do
  "${trainctl[@]}" health >/dev/null 2>&1 && break
  kill -0 "$traind_pid" 2>/dev/null || { cat "$tmp/traind.log" >&2; exit 1; }
  sleep 0.1
done
url=http://127.0.0.1:$http_port
# The login API answers 401 without a session once the HTTP side door is up.
node -e "
  const url = process.argv[1];
  const end = Date.now() + 10000;
  (async function poll() {
    try {
      if ((await fetch(url)).status === 401) process.exit(0);
    } catch (e) {}
    if (Date.now() > end) process.exit(1);
    setTimeout(poll, 100);
  })();" "$url/api/v1/session" || { echo "no HTTP answer at $url" >&2; cat "$tmp/traind.log" >&2; exit 1; }

# The data as a stored dataset (the unix socket's admin owns it).
"${trainctl[@]}" datasets upload "$source_dir/examples/data/iris.csv" --name iris-live >/dev/null \
  || { echo "dataset upload failed" >&2; cat "$tmp/traind.log" >&2; exit 1; }

# 5 folds of 600 epochs with a wide model and small batches: long enough
# (tens of seconds) to watch the curves grow.
cat > "$tmp/iris-live.yaml" <<EOF
name: iris-cv-live
data: {dataset: iris-live, label: species, standardize: true}
cross_validation: {folds: 5, stratified: true, shuffle: true}
seed: 42
model:
  layers:
    - dense: {units: 256, activation: relu}
    - dense: {units: 256, activation: relu}
    - dense: {units: 3}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.001}}
training: {epochs: ${DASHBOARD_TEST_EPOCHS:-600}, batch_size: 4}
metrics: {train: [loss, accuracy], val: [loss, accuracy]}
resources: {device: cpu}
EOF
job=$("${trainctl[@]}" submit "$tmp/iris-live.yaml" | sed -n 's/^submitted job \([0-9a-f]*\).*/\1/p')
[[ -n $job ]] || { echo "submit failed" >&2; cat "$tmp/traind.log" >&2; exit 1; }
echo "job $job, dashboard $url"

# A small search (4 trials x 3 folds, and the refit of the best) with
# feature importance: its trials view and importance chart. It runs once the live job's folds leave it slots.
search=$(cd "$source_dir" && "${trainctl[@]}" submit examples/iris-search.yaml \
  --set training.epochs=8 --set importance.repeats=3 | sed -n 's/^submitted job \([0-9a-f]*\).*/\1/p')
[[ -n $search ]] || { echo "search submit failed" >&2; cat "$tmp/traind.log" >&2; exit 1; }

args=(--url "$url" --token "$token" --job "$job" --screenshot "$screenshot" --chromium "$chromium"
      --admin-token "$admin_token" --dataset iris-live:1 --search-job "$search"
      --trials-screenshot "$(dirname "$screenshot")/trials.png")
login_url=$("${trainctl[@]}" dashboard 2>/dev/null | grep -o 'http://[^ ]*/login?ticket=[^ ]*' | head -1 || true)
[[ -n $login_url ]] && args+=(--login-url "$login_url")
job_login_url=$("${trainctl[@]}" dashboard "$job" 2>/dev/null | grep -o 'http://[^ ]*/login?ticket=[^ ]*' | head -1 || true)
[[ -n $job_login_url ]] && args+=(--job-login-url "$job_login_url")

status=0
node "$test_dir/dashboard.test.mjs" "${args[@]}" || status=$?
if [[ $status -ne 0 ]]; then
  echo "--- traind log" >&2
  tail -n 50 "$tmp/traind.log" >&2
fi
exit $status
