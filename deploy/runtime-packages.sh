#!/usr/bin/env bash
# The Debian packages a running traind needs, derived from the binaries: the
# owner (dpkg -S) of every shared library that traind, traind-worker and
# trainctl link directly (their NEEDED entries, resolved as ldd resolves them).
#
#   deploy/runtime-packages.sh BIN_DIR            print them, one per line
#   deploy/runtime-packages.sh --check BIN_DIR    compare with install-deps.sh
#
# --check fails, naming each difference, when a linked library's package is
# missing from deploy/install-deps.sh's runtime list, when the list names a
# package no binary links (other than those it declares loaded at run time),
# or when apt knows no package of a listed name (installed, or a candidate in
# this machine's apt sources). Run on the machine that built the binaries.
set -euo pipefail
check=0
if [[ ${1:-} == --check ]]; then check=1; shift; fi
[[ $# -eq 1 ]] || { echo "usage: $0 [--check] BIN_DIR" >&2; exit 2; }
bin_dir=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

libs=$(mktemp)
trap 'rm -f "$libs"' EXIT
for b in traind traind-worker trainctl; do
  exe=$bin_dir/$b
  [[ -x $exe ]] || { echo "runtime-packages: $exe: no such executable" >&2; exit 1; }
  needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  # Where the loader finds each one (ldd's "name => path").
  while read -r name _ path _; do
    grep -qxF "$name" <<<"$needed" || continue
    if [[ $path == "not" || -z $path ]]; then
      echo "runtime-packages: $b links $name, which this machine does not have" >&2
      exit 1
    fi
    echo "$b $name $path $(readlink -f "$path")" >>"$libs"
  done < <(ldd "$exe" | awk '{print $1, $2, $3, $4}')
done
# dpkg knows a file by the path its package installed (usrmerge: /lib or
# /usr/lib), so ask for the path, its /usr-less twin and the resolved file,
# all in one call (dpkg -S is slow to start).
declare -A owner_of
while IFS= read -r line; do
  owner_of[${line#*: }]=${line%%:*}
done < <(awk '{print $3; print $4; sub("^/usr", "", $3); print $3; sub("^/usr", "", $4); print $4}' "$libs" |
  sort -u | xargs dpkg -S 2>/dev/null || true)
derived_list=()
while read -r b name path real; do
  owner=""
  for candidate in "$path" "${path#/usr}" "$real" "${real#/usr}"; do
    owner=${owner_of[$candidate]:-}
    [[ -n $owner ]] && break
  done
  if [[ -z $owner ]]; then
    echo "runtime-packages: $b links $path ($name), which no Debian package owns" >&2
    exit 1
  fi
  derived_list+=("$owner")
done <"$libs"
mapfile -t derived < <(printf '%s\n' "${derived_list[@]}" | sort -u)

if [[ $check == 0 ]]; then
  printf '%s\n' "${derived[@]}"
  exit 0
fi

mapfile -t listed < <("$here/install-deps.sh" --list-runtime-linked | sort -u)
mapfile -t all_listed < <("$here/install-deps.sh" --list-runtime | sort -u)
problems=0
for p in $(comm -23 <(printf '%s\n' "${derived[@]}") <(printf '%s\n' "${listed[@]}")); do
  echo "runtime-packages: the binaries link a library of $p, which deploy/install-deps.sh's" \
    "runtime list (runtime_linked_pkgs) does not name" >&2
  problems=1
done
for p in $(comm -13 <(printf '%s\n' "${derived[@]}") <(printf '%s\n' "${listed[@]}")); do
  echo "runtime-packages: deploy/install-deps.sh's runtime_linked_pkgs names $p, but no" \
    "binary links a library of it (renamed? or move it to runtime_loaded_pkgs)" >&2
  problems=1
done
# One apt-cache call: "NAME:" then "  Candidate: VERSION" per package it knows.
declare -A candidate_of
while read -r name version; do
  candidate_of[$name]=$version
done < <(apt-cache policy "${all_listed[@]}" 2>/dev/null |
  awk '/^[^ ].*:$/ {name = substr($0, 1, length($0) - 1)} /^ *Candidate:/ {print name, $2}')
for p in "${all_listed[@]}"; do
  candidate=${candidate_of[$p]:-}
  if [[ -z $candidate || $candidate == "(none)" ]]; then
    echo "runtime-packages: deploy/install-deps.sh's runtime list names $p, which apt does" \
      "not know on this machine" >&2
    problems=1
  fi
done
if [[ $problems == 0 ]]; then
  echo "runtime-packages: the ${#all_listed[@]} runtime packages match what the binaries link"
fi
exit "$problems"
