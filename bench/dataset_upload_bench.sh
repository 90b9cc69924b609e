#!/usr/bin/env bash
# Dataset upload over loopback TCP with TLS and a token, against the raw TLS
# transfer of the same bytes on the same machine (the peer: openssl s_server
# and s_client, the ceiling any TLS upload has here).
#
#   bench/dataset_upload_bench.sh [BIN_DIR] [--mb N] [--keep]
#
# Makes an N MB CSV (default 1024: numeric and categorical columns), starts
# traind with TLS and a token, and measures:
#   - `trainctl datasets upload` of the file: wall time and MB/s (hashing on
#     the client, sending, writing, fsync, hash check and the profile on the
#     server: the whole call as a user waits for it);
#   - traind's resident memory above idle during it (VmRSS sampled every
#     20 ms, and VmHWM at the end);
#   - the second upload of the same file: its time, and that traind reports
#     it already had the bytes (nothing sent);
#   - the peer: the same bytes through openssl s_client -> s_server on
#     loopback with the same certificate, discarded on arrival.
# Prints one line per measure and the ratio upload / raw TLS. Targets
# (docs/benchmarks.md): >= 200 MB/s, <= 64 MB above idle, nothing re-sent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin_dir=${1:-$here/../build/bin}
[[ $# -gt 0 ]] && shift
mb=1024
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --mb) mb=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bin_dir=$(cd "$bin_dir" && pwd)
for tool in openssl python3; do
  command -v $tool >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done

tmp=$(mktemp -d)
traind_pid=
server_pid=
cleanup() {
  for pid in $traind_pid $server_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  [[ $keep -eq 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores," \
     "flags: $(grep -o -m1 -w 'avx512f\|avx2\|sha_ni' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# The data: a 1 MiB block of rows repeated (the profile sees every row).
python3 - "$tmp/block.csv" <<'EOF'
import random, sys
random.seed(7)
rows = []
size = 0
while size < (1 << 20):
    r = f"{random.random():.6f},{random.gauss(0, 3):.5f},{random.randint(0, 10**6)},c{random.randint(0, 40)},{random.choice('abc')}\n"
    rows.append(r)
    size += len(r)
open(sys.argv[1], "w").write("".join(rows))
EOF
{
  echo "x1,x2,n,cat,label"
  for _ in $(seq "$mb"); do cat "$tmp/block.csv"; done
} > "$tmp/data.csv"
bytes=$(stat -c %s "$tmp/data.csv")
echo "file: $((bytes / 1000000)) MB ($bytes bytes)"

# A self-signed certificate for 127.0.0.1, a token.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
cat > "$tmp/tokens.yaml" <<EOF
tokens:
  - {name: bench, role: submitter, sha256: $(printf %s "$token" | sha256sum | cut -d' ' -f1)}
EOF
chmod 0600 "$tmp/tokens.yaml" "$tmp/key.pem"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$tmp/state"
"$bin_dir/traind" --state-dir "$tmp/state" --listen "unix:$tmp/state/traind.sock" \
  --listen "127.0.0.1:$port" --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" \
  --tokens-file "$tmp/tokens.yaml" --http-listen off --cpu-slots 1 2> "$tmp/traind.log" &
traind_pid=$!
trainctl=("$bin_dir/trainctl" --address "127.0.0.1:$port" --tls-ca "$tmp/cert.pem" --token "$token"
          --timeout 600)
for _ in $(seq 200); do
  "$bin_dir/trainctl" --address "unix:$tmp/state/traind.sock" health >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 0.5
idle=$(awk '/^VmRSS/ {print $2}' "/proc/$traind_pid/status")

# The upload, with traind's RSS sampled meanwhile (one python process that
# sleeps between reads: the sampler must not take the CPU it measures).
python3 - "$traind_pid" "$tmp/done" "$tmp/peak" <<'EOF' &
import os, sys, time
pid, done, out = sys.argv[1], sys.argv[2], sys.argv[3]
peak = 0
while not os.path.exists(done):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    peak = max(peak, int(line.split()[1]))
    except OSError:
        break
    time.sleep(0.02)
open(out, "w").write(str(peak))
EOF
sampler=$!
cpu() { awk '{print $14 + $15}' "/proc/$traind_pid/stat"; }
cpu_before=$(cpu)
start=$(date +%s.%N)
TIMEFORMAT='%U %S'
{ time "${trainctl[@]}" datasets upload "$tmp/data.csv" --name bench > "$tmp/upload.out" 2>&1; } \
  2> "$tmp/client_cpu" || { cat "$tmp/upload.out" "$tmp/traind.log" >&2; exit 1; }
end=$(date +%s.%N)
cpu_after=$(cpu)
traind_cpu=$(python3 -c "print(($cpu_after - $cpu_before) / $(getconf CLK_TCK))")
client_cpu=$(awk '{print $1 + $2}' "$tmp/client_cpu")
touch "$tmp/done"
wait "$sampler" || true
peak=$(cat "$tmp/peak")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$traind_pid/status")
upload_s=$(python3 -c "print($end - $start)")
upload_mbs=$(python3 -c "print($bytes / 1e6 / ($end - $start))")

start=$(date +%s.%N)
"${trainctl[@]}" datasets upload "$tmp/data.csv" --name bench > "$tmp/again.out" 2>&1
end=$(date +%s.%N)
again_s=$(python3 -c "print($end - $start)")
already=$(grep -c "already" "$tmp/again.out" || true)

# The peer: raw TLS on loopback, same certificate, bytes discarded.
peer_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
openssl s_server -quiet -accept "127.0.0.1:$peer_port" -cert "$tmp/cert.pem" -key "$tmp/key.pem" \
  > /dev/null 2>&1 &
server_pid=$!
sleep 0.5
start=$(date +%s.%N)
openssl s_client -quiet -connect "127.0.0.1:$peer_port" < "$tmp/data.csv" > /dev/null 2>&1 || true
end=$(date +%s.%N)
peer_mbs=$(python3 -c "print($bytes / 1e6 / ($end - $start))")
start=$(date +%s.%N)
sha256sum "$tmp/data.csv" > /dev/null
end=$(date +%s.%N)
sha_mbs=$(python3 -c "print($bytes / 1e6 / ($end - $start))")

printf 'upload:          %.2f s, %.0f MB/s (target >= 200)\n' "$upload_s" "$upload_mbs"
printf 'cpu during it:   traind %.2f s, trainctl %.2f s (of %.2f s wall on %d cores)\n' \
  "$traind_cpu" "$client_cpu" "$upload_s" "$(nproc)"
grep -o 'verify_ms=[0-9]* profile_wait_ms=[0-9]*' "$tmp/traind.log" | head -1 | sed 's/^/traind after the last byte: /'
printf 'traind RSS:      idle %d MiB, peak %d MiB sampled, +%d MiB (target <= 64); VmHWM %d MiB\n' \
  $((idle / 1024)) $((peak / 1024)) $(((peak - idle) / 1024)) $((hwm / 1024))
printf 'second upload:   %.2f s, traind had the bytes: %s\n' "$again_s" \
  "$([[ $already -gt 0 ]] && echo yes || echo NO)"
printf 'peer raw TLS:    %.0f MB/s (openssl s_client -> s_server, loopback)\n' "$peer_mbs"
printf 'sha256sum:       %.0f MB/s\n' "$sha_mbs"
printf 'ratio upload / raw TLS: %.2f\n' "$(python3 -c "print($upload_mbs / $peer_mbs)")"
