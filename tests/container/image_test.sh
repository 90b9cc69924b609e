#!/usr/bin/env bash
# The container image, built and run: deploy/docker/Dockerfile's runtime stage
# from the binaries this build made (target cpu-prebuilt), on the local Debian
# base image (deploy/docker/base-image.sh), with podman and runc.
#
#   tests/container/image_test.sh BIN_DIR SOURCE_DIR
#
# Checks, in order:
#  - deploy/runtime-packages.sh --check: the image's package list is what the
#    binaries link (a renamed package fails here, before any build);
#  - the `cpu-prebuilt` target builds (its own step checks every library resolves);
#  - the same build with a runtime package renamed in a scratch copy of
#    install-deps.sh fails, naming the package;
#  - the container runs read-only, as the user traind (uid 10001), with the
#    state directory, the data and the config (TLS, a tokens file) bind-mounted;
#  - a CV job submitted from this host over TCP (TLS, bearer token; its CSV
#    uploaded by trainctl) and one over the bind-mounted unix socket (its data
#    under /data) both succeed, and their artifacts are on this host;
#  - `podman stop` ends traind cleanly: its "traind stopped" line, exit 0;
#  - where BIN_DIR has the CUDA plugin and CUDA_HOME the CUDA libraries, the
#    `gpu` target builds too, and its worker starts (no GPU here: "cpu").
# Exit 77 (ctest: skipped) where podman is missing, unless
# TRAIND_REQUIRE_CONTAINER=1 (tests/run.sh sets it after
# tests/container/prepare.sh succeeded): then it fails.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BIN_DIR SOURCE_DIR" >&2; exit 2; }
bin_dir=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
base=${TRAIND_BASE_IMAGE:-localhost/traind-debian:bookworm}

skip() {
  if [[ ${TRAIND_REQUIRE_CONTAINER:-0} == 1 ]]; then
    echo "FAIL: $* (TRAIND_REQUIRE_CONTAINER=1)" >&2
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
command -v podman >/dev/null || skip "podman is not installed (tests/container/prepare.sh)"
podman image exists "$base" || skip "no base image $base (tests/container/prepare.sh)"

work=$(mktemp -d /var/tmp/traind-image-test.XXXXXX)
tag=traind-test-$$
name=traind-test-$$
export CONTAINERS_CONF=$work/containers.conf
"$src/deploy/docker/containers-conf.sh" >"$CONTAINERS_CONF"
cleanup() {
  local rc=$?
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  podman rmi -f "$tag:cpu" "$tag:gpu" >/dev/null 2>&1 || true
  # The build's intermediate layers (the GPU one is 1.3 GB); the base stays.
  podman image prune -f >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  if podman container exists "$name" 2>/dev/null; then
    echo "--- podman logs $name (tail)" >&2
    podman logs "$name" 2>&1 | tail -n 30 >&2
  fi
  exit 1
}
step() { echo "== $* ($(date +%T))"; }

step "runtime packages"
"$src/deploy/runtime-packages.sh" --check "$bin_dir" || fail "the runtime package list is wrong"

step "build the cpu image from $bin_dir"
"$src/deploy/docker/prebuilt-context.sh" "$bin_dir" "$work/ctx" >/dev/null
podman build --format docker --network host --build-arg "DEBIAN_IMAGE=$base" \
  --target cpu-prebuilt -t "$tag:cpu" \
  -f "$src/deploy/docker/Dockerfile" "$work/ctx" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  fail "podman build of the cpu target"
}
user=$(podman image inspect -f '{{.Config.User}}' "$tag:cpu")
[[ $user == traind:traind ]] || fail "the image runs as '$user', not traind:traind"

step "a renamed runtime package fails the image build, naming it"
cp -r "$work/ctx" "$work/ctx-renamed"
sed -i 's/ libdnnl2 / libdnnl2.6 /' "$work/ctx-renamed/deploy/install-deps.sh"
grep -q ' libdnnl2.6 ' "$work/ctx-renamed/deploy/install-deps.sh" || fail "libdnnl2 is not in install-deps.sh"
if podman build --format docker --network host --build-arg "DEBIAN_IMAGE=$base" \
  --target cpu-prebuilt -t "$tag:renamed" -f "$src/deploy/docker/Dockerfile" \
  "$work/ctx-renamed" >"$work/build-renamed.log" 2>&1; then
  podman rmi -f "$tag:renamed" >/dev/null 2>&1 || true
  fail "the image built with libdnnl2 renamed libdnnl2.6"
fi
grep -q "no Debian package named libdnnl2.6" "$work/build-renamed.log" || {
  tail -n 20 "$work/build-renamed.log" >&2
  fail "the failed build does not name libdnnl2.6"
}
rm -rf "$work/ctx-renamed"

step "TLS, token and config"
mkdir -p "$work/state" "$work/data" "$work/etc/tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$work/etc/tls/key.pem" -out "$work/etc/tls/cert.pem" 2>/dev/null
token=$(openssl rand -hex 32)
printf '%s\n' "$token" >"$work/token"
printf 'tokens:\n  - {name: alice, role: submitter, sha256: %s}\n' \
  "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/etc/tokens.yaml"
cat >"$work/etc/traind.yaml" <<'EOF'
state_dir: /var/lib/traind
listen:
  - unix:/var/lib/traind/traind.sock
  - 0.0.0.0:7070
