#!/usr/bin/env bash
# Every C++ and CUDA source under git is formatted by .clang-format (Google style,
# 100 columns). Prints the files that are not, and how to fix them.
#
#   tests/format_check.sh SOURCE_DIR
set -euo pipefail
src=$1
cd "$src"
if ! command -v clang-format >/dev/null; then
  echo "format_check: clang-format is not installed (./deploy/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh')
if [[ ${#files[@]} -eq 0 ]]; then
  echo "format_check: no sources found under $src (not a git checkout?)" >&2
  exit 1
fi
bad=()
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  if ! clang-format --dry-run --Werror --style=file "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'format_check: not formatted: %s\n' "${bad[@]}" >&2
  echo "format_check: run: clang-format -i --style=file ${bad[*]}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
