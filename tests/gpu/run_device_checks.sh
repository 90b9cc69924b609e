#!/usr/bin/env bash
# GPU device checks, in two halves (see tests/gpu/README.md):
#
#   tests/gpu/run_device_checks.sh build    # here (no GPU): build, bundle into build-gpu/bundle
#   tests/gpu/run_device_checks.sh device   # on the GPU machine, from the repository root,
#                                           # with build-gpu/bundle.tar.xz carried along (< 60 MiB)
#
# The device half prints one "== step" header per check and a final summary
# line per step: PASS, FAIL or SKIP with the reason. Exit status: 0 when no
# step failed. It never changes the GPU's settings. It works under /tmp
# (WORK, unpacking the archive fresh each run), and every step has a timeout
# under one global deadline (DEVICE_BUDGET_S, 480 s): a step that would not
# fit in what is left is skipped. What it leaves in $OUT is small: summary.txt
# (also written step by step, and printed at exit, however the run ends) and
# logs.tar.gz.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build-gpu}"
BUNDLE="$BUILD/bundle"
MODE="${1:-}"

# Libraries that stay on the device machine: glibc, the C++ runtime, and the
# large CUDA libraries (cuBLAS/cuBLASLt are ~600 MB, NCCL ~250 MB), found
# there under the CUDA toolkit or PyTorch's nvidia-* wheels (cuDNN 9's
# libraries too: ~500 MB, and libcudnn.so.9 loads the rest at run time).
SYSTEM_LIB_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libnccl|libcudnn|libcuda\.so)'
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
  cp "$ROOT/tests/gpu/torch_mlp_gpu.py" "$ROOT/bench/peers/torch_cnn.py" "$BUNDLE/gpu/"
  # A Fashion-MNIST subset for the convolution check, where the dataset is
  # installed here: the first 12,000 training and 2,000 t10k images with their
  # labels, as gzipped IDX files under the dataset's names (~6 MB).
  local fm=/usr/share/datasets/fashion-mnist
  if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$BUNDLE/data/fashion-mnist"
    python3 - "$fm" "$BUNDLE/data/fashion-mnist" <<'EOF'
import gzip, struct, sys
src, dst = sys.argv[1:]
for split, n in (("train", 12000), ("t10k", 2000)):
    for kind in ("images-idx3", "labels-idx1"):
        name = "%s-%s-ubyte.gz" % (split, kind)
        with gzip.open("%s/%s" % (src, name)) as f:
            data = f.read()
        ndim = data[3]
        dims = list(struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim]))
        item = 1
        for d in dims[1:]:
            item *= d
        start = 4 + 4 * ndim
        out = data[:4] + struct.pack(">%dI" % ndim, n, *dims[1:]) + data[start:start + n * item]
        with gzip.open("%s/%s" % (dst, name), "wb") as f:
            f.write(out)
EOF
  fi
  # What travels: one xz archive (oneDNN and gRPC alone are ~50 MiB unpacked).
  tar -C "$BUILD" -cJf "$BUILD/bundle.tar.xz" bundle
  local size
  size=$(( $(stat -c %s "$BUILD/bundle.tar.xz") / 1048576 ))
  echo "bundle: $BUNDLE ($(du -sm "$BUNDLE" | cut -f1) MiB), archive $BUILD/bundle.tar.xz (${size} MiB)"
  if [ "$size" -ge 60 ]; then echo "bundle archive is over 60 MiB" >&2; exit 1; fi
}