tls: {cert: /etc/traind/tls/cert.pem, key: /etc/traind/tls/key.pem}
tokens_file: /etc/traind/tokens.yaml
data_roots: [/data]
cpu_slots: 2
EOF
cp "$src/examples/data/iris.csv" "$work/data/"
# The container's user owns its state; it reads the config and the data.
chown -R 10001:10001 "$work/state"
chmod -R a+rX "$work/etc" "$work/data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

step "run read-only as traind, publishing 127.0.0.1:$port"
podman run -d --name "$name" --read-only --tmpfs /tmp \
  --security-opt no-new-privileges \
  -v "$work/state:/var/lib/traind" -v "$work/data:/data:ro" -v "$work/etc:/etc/traind:ro" \
  -p "127.0.0.1:$port:7070" "$tag:cpu" >/dev/null || fail "podman run"
sock=unix:$work/state/traind.sock
for _ in $(seq 1 100); do
  "$bin_dir/trainctl" --address "$sock" --timeout 2 health >/dev/null 2>&1 && break
  podman container inspect -f '{{.State.Running}}' "$name" | grep -q true || fail "traind exited"
  sleep 0.2
done
"$bin_dir/trainctl" --address "$sock" --timeout 5 health >/dev/null || fail "no health over $sock"
uid=$(podman exec "$name" id -u)
[[ $uid == 10001 ]] || fail "traind runs as uid $uid"
if podman exec "$name" touch /usr/local/bin/x 2>/dev/null; then fail "the root file system is writable"; fi
# The image's HEALTHCHECK (trainctl health over the socket inside).
podman healthcheck run "$name" >/dev/null || fail "podman healthcheck run: not healthy"

tcp=(--address "127.0.0.1:$port" --tls-ca "$work/etc/tls/cert.pem" --token-file "$work/token")
step "a CV job over TCP (TLS, token)"
cd "$src"
# submit_id ARGS...: trainctl ARGS, then the id of the job it submitted.
submit_id() {
  local out
  out=$("$bin_dir/trainctl" "$@") || return 1
  sed -n 's/^submitted job \([0-9a-f]*\).*/\1/p' <<<"$out"
}
job_tcp=$(submit_id "${tcp[@]}" submit examples/iris-cv.yaml --set training.epochs=5) &&
  [[ -n $job_tcp ]] || fail "submit over TCP"
"$bin_dir/trainctl" "${tcp[@]}" --timeout 120 watch "$job_tcp" >"$work/watch_tcp.txt" ||
  { cat "$work/watch_tcp.txt" >&2; fail "job $job_tcp over TCP did not succeed"; }
if "$bin_dir/trainctl" --address "127.0.0.1:$port" --tls-ca "$work/etc/tls/cert.pem" \
  --token wrong list >/dev/null 2>&1; then fail "a wrong token was let in"; fi

step "a CV job over the unix socket (data under /data)"
sed -e 's|path: examples/data/iris.csv|path: /data/iris.csv|' examples/iris-cv.yaml >"$work/iris-unix.yaml"
job_unix=$(submit_id --address "$sock" submit "$work/iris-unix.yaml" --set training.epochs=5) &&
  [[ -n $job_unix ]] || fail "submit over the unix socket"
"$bin_dir/trainctl" --address "$sock" --timeout 120 watch "$job_unix" >"$work/watch_unix.txt" ||
  { cat "$work/watch_unix.txt" >&2; fail "job $job_unix over the unix socket did not succeed"; }

step "artifacts on the host"
for job in "$job_tcp" "$job_unix"; do
  n=$(find "$work/state" -path "*$job*" -name 'predictions*.csv' | wc -l)
  [[ $n -ge 1 ]] || fail "no predictions file of $job under the bind-mounted state directory"
  "$bin_dir/trainctl" "${tcp[@]}" artifacts "$job" >/dev/null || fail "artifacts of $job over TCP"
done
"$bin_dir/trainctl" "${tcp[@]}" download "$job_tcp" predictions.csv -O "$work/p.csv" >/dev/null ||
  fail "download of $job_tcp's predictions.csv"
[[ $(wc -l <"$work/p.csv") -eq 151 ]] || fail "predictions.csv has $(wc -l <"$work/p.csv") lines, not 151"

step "podman stop"
podman stop -t 30 "$name" >/dev/null || fail "podman stop"
code=$(podman container inspect -f '{{.State.ExitCode}}' "$name")
[[ $code == 0 ]] || fail "traind exited $code after podman stop"
podman logs "$name" 2>&1 | grep -q "traind stopped" || fail "no 'traind stopped' line in its log"

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ -f $bin_dir/libtraind_cuda.so && -e $cuda_home/lib64/libcublas.so.13 ]]; then
  step "build the gpu image"
  "$src/deploy/docker/prebuilt-context.sh" "$bin_dir" "$work/ctx-gpu" --gpu >/dev/null
  podman build --format docker --network host --build-arg "DEBIAN_IMAGE=$base" \
    --target gpu -t "$tag:gpu" \
    -f "$src/deploy/docker/Dockerfile" "$work/ctx-gpu" >"$work/build-gpu.log" 2>&1 || {
    tail -n 40 "$work/build-gpu.log" >&2
    fail "podman build of the gpu target"
  }
  rm -rf "$work/ctx-gpu"
  caps=$(podman run --rm --entrypoint traind-worker "$tag:gpu" --capabilities) ||
    fail "traind-worker --capabilities in the gpu image"
  [[ $caps == cpu* ]] || fail "the gpu image's worker says '$caps'"
else
  echo "(no CUDA plugin in $bin_dir or no CUDA libraries in $cuda_home: the gpu target is not built)"
fi
echo "PASS"
