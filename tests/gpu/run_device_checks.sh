#!/usr/bin/env bash
# Issue 5's device checks, in two halves (see tests/gpu/README.md):
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

build_half() {
  set -e
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIND_WITH_CUDA=ON \
    -DTRAIND_BUILD_TESTS=ON >/dev/null
  cmake --build "$BUILD" --target traind_cuda_tests traind-worker traind trainctl
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  for b in traind_cuda_tests traind-worker traind trainctl; do
    cp "$BUILD/bin/$b" "$BUNDLE/bin/"
    strip --strip-debug "$BUNDLE/bin/$b" || true
  done
  # Non-system shared libraries the binaries need (transitively, via ldd).
  for b in "$BUNDLE"/bin/*; do
    ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
  done | sort -u | while read -r name path; do
    if [[ "$name" =~ $SYSTEM_LIB_RE ]]; then continue; fi
    cp -L "$path" "$BUNDLE/lib/$name"
    strip --strip-unneeded "$BUNDLE/lib/$name" 2>/dev/null || true
  done
  cp -r "$ROOT/examples" "$BUNDLE/examples"
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

find_cuda_libs() {
  # Directories that hold libcublas.so.13 / libcublasLt.so.13 / libnccl.so.2.
  local dirs=() d lib
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    d=$( (ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
            2>/dev/null; python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
            2>/dev/null | sed 's|$|/nvidia|') | while read -r base; do
          f=$(find "$base" -maxdepth 3 -name "$lib" 2>/dev/null | head -1)
          if [ -n "$f" ]; then dirname "$f"; break; fi
        done)
    if [ -z "$d" ]; then echo "missing:$lib"; else dirs+=("$d"); fi
  done
  printf '%s\n' "${dirs[@]}" | sort -u | paste -sd: -
}

device_half() {
  if [ ! -d "$BUNDLE/bin" ] && [ -f "$BUILD/bundle.tar.xz" ]; then
    tar -C "$BUILD" -xJf "$BUILD/bundle.tar.xz"
  fi
  [ -d "$BUNDLE/bin" ] || { echo "no bundle at $BUNDLE: run '$0 build' first" >&2; exit 2; }
  local OUTDIR="${OUT:-$BUILD/device-out}"
  mkdir -p "$OUTDIR"
  step "device"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
  local cudalibs
  cudalibs=$(find_cuda_libs)
  if [[ "$cudalibs" == *missing:* ]]; then
    echo "CUDA 13 libraries not found on this machine: $cudalibs"
    result FAIL libraries "cuBLAS 13 / NCCL 2 not found (see find_cuda_libs)"
    return
  fi
  export LD_LIBRARY_PATH="$BUNDLE/lib:$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if ldd "$BUNDLE/bin/traind_cuda_tests" | grep -q 'not found'; then
    ldd "$BUNDLE/bin/traind_cuda_tests" | grep 'not found'
    result FAIL libraries "unresolved shared libraries"
    return
  fi

  step "ops: CUDA vs CPU on fresh random inputs, NCCL communicator (traind_cuda_tests)"
  if timeout 240 "$BUNDLE/bin/traind_cuda_tests" --gtest_brief=1 \
       --gtest_output="xml:$OUTDIR/traind_cuda_tests.xml" 2>&1 | tee "$OUTDIR/cuda_tests.log" | tail -60; then
    if grep -q 'SKIPPED' "$OUTDIR/cuda_tests.log" && \
       grep -q 'no CUDA device' "$OUTDIR/cuda_tests.log"; then
      result FAIL ops "tests skipped: the GPU was not found"
    else
      result PASS ops "$(grep -E '^\[  PASSED  \]' "$OUTDIR/cuda_tests.log" | head -1)"
    fi
  else
    result FAIL ops "see $OUTDIR/cuda_tests.log"
  fi

  # The remaining checks need the engine to train on the CUDA backend
  # (traind-worker --capabilities prints "cuda"). Until then they report SKIP.
  local caps
  caps=$("$BUNDLE/bin/traind-worker" --capabilities 2>/dev/null || true)
  echo "traind-worker --capabilities: $caps"
  if ! grep -qx cuda <<<"$caps"; then
    local why="traind-worker does not train on CUDA yet (--capabilities: ${caps//$'\n'/ })"
    result SKIP "gradient checks on the GPU" "$why"
    result SKIP "iris + digits CV through traind on the GPU" "$why"
    result SKIP "50 folds, GPU memory back at baseline" "$why"
    result SKIP "benchmark vs PyTorch (784-512-256-10, batch 128 / 4096)" "$why"
    result SKIP "per-fold start + context + teardown" "$why"
    return
  fi

  step "iris + digits CV through the worker on the GPU"
  local spec
  for name in iris-cv digits-multiclass; do
    spec="$OUTDIR/$name-gpu.yaml"
    sed -e 's|resources: {device: cpu}|resources: {device: gpu, count: 1}|' \
        -e "s|path: examples/|path: $BUNDLE/examples/|" "$BUNDLE/examples/$name.yaml" >"$spec"
    if timeout 120 "$BUNDLE/bin/traind-worker" --spec="$spec" >"$OUTDIR/$name.jsonl" 2>"$OUTDIR/$name.err"; then
      result PASS "$name on the GPU" "$(grep -c fold_result "$OUTDIR/$name.jsonl") folds"
    else
      result FAIL "$name on the GPU" "$(tail -1 "$OUTDIR/$name.err")"
    fi
  done

  step "50 folds in a row, GPU memory after each"
  local base used i
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  echo "idle baseline: ${base} MiB"
  local leaks=0
  for i in $(seq 1 50); do
    timeout 30 "$BUNDLE/bin/traind-worker" --spec="$OUTDIR/iris-cv-gpu.yaml" --fold=$((i % 5)) \
      >/dev/null 2>>"$OUTDIR/folds.err" || { leaks=$((leaks + 1000)); }
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    echo "fold $i: ${used} MiB"
    [ "$used" -gt "$((base + 2))" ] && leaks=$((leaks + 1))
  done
  if [ "$leaks" = 0 ]; then result PASS "50 folds" "memory back at ${base} MiB after each"
  else result FAIL "50 folds" "memory above baseline or a fold failed ($leaks)"; fi

  step "per-fold start + context + teardown"
  local t0 t1
  t0=$(date +%s.%N)
  for i in 1 2 3 4 5; do
    timeout 30 "$BUNDLE/bin/traind-worker" --spec="$OUTDIR/iris-cv-gpu.yaml" --fold=0 >/dev/null 2>&1
  done
  t1=$(date +%s.%N)
  result PASS "fold start+teardown" "$(echo "($t1 - $t0) / 5" | bc -l | cut -c1-6) s per fold (iris, 60 epochs)"
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