# --- device half -----------------------------------------------------------
WORK="${WORK:-/tmp/tdc}"  # short: traind's unix socket lives under it
BUDGET_S="${DEVICE_BUDGET_S:-480}"
T_START=$(date +%s)
DEADLINE=$((T_START + BUDGET_S))
OUTDIR=""     # the final files ($OUT): summary.txt, logs.tar.gz
LOGS=""       # everything worth reading, packed into logs.tar.gz at exit
TRAIND_PID=""
declare -a SUMMARY=()
FAILED=0
step() { echo; echo "== $*"; }
result() {  # result PASS|FAIL|SKIP name reason
  local line="$1  $2${3:+ — $3}"
  SUMMARY+=("$line")
  [ "$1" = FAIL ] && FAILED=1
  echo "-> $1 $2${3:+ — $3}"
  # Written as it goes: a run killed outright still leaves what it found.
  [ -n "$OUTDIR" ] && printf '%s\n' "$line" >>"$OUTDIR/summary.txt"
  return 0
}
left() { echo $((DEADLINE - $(date +%s))); }  # seconds to the deadline
# need SECONDS NAME: true when SECONDS are left; else records NAME as SKIP.
need() {
  local l
  l=$(left)
  if [ "$l" -lt "$1" ]; then
    result SKIP "$2" "out of time (${l} s left of ${BUDGET_S} s, needs ${1} s)"
    return 1
  fi
}
# limit SECONDS: SECONDS, or less when the deadline is nearer (at least 1).
limit() {
  local l
  l=$(( $(left) - 5 ))
  [ "$l" -lt "$1" ] && { [ "$l" -ge 1 ] && echo "$l" || echo 1; } || echo "$1"
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }  # elapsed START END
is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }
# MiB used on the GPU, or nothing when nvidia-smi gives no number.
gpu_used() {
  local v
  v=$(timeout 10 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null \
        | head -1 | tr -d ' ')
  is_int "$v" && echo "$v"
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$TRAIND_PID" ]; then
    kill -TERM "$TRAIND_PID" 2>/dev/null
    sleep 1
    kill -KILL "$TRAIND_PID" 2>/dev/null
  fi
  echo
  echo "== summary ($(( $(date +%s) - T_START )) s)"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -n "$OUTDIR" ] && [ -d "$LOGS" ]; then
    # The attempt logs traind wrote, then every log cut to its last 2 MiB:
    # what comes back from the device machine is limited.
    [ -d "$WORK/state/jobs" ] &&
      (cd "$WORK/state" && find jobs -name '*.log' -exec cp --parents {} "$LOGS/" \;) 2>/dev/null
    find "$LOGS" -type f -size +2M | while read -r f; do
      tail -c 2097152 "$f" >"$f.tail" && mv "$f.tail" "$f"
    done
    tar -C "$WORK" -czf "$OUTDIR/logs.tar.gz" logs 2>/dev/null || echo "cannot pack $LOGS" >&2
  fi
  if [ "$rc" -eq 0 ]; then rc=$FAILED; fi
  exit "$rc"
}

