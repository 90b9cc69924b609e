#!/usr/bin/env bash
# docs/operations.md's configuration key reference is the table
# `traind --settings-markdown` prints (server/settings.cc), between the
# <!-- settings:begin --> and <!-- settings:end --> markers. Fails, naming
# the command that regenerates it, when the two differ; --update rewrites it.
#
#   tests/settings_doc_check.sh TRAIND SOURCE_DIR [--update]
set -euo pipefail
traind=$1
src=$2
doc="$src/docs/operations.md"
begin='<!-- settings:begin -->'
end='<!-- settings:end -->'
regen="tests/settings_doc_check.sh $traind $src --update"

table=$(mktemp)
trap 'rm -f "$table" "$table.doc"' EXIT
"$traind" --settings-markdown >"$table"
if ! grep -qxF "$begin" "$doc" || ! grep -qxF "$end" "$doc"; then
  echo "settings_doc_check: $doc lacks the $begin / $end markers" >&2
  exit 1
fi

if [[ "${3:-}" == "--update" ]]; then
  awk -v begin="$begin" -v end="$end" -v table="$table" '
    $0 == begin { print; while ((getline line < table) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }' "$doc" >"$table.doc"
  cat "$table.doc" >"$doc"
  echo "settings_doc_check: rewrote the settings table of $doc"
  exit 0
fi

awk -v begin="$begin" -v end="$end" '
  $0 == end { inside = 0 }
  inside { print }
  $0 == begin { inside = 1 }' "$doc" >"$table.doc"
if ! diff -u "$table.doc" "$table"; then
  echo "settings_doc_check: the settings table of docs/operations.md differs from" \
       "\`traind --settings-markdown\` (above: - the doc, + the binary). Regenerate it with:" >&2
  echo "  $regen" >&2
  exit 1
fi
echo "settings_doc_check: docs/operations.md's settings table matches traind --settings-markdown"
