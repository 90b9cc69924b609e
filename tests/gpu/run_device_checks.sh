#!/usr/bin/env bash
# GPU device checks, in two halves (see tests/gpu/README.md):
#
#   tests/gpu/run_device_checks.sh build    # here (no GPU): build, bundle into build-gpu/bundle
#   tests/gpu/run_device_checks.sh device   # on the GPU machine, from the repository root,
#                                           # with build-gpu/bundle.tar.xz carried along (< 60 MiB)
#
# The device half prints one "== step" header per check and a final summary
# line per step: PASS, FAIL or SKIP with the reason. Exit status: 0 when no
# step failed. It never changes the GPU's settings; every step has a timeout
# so the whole run fits in about 8 minutes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build-gpu}"
BUNDLE="$BUILD/bundle"
MODE="${1:-}"

# Libraries that stay on the device machine: glibc, the C++ runtime, and the
# large CUDA libraries (cuBLAS/cuBLASLt are ~600 MB, NCCL ~250 MB), found
# there under the CUDA toolkit or PyTorch's nvidia-* wheels.
SYSTEM_LIB_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libnccl|libcuda\.so)'
BINARIES=(traind_cuda_tests traind-worker traind trainctl)

build_half() {
  set -e
  # The bundled executables find their libraries in ../lib through DT_RPATH
  # (which, unlike RUNPATH, also serves the libraries they load): traind
  # starts workers with a fixed environment, without LD_LIBRARY_PATH.
  # (The install RPATH in the build tree: no padding for install-time
  # rewriting, whose empty entries would mean ".".)
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_WITH_CUDA=ON \
    -DTRAIND_BUILD_TESTS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
    '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    >/dev/null
  cmake --build "$BUILD" --target "${BINARIES[@]}" traind_cuda
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/gpu"
  for b in "${BINARIES[@]}" libtraind_cuda.so; do
    cp "$BUILD/bin/$b" "$BUNDLE/bin/"
    strip --strip-debug "$BUNDLE/bin/$b" || true
  done
  # traind-worker loads the plugin from its own directory: never linked.
  if readelf -d "$BUNDLE/bin/traind-worker" | grep -Eq 'NEEDED.*(libcuda|libcublas|libnccl)'; then
    echo "traind-worker links a CUDA library" >&2
    exit 1
  fi
  # Non-system shared libraries the binaries and the plugin need
  # (transitively, via ldd).
  for b in "$BUNDLE"/bin/*; do
    ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
  done | sort -u | while read -r name path; do
    if [[ "$name" =~ $SYSTEM_LIB_RE ]]; then continue; fi
    cp -L "$path" "$BUNDLE/lib/$name"
    strip --strip-unneeded "$BUNDLE/lib/$name" 2>/dev/null || true
  done
  cp -r "$ROOT/examples" "$BUNDLE/examples"
  cp "$ROOT/tests/gpu/torch_mlp_gpu.py" "$BUNDLE/gpu/"
  # What travels: one xz archive (oneDNN and gRPC alone are ~50 MiB unpacked).
  tar -C "$BUILD" -cJf "$BUILD/bundle.tar.xz" bundle
  local size
  size=$(( $(stat -c %s "$BUILD/bundle.tar.xz") / 1048576 ))
  echo "bundle: $BUNDLE ($(du -sm "$BUNDLE" | cut -f1) MiB), archive $BUILD/bundle.tar.xz (${size} MiB)"
  if [ "$size" -ge 60 ]; then echo "bundle archive is over 60 MiB" >&2; exit 1; fi
}

# --- device half -----------------------------------------------------------
declare -a SUMMARY=()
FAILED=0
step() { echo; echo "== $*"; }
result() {  # result PASS|FAIL|SKIP name reason
  SUMMARY+=("$1  $2${3:+ — $3}")
  [ "$1" = FAIL ] && FAILED=1
  echo "-> $1 $2${3:+ — $3}"
}
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l | cut -c1-6; }  # elapsed START END (seconds)
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }

find_cuda_libs() {
  # Directories that hold libcublas.so.13 / libcublasLt.so.13 / libnccl.so.2.
  local dirs=() d lib
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    d=$( (ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/local/cuda*/targets/*/lib \
            /usr/lib/x86_64-linux-gnu \
            2>/dev/null; python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
            2>/dev/null | sed 's|$|/nvidia|') | while read -r base; do
          f=$(find "$base" -maxdepth 3 -name "$lib" 2>/dev/null | head -1)
          if [ -n "$f" ]; then dirname "$f"; break; fi
        done)
    if [ -z "$d" ]; then echo "missing:$lib"; else dirs+=("$d"); fi
  done
  printf '%s\n' "${dirs[@]}" | sort -u | paste -sd: -
}

# A spec for the GPU from an example: device gpu, data under the bundle.
gpu_spec() {  # gpu_spec EXAMPLE OUTFILE [sed expressions...]
  local example="$1" out="$2"
  shift 2
  sed -e 's|resources: {device: cpu}|resources: {device: gpu, count: 1}|' \
      -e "s|path: examples/|path: $BUNDLE/examples/|" "$@" "$BUNDLE/examples/$example.yaml" >"$out"
}

device_half() {
  if [ ! -d "$BUNDLE/bin" ] && [ -f "$BUILD/bundle.tar.xz" ]; then
    tar -C "$BUILD" -xJf "$BUILD/bundle.tar.xz"
  fi
  [ -d "$BUNDLE/bin" ] || { echo "no bundle at $BUNDLE: run '$0 build' first" >&2; exit 2; }
  local OUTDIR="${OUT:-$BUILD/device-out}"
  mkdir -p "$OUTDIR"
  local W="$BUNDLE/bin/traind-worker"
  step "device"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
  local cudalibs
  cudalibs=$(find_cuda_libs)
  if [[ "$cudalibs" == *missing:* ]]; then
    echo "CUDA 13 libraries not found on this machine: $cudalibs"
    result FAIL libraries "cuBLAS 13 / NCCL 2 not found (see find_cuda_libs)"
    return
  fi
  # The plugin finds cuBLAS/NCCL beside itself ($ORIGIN): workers started by
  # traind get no LD_LIBRARY_PATH.
  local dir lib
  for dir in ${cudalibs//:/ }; do
    for lib in "$dir"/libcublas.so.13 "$dir"/libcublasLt.so.13 "$dir"/libnccl.so.2; do
      [ -e "$lib" ] && ln -sf "$lib" "$BUNDLE/bin/"
    done
  done
  export LD_LIBRARY_PATH="$BUNDLE/lib:$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if ldd "$BUNDLE/bin/traind_cuda_tests" "$BUNDLE/bin/libtraind_cuda.so" | grep -q 'not found'; then
    ldd "$BUNDLE/bin/traind_cuda_tests" "$BUNDLE/bin/libtraind_cuda.so" | grep 'not found'
    result FAIL libraries "unresolved shared libraries"
    return
  fi

  step "ops: CUDA vs CPU on fresh random inputs, NCCL communicator (traind_cuda_tests)"
  if timeout 200 "$BUNDLE/bin/traind_cuda_tests" --gtest_brief=1 --gtest_filter='-CudaGradientTest.*' \
       --gtest_output="xml:$OUTDIR/traind_cuda_tests.xml" 2>&1 | tee "$OUTDIR/cuda_tests.log" | tail -60; then
    if grep -q 'no CUDA device' "$OUTDIR/cuda_tests.log"; then
      result FAIL ops "tests skipped: the GPU was not found"
    else
      result PASS ops "$(grep -E '^\[  PASSED  \]' "$OUTDIR/cuda_tests.log" | head -1)"
    fi
  else
    result FAIL ops "see $OUTDIR/cuda_tests.log"
  fi

  step "gradient checks on the GPU (finite differences through the CUDA backend)"
  if timeout 120 "$BUNDLE/bin/traind_cuda_tests" --gtest_brief=1 --gtest_filter='CudaGradientTest.*' \
       --gtest_output="xml:$OUTDIR/traind_cuda_gradient_tests.xml" 2>&1 \
       | tee "$OUTDIR/cuda_gradient_tests.log" | tail -40; then
    if grep -q 'no CUDA device' "$OUTDIR/cuda_gradient_tests.log"; then
      result FAIL "gradient checks" "tests skipped: the GPU was not found"
    else
      result PASS "gradient checks" "$(grep -E '^\[  PASSED  \]' "$OUTDIR/cuda_gradient_tests.log" | head -1)"
    fi
  else
    result FAIL "gradient checks" "see $OUTDIR/cuda_gradient_tests.log"
  fi

  step "traind-worker --capabilities (loads the plugin, counts devices)"
  local caps
  caps=$(env -i PATH=/usr/bin:/bin "$W" --capabilities 2>"$OUTDIR/capabilities.err")
  echo "traind-worker --capabilities (empty environment): $caps"
  cat "$OUTDIR/capabilities.err"
  if [ "$caps" = "cpu cuda" ]; then
    result PASS capabilities "cpu cuda"
  else
    result FAIL capabilities "'$caps': $(head -1 "$OUTDIR/capabilities.err")"
    return  # nothing below can train on the GPU
  fi

  step "iris + digits CV jobs through traind on the GPU"
  local state="$OUTDIR/traind-state" traind_pid spec job_json
  rm -rf "$state"
  mkdir -p "$state"
  "$BUNDLE/bin/traind" --state-dir="$state" --listen="unix:$state/traind.sock" \
    --data-root="$BUNDLE" --data-root="$OUTDIR" >"$OUTDIR/traind.log" 2>&1 &
  traind_pid=$!
  local ctl=("$BUNDLE/bin/trainctl" --address "unix:$state/traind.sock")
  for _ in $(seq 1 100); do "${ctl[@]}" health >/dev/null 2>&1 && break; sleep 0.2; done
  "${ctl[@]}" devices 2>&1 | tee "$OUTDIR/devices.txt"
  for name in iris-cv digits-multiclass; do
    spec="$OUTDIR/$name-gpu.yaml"
    gpu_spec "$name" "$spec"
    local t0 t1
    t0=$(now)
    if timeout 150 "${ctl[@]}" -o json submit "$spec" --wait >"$OUTDIR/$name.job.json" 2>"$OUTDIR/$name.err"; then
      t1=$(now)
      job_json=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
r = j.get("result", {})
acc = r.get("val", {}).get("accuracy", {})
print("%s, %d folds, val accuracy %.4f ± %.4f" % (j.get("state"), len(r.get("folds", [])),
      acc.get("mean", float("nan")), acc.get("std", float("nan"))))' "$OUTDIR/$name.job.json" 2>/dev/null)
      result PASS "$name through traind on the GPU" "${job_json:-SUCCEEDED} in $(elapsed "$t0" "$t1") s"
    else
      result FAIL "$name through traind on the GPU" "$(tail -3 "$OUTDIR/$name.err" | tr '\n' ' ') (traind log: $OUTDIR/traind.log)"
    fi
  done
  kill -TERM "$traind_pid" 2>/dev/null
  wait "$traind_pid" 2>/dev/null

  step "50 folds in a row, GPU memory back at its idle baseline after each"
  gpu_spec iris-cv "$OUTDIR/iris-20-gpu.yaml" -e 's|epochs: 60|epochs: 20|'
  local base used i leaks=0 failures=0 worst=0 settle
  base=$(gpu_used)
  echo "idle baseline: ${base} MiB"
  local t_folds0 t_folds1
  t_folds0=$(now)
  for i in $(seq 1 50); do
    if ! timeout 30 "$W" --spec="$OUTDIR/iris-20-gpu.yaml" --fold=$((i % 5)) >/dev/null \
         2>>"$OUTDIR/folds.err"; then
      failures=$((failures + 1))
    fi
    # The driver frees a context's memory as the process exits; allow it a
    # moment to show.
    used=$(gpu_used)
    for settle in 1 2 3 4 5 6 7 8 9 10; do
      [ "$used" -le "$((base + 2))" ] && break
      sleep 0.1
      used=$(gpu_used)
    done
    [ "$used" -gt "$worst" ] && worst=$used
    [ "$used" -gt "$((base + 2))" ] && leaks=$((leaks + 1))
    echo "fold $i: ${used} MiB"
  done
  t_folds1=$(now)
  if [ "$leaks" = 0 ] && [ "$failures" = 0 ]; then
    result PASS "50 folds" "memory back at ${base} MiB after each (max seen ${worst}); $(elapsed "$t_folds0" "$t_folds1") s in all"
  else
    result FAIL "50 folds" "$failures folds failed, $leaks left memory above ${base} MiB (see $OUTDIR/folds.err)"
  fi

  step "per-fold start + context + teardown (iris fold, 1 epoch; GPU vs CPU process)"
  gpu_spec iris-cv "$OUTDIR/iris-1-gpu.yaml" -e 's|epochs: 60|epochs: 1|'
  sed -e 's|resources: {device: gpu, count: 1}|resources: {device: cpu}|' \
    "$OUTDIR/iris-1-gpu.yaml" >"$OUTDIR/iris-1-cpu.yaml"
  local kind t0 t1 walls
  for kind in gpu cpu; do
    walls=()
    : >"$OUTDIR/start-$kind.err"
    for i in 1 2 3 4 5 6; do
      t0=$(now)
      timeout 30 "$W" --spec="$OUTDIR/iris-1-$kind.yaml" --fold=0 >/dev/null 2>>"$OUTDIR/start-$kind.err"
      t1=$(now)
      [ "$i" -gt 1 ] && walls+=("$(elapsed "$t0" "$t1")")  # the first warms the page cache
    done
    echo "$kind process wall (s): ${walls[*]}"
    eval "wall_$kind=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n 3p)"
  done
  local parts
  parts=$(python3 - "$OUTDIR/start-gpu.err" <<'EOF'
import re, statistics, sys
text = open(sys.argv[1]).read()
ready = [tuple(map(float, m)) for m in re.findall(
    r"gpu ready in (\d+) ms \(plugin load (\d+) ms, CUDA context and cuBLAS (\d+) ms\)", text)][1:]
released = [float(m) for m in re.findall(r"gpu released in (\d+) ms", text)][1:]
if ready and released:
    med = lambda xs: statistics.median(xs)
    print("plugin load %.0f ms, CUDA context + cuBLAS %.0f ms, release %.0f ms (medians)" % (
        med([r[1] for r in ready]), med([r[2] for r in ready]), med(released)))
EOF
)
  if [ -n "$parts" ]; then
    result PASS "fold start+teardown" "GPU fold process ${wall_gpu} s vs CPU ${wall_cpu} s (median wall, iris, 1 epoch); $parts"
  else
    result FAIL "fold start+teardown" "no timings in $OUTDIR/start-gpu.err"
  fi

  step "benchmark: traind vs PyTorch (CUDA) on MLP 784-512-256-10"
  local data="$OUTDIR/mnistlike-32768.csv" rows=32768
  if ! python3 -c 'import torch, numpy; assert torch.cuda.is_available()' 2>"$OUTDIR/torch.err"; then
    result SKIP "benchmark vs PyTorch" "PyTorch with CUDA not importable: $(tail -1 "$OUTDIR/torch.err")"
    return
  fi
  timeout 60 python3 "$BUNDLE/gpu/torch_mlp_gpu.py" --rows "$rows" --seed 1 --write-csv "$data"
  local batch epochs precision tj wj sps_t sps_w
  for run in "128 4 fp32" "4096 20 fp32" "4096 20 tf32"; do
    read -r batch epochs precision <<<"$run"
    cat >"$OUTDIR/bench-$batch-$precision.yaml" <<EOF
name: bench-mlp-$batch-$precision
data: {path: $data, label: label, standardize: true}
seed: 42
model:
  layers:
    - dense: {units: 512, activation: relu}
    - dense: {units: 256, activation: relu}
    - dense: {units: 10}
loss: {softmax_cross_entropy: {}}
optimizer: {sgd: {learning_rate: 0.01, momentum: 0.9}}
training: {epochs: $epochs, batch_size: $batch, precision: $precision}
metrics: {train: [loss]}
resources: {device: gpu, count: 1}
EOF
    tj=$(timeout 90 python3 "$BUNDLE/gpu/torch_mlp_gpu.py" --rows "$rows" --seed 1 --batch "$batch" \
           --epochs "$epochs" $([ "$precision" = tf32 ] && echo --tf32) 2>>"$OUTDIR/torch.err")
    echo "torch: $tj"
    timeout 90 "$W" --spec="$OUTDIR/bench-$batch-$precision.yaml" >"$OUTDIR/bench-$batch-$precision.jsonl" \
      2>"$OUTDIR/bench-$batch-$precision.err"
    wj=$(python3 - "$OUTDIR/bench-$batch-$precision.jsonl" "$rows" <<'EOF'
import json, statistics, sys
secs = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if l.startswith('{"') and '"fold_result"' not in l]
steady = secs[1:] or secs
print(int(sys.argv[2]) / statistics.median(steady) if secs else 0)
EOF
)
    sps_t=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["samples_per_s"])' "$tj" 2>/dev/null || echo 0)
    sps_w=${wj:-0}
    echo "batch $batch $precision: traind $sps_w samples/s, torch $sps_t samples/s"
    if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 and float(sys.argv[2]) > 0 else 1)' "$sps_w" "$sps_t"; then
      result PASS "benchmark batch $batch $precision" "$(python3 -c 'import sys; w,t=map(float,sys.argv[1:]); print("traind %.0f samples/s, PyTorch %.0f samples/s, ratio %.2f" % (w, t, w / t))' "$sps_w" "$sps_t")"
    else
      result FAIL "benchmark batch $batch $precision" "traind: $(tail -1 "$OUTDIR/bench-$batch-$precision.err"); torch: $(tail -1 "$OUTDIR/torch.err")"
    fi
  done
}

case "$MODE" in
  build) build_half ;;
  device)
    device_half
    echo
    echo "== summary"
    printf '%s\n' "${SUMMARY[@]}"
    exit "$FAILED"
    ;;
  *) echo "usage: $0 build|device" >&2; exit 2 ;;
esac
