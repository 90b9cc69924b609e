#!/usr/bin/env bash
# Checks deploy/systemd/traind.service with `systemd-analyze verify`.
#   systemd_verify.sh UNIT BIN_DIR
# The unit's ExecStart points at /usr/local/bin; verify checks that the
# binary exists, so a copy with ExecStart pointing at BIN_DIR is verified.
# Installs Debian's systemd package if systemd-analyze is missing.
set -euo pipefail
unit=$1
bin_dir=$2

if ! command -v systemd-analyze >/dev/null; then
  sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq -o DPkg::Lock::Timeout=600
  "${sudo[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends systemd
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/local/bin/traind|$bin_dir/traind|" "$unit" > "$tmp/traind.service"
grep -q "^ExecStart=$bin_dir/traind " "$tmp/traind.service"

# The unit must keep these (STYLE.md, deploy section).
for line in 'Type=notify' 'KillMode=mixed' 'StateDirectory=traind' 'RuntimeDirectory=traind' \
            'NoNewPrivileges=yes' 'ProtectSystem=strict' 'WatchdogSec=' 'User=traind'; do
  grep -q "^$line" "$unit" || { echo "missing: $line" >&2; exit 1; }
done
for line in 'PrivateDevices=yes' 'MemoryDenyWriteExecute=yes'; do
  if grep -q "^$line" "$unit"; then echo "must not set: $line" >&2; exit 1; fi
done
# TimeoutStopSec above the default stop_grace (10 s) plus the API drain (3 s).
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$unit")
[[ -n "$stop" && "$stop" -gt 13 ]] || { echo "TimeoutStopSec must exceed 13s" >&2; exit 1; }

# verify prints problems to stderr but may exit 0: fail on any output
# (the missing user 'traind' on a build machine is not reported by verify).
out=$(systemd-analyze verify "$tmp/traind.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [[ -n "$out" ]]; then
  echo "$out" >&2
  exit 1
fi
echo "systemd-analyze verify: OK"
