#!/usr/bin/env bash
# The layering of DESIGN.md, checked on the sources and the binaries:
#   - server/ includes nothing under worker/ (the spec language is spec/, the
#     zygote protocol proto/traind/);
#   - the engine (worker/engine/) and spec/ include no gRPC and no SQLite;
#   - traind and trainctl link no CUDA, cuBLAS or NCCL library, and no
#     libonnx (models are read and written by traind-worker only).
#
#   tests/layering_check.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1
bin=$2
failed=0
fail() {
  echo "layering: $*" >&2
  failed=1
}

while IFS= read -r hit; do fail "server includes the worker: $hit"; done < <(
  grep -rn --include='*.cc' --include='*.h' '#include "worker/' "$src/server" || true)
while IFS= read -r hit; do fail "the engine or spec/ includes gRPC or SQLite: $hit"; done < <(
  grep -rnE --include='*.cc' --include='*.h' --include='*.cu' \
    '#include [<"](grpcpp?/|sqlite3\.h|traind/v1/[a-z_]+\.grpc\.pb\.h)' \
    "$src/worker/engine" "$src/spec" || true)
for exe in traind trainctl; do
  if ! libs=$(ldd "$bin/$exe"); then
    fail "cannot list the libraries of $bin/$exe"
    continue
  fi
  if grep -Ei 'libcuda|libcublas|libnccl|libcudart' <<<"$libs"; then fail "$exe links CUDA"; fi
  if grep -Ei 'libonnx' <<<"$libs"; then fail "$exe links libonnx"; fi
done

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "layering: server/ includes nothing under worker/; the engine and spec/ no gRPC or SQLite; traind and trainctl link no CUDA and no libonnx"