find_cuda_libs() {
  # Directories that hold libcublas.so.13 / libcublasLt.so.13 / libnccl.so.2 /
  # libcudnn.so.9.
  local dirs=() d lib
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
    d=$( (ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/local/cuda*/targets/*/lib \
            /usr/lib/x86_64-linux-gnu \
            2>/dev/null; timeout 20 python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
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
  OUTDIR="${OUT:-$BUILD/device-out}"
  mkdir -p "$OUTDIR"
  rm -f "$OUTDIR/summary.txt" "$OUTDIR/logs.tar.gz"
  # A warm machine keeps the last run's files: start from the archive again.
  rm -rf "$WORK"
  mkdir -p "$WORK/logs" "$WORK/specs" "$WORK/data" "$WORK/state"
  LOGS="$WORK/logs"
  trap finish EXIT
  trap 'exit 124' INT TERM  # through finish: the summary still comes out
  local archive="$BUILD/bundle.tar.xz"
  if [ ! -f "$archive" ]; then
    result FAIL bundle "no $archive: run '$0 build' first and carry it along"
    exit 2
  fi
  BUNDLE="$WORK/bundle"
  if ! tar -C "$WORK" -xJf "$archive" || [ ! -d "$BUNDLE/bin" ]; then
    result FAIL bundle "cannot unpack $archive"
    exit 2
  fi
  local L="$LOGS" S="$WORK/specs" D="$WORK/data"
  local W="$BUNDLE/bin/traind-worker"
  step "device"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv \
    || echo "nvidia-smi failed"
  local cudalibs
  cudalibs=$(find_cuda_libs)
  if [[ "$cudalibs" == *missing:* ]]; then
    echo "CUDA 13 libraries not found on this machine: $cudalibs"
    result FAIL libraries "cuBLAS 13 / NCCL 2 / cuDNN 9 not found (see find_cuda_libs)"
    return
  fi
  # The plugin finds cuBLAS/NCCL beside itself ($ORIGIN): workers started by
  # traind get no LD_LIBRARY_PATH.
  local dir lib
  for dir in ${cudalibs//:/ }; do
    for lib in "$dir"/libcublas.so.13 "$dir"/libcublasLt.so.13 "$dir"/libnccl.so.2 \
               "$dir"/libcudnn*.so.9; do
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
  if need 60 ops; then
    if timeout "$(limit 200)" "$BUNDLE/bin/traind_cuda_tests" --gtest_brief=1 \
         --gtest_filter='-CudaGradientTest.*' --gtest_output="xml:$L/traind_cuda_tests.xml" 2>&1 \
         | tee "$L/cuda_tests.log" | tail -60; then
      if grep -q 'no CUDA device' "$L/cuda_tests.log"; then
        result FAIL ops "tests skipped: the GPU was not found"
      else
        result PASS ops "$(grep -E '^\[  PASSED  \]' "$L/cuda_tests.log" | head -1)"
      fi
    else
      result FAIL ops "see logs/cuda_tests.log"
    fi
  fi

  step "gradient checks on the GPU (finite differences through the CUDA backend)"
  if need 40 "gradient checks"; then
    if timeout "$(limit 120)" "$BUNDLE/bin/traind_cuda_tests" --gtest_brief=1 \
         --gtest_filter='CudaGradientTest.*' --gtest_output="xml:$L/traind_cuda_gradient_tests.xml" \
         2>&1 | tee "$L/cuda_gradient_tests.log" | tail -40; then
      if grep -q 'no CUDA device' "$L/cuda_gradient_tests.log"; then
        result FAIL "gradient checks" "tests skipped: the GPU was not found"
      else
        result PASS "gradient checks" "$(grep -E '^\[  PASSED  \]' "$L/cuda_gradient_tests.log" | head -1)"
      fi
    else
      result FAIL "gradient checks" "see logs/cuda_gradient_tests.log"
    fi
  fi

  step "traind-worker --capabilities (loads the plugin, counts devices)"
  need 20 capabilities || return
  local caps
  caps=$(env -i PATH=/usr/bin:/bin timeout 15 "$W" --capabilities 2>"$L/capabilities.err")
  echo "traind-worker --capabilities (empty environment): $caps"
  cat "$L/capabilities.err"
  if [[ " $caps " == *" cuda "* ]]; then
    result PASS capabilities "$caps"
  else
    result FAIL capabilities "'$caps': $(head -1 "$L/capabilities.err")"
    return  # nothing below can train on the GPU
  fi

  step "iris + digits CV jobs through traind on the GPU"
  if need 40 "jobs through traind"; then
    local state="$WORK/state" sock="$WORK/state/t.sock" spec job_json healthy=0 t0 t1 name
    "$BUNDLE/bin/traind" --state-dir="$state" --listen="unix:$sock" \
      --data-root="$BUNDLE" --data-root="$WORK" >"$L/traind.log" 2>&1 &
    TRAIND_PID=$!
    local ctl=("$BUNDLE/bin/trainctl" --address "unix:$sock")
    # Up to 20 s, each probe bounded: a wedged traind must not hold the run.
    local wait_until=$(( $(date +%s) + 20 ))
    while [ "$(date +%s)" -lt "$wait_until" ]; do
      if timeout 5 "${ctl[@]}" health >/dev/null 2>&1; then healthy=1; break; fi
      kill -0 "$TRAIND_PID" 2>/dev/null || break  # traind exited
      sleep 0.2
    done
    if [ "$healthy" != 1 ]; then
      result FAIL "traind healthy" "traind did not answer health within 20 s: $(tail -2 "$L/traind.log" | tr '\n' ' ')"
      result SKIP "iris-cv, digits-multiclass through traind" "traind not healthy"
    else
      timeout 10 "${ctl[@]}" devices 2>&1 | tee "$L/devices.txt"
      for name in iris-cv digits-multiclass; do
        need 20 "$name through traind on the GPU" || continue
        spec="$S/$name-gpu.yaml"
        gpu_spec "$name" "$spec"
        t0=$(now)
        if timeout "$(limit 150)" "${ctl[@]}" -o json submit "$spec" --wait \
             >"$L/$name.job.json" 2>"$L/$name.err"; then
          t1=$(now)
          job_json=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
r = j.get("result", {})
acc = r.get("val", {}).get("accuracy", {})
print("%s, %d folds, val accuracy %.4f ± %.4f" % (j.get("state"), len(r.get("folds", [])),
      acc.get("mean", float("nan")), acc.get("std", float("nan"))))' "$L/$name.job.json" 2>/dev/null)
          result PASS "$name through traind on the GPU" "${job_json:-SUCCEEDED} in $(elapsed "$t0" "$t1") s"
        else
          result FAIL "$name through traind on the GPU" "$(tail -3 "$L/$name.err" | tr '\n' ' ') (logs/traind.log)"
        fi
      done
    fi
    kill -TERM "$TRAIND_PID" 2>/dev/null
    timeout 15 tail --pid="$TRAIND_PID" -f /dev/null 2>/dev/null || kill -KILL "$TRAIND_PID" 2>/dev/null
    wait "$TRAIND_PID" 2>/dev/null
    TRAIND_PID=""
  fi

  local folds=15
  step "$folds folds in a row, GPU memory back at its idle baseline after each"
  if need 40 "$folds folds"; then
    gpu_spec iris-cv "$S/iris-20-gpu.yaml" -e 's|epochs: 60|epochs: 20|'
    local base used i leaks=0 failures=0 unread=0 worst=0 settle done_folds=0 t_folds0 t_folds1
    base=$(gpu_used)
    echo "idle baseline: ${base:-unreadable} MiB"
    t_folds0=$(now)
    for i in $(seq 1 "$folds"); do
      [ "$(left)" -lt 15 ] && break
      if ! timeout "$(limit 30)" "$W" --spec="$S/iris-20-gpu.yaml" --fold=$((i % 5)) >/dev/null \
           2>>"$L/folds.err"; then
        failures=$((failures + 1))
      fi
      done_folds=$i
      # The driver frees a context's memory as the process exits; allow it a
      # moment to show.
      used=$(gpu_used)
      if is_int "$base"; then
        for settle in 1 2 3 4 5 6 7 8 9 10; do
          is_int "$used" && [ "$used" -le "$((base + 2))" ] && break
          sleep 0.1
          used=$(gpu_used)
        done
      fi
      if is_int "$used" && is_int "$base"; then
        [ "$used" -gt "$worst" ] && worst=$used
        [ "$used" -gt "$((base + 2))" ] && leaks=$((leaks + 1))
      else
        unread=$((unread + 1))
      fi
      echo "fold $i: ${used:-unreadable} MiB"
    done
    t_folds1=$(now)
    if [ "$done_folds" -lt "$folds" ]; then
      result FAIL "$folds folds" "out of time after $done_folds folds ($failures failed)"
    elif ! is_int "$base" || [ "$unread" != 0 ]; then
      result FAIL "$folds folds" "nvidia-smi gave no memory reading ($unread of $folds after a fold, baseline '${base}'); $failures folds failed"
    elif [ "$leaks" = 0 ] && [ "$failures" = 0 ]; then
      result PASS "$folds folds" "memory back at ${base} MiB after each (max seen ${worst}); $(elapsed "$t_folds0" "$t_folds1") s in all"
    else
      result FAIL "$folds folds" "$failures folds failed, $leaks left memory above ${base} MiB (logs/folds.err)"
    fi
  fi

  step "per-fold start + context + teardown (iris fold, 1 epoch; GPU vs CPU process)"
  if need 60 "fold start+teardown"; then
    gpu_spec iris-cv "$S/iris-1-gpu.yaml" -e 's|epochs: 60|epochs: 1|'
    sed -e 's|resources: {device: gpu, count: 1}|resources: {device: cpu}|' \
      "$S/iris-1-gpu.yaml" >"$S/iris-1-cpu.yaml"
    local kind walls wall_gpu="" wall_cpu=""
    for kind in gpu cpu; do
      walls=()
      : >"$L/start-$kind.err"
      for i in 1 2 3 4 5 6; do
        [ "$(left)" -lt 10 ] && break
        t0=$(now)
        timeout "$(limit 30)" "$W" --spec="$S/iris-1-$kind.yaml" --fold=0 >/dev/null \
          2>>"$L/start-$kind.err"
        t1=$(now)
        [ "$i" -gt 1 ] && walls+=("$(elapsed "$t0" "$t1")")  # the first warms the page cache
      done
      echo "$kind process wall (s): ${walls[*]}"
      if [ "${#walls[@]}" -gt 0 ]; then
        printf -v "wall_$kind" '%s' "$(printf '%s\n' "${walls[@]}" | sort -n \
          | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
      fi
    done
    local parts
    parts=$(python3 - "$L/start-gpu.err" <<'EOF'
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
    if [ -n "$parts" ] && [ -n "$wall_gpu" ] && [ -n "$wall_cpu" ]; then
      result PASS "fold start+teardown" "GPU fold process ${wall_gpu} s vs CPU ${wall_cpu} s (median wall, iris, 1 epoch); $parts"
    else
      result FAIL "fold start+teardown" "no timings (logs/start-gpu.err, logs/start-cpu.err)"
    fi
  fi

  fashion_mnist_step
  step "benchmark: traind vs PyTorch (CUDA) on MLP 784-512-256-10"
  need 60 "benchmark vs PyTorch" || return
  local data="$D/mnistlike-32768.csv" rows=32768
  if ! timeout "$(limit 60)" python3 -c 'import torch, numpy; assert torch.cuda.is_available()' \
       2>"$L/torch.err"; then
    result SKIP "benchmark vs PyTorch" "PyTorch with CUDA not importable: $(tail -1 "$L/torch.err")"
    return
  fi
  if ! timeout "$(limit 60)" python3 "$BUNDLE/gpu/torch_mlp_gpu.py" --rows "$rows" --seed 1 \
       --write-csv "$data" 2>>"$L/torch.err" || [ ! -s "$data" ]; then
    result FAIL "benchmark vs PyTorch" "cannot write the data ($data): $(tail -1 "$L/torch.err")"
    return
  fi
  local batch epochs precision tj wj sps_t sps_w run
  for run in "128 4 fp32" "4096 20 fp32" "4096 20 tf32"; do
    read -r batch epochs precision <<<"$run"
    need 40 "benchmark batch $batch $precision" || continue
    cat >"$S/bench-$batch-$precision.yaml" <<EOF
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
    tj=$(timeout "$(limit 90)" python3 "$BUNDLE/gpu/torch_mlp_gpu.py" --rows "$rows" --seed 1 \
           --batch "$batch" --epochs "$epochs" $([ "$precision" = tf32 ] && echo --tf32) \
           2>>"$L/torch.err")
    echo "torch: $tj"
    timeout "$(limit 90)" "$W" --spec="$S/bench-$batch-$precision.yaml" \
      >"$L/bench-$batch-$precision.jsonl" 2>"$L/bench-$batch-$precision.err"
    wj=$(python3 - "$L/bench-$batch-$precision.jsonl" "$rows" <<'EOF'
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
      result FAIL "benchmark batch $batch $precision" "traind: $(tail -1 "$L/bench-$batch-$precision.err"); torch: $(tail -1 "$L/torch.err")"
    fi
  done
}

# The example's CNN (conv 32, pool, conv 64, pool, dense 128, dropout, dense
# 10) on the GPU: trained on the bundle's 12,000 Fashion-MNIST images for 5
# epochs and scored on 2,000 t10k images, by traind-worker and by PyTorch on
# the same device when it is there (samples/s from each side's median epoch
# after the first).
fashion_mnist_step() {
  local L="$LOGS" S="$WORK/specs" W="$BUNDLE/bin/traind-worker" fm="$BUNDLE/data/fashion-mnist"
  step "Fashion-MNIST CNN on the GPU (12,000 training images, 5 epochs; traind vs PyTorch)"
  need 60 "fashion-mnist cnn" || return
  if [ ! -f "$fm/train-images-idx3-ubyte.gz" ]; then
    result SKIP "fashion-mnist cnn" "no Fashion-MNIST subset in the bundle (dataset-fashion-mnist was not installed where it was built)"
    return
  fi
  # The example's model, optimizer and loss, 5 epochs.
  sed -n '/^model:/,/^training:/p' "$BUNDLE/examples/fashion-mnist-cnn.yaml" >"$S/fm-model.yaml"
  cat >"$S/fashion-mnist-gpu.yaml" <<EOF
name: fashion-mnist-cnn-gpu
data:
  path: $fm/train-images-idx3-ubyte.gz
  labels_path: $fm/train-labels-idx1-ubyte.gz
  normalize: {mean: [0.2860], std: [0.3530]}
cross_validation:
  validation_path: $fm/t10k-images-idx3-ubyte.gz
  validation_labels_path: $fm/t10k-labels-idx1-ubyte.gz
seed: 7
$(sed -e 's|^training: .*|training: {epochs: 5, batch_size: 128}|' "$S/fm-model.yaml")
metrics: {val: [accuracy]}
resources: {device: gpu, count: 1}
EOF
  if ! timeout "$(limit 120)" "$W" --spec="$S/fashion-mnist-gpu.yaml" \
       >"$L/fashion-mnist-gpu.jsonl" 2>"$L/fashion-mnist-gpu.err"; then
    result FAIL "fashion-mnist cnn" "traind-worker: $(tail -2 "$L/fashion-mnist-gpu.err" | tr '\n' ' ')"
    return
  fi
  local summary n acc sps torch_line="" torch_sps=""
  summary=$(python3 - "$L/fashion-mnist-gpu.jsonl" <<'EOF'
import json, statistics, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"') and '"epoch"' in l]
secs = [e["seconds"] for e in epochs][1:] or [e["seconds"] for e in epochs]
print("%d %.4f %.0f" % (len(epochs), epochs[-1]["val"]["accuracy"], 12000 / statistics.median(secs)))
EOF
)
  read -r n acc sps <<<"$summary"
  if timeout "$(limit 60)" python3 -c 'import torch, numpy; assert torch.cuda.is_available()' \
       2>>"$L/torch.err"; then
    timeout "$(limit 120)" python3 "$BUNDLE/gpu/torch_cnn.py" --dir "$fm" --refit --epochs 5 \
      --device cuda >"$L/fashion-mnist-torch.jsonl" 2>>"$L/torch.err"
    torch_sps=$(python3 -c '
import json, statistics, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = [x["seconds"] for x in e][1:] or [x["seconds"] for x in e]
print("%.0f %.4f" % (12000 / statistics.median(s), e[-1]["val_accuracy"]))' \
      "$L/fashion-mnist-torch.jsonl" 2>/dev/null)
    [ -n "$torch_sps" ] && torch_line="; PyTorch ${torch_sps% *} samples/s, t10k accuracy ${torch_sps#* }"
  fi
  if [ "$n" = 5 ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.8 else 1)' "$acc"; then
    result PASS "fashion-mnist cnn" "traind ${sps} samples/s, accuracy on 2,000 t10k images ${acc}${torch_line}"
  else
    result FAIL "fashion-mnist cnn" "${n:-0} epochs, accuracy ${acc:-none} (want >= 0.8); logs/fashion-mnist-gpu.err"
  fi
}

case "$MODE" in
  build) build_half ;;
  device)
    device_half
    exit 0  # finish (the EXIT trap) prints the summary and sets the status
    ;;
  *) echo "usage: $0 build|device" >&2; exit 2 ;;
esac
