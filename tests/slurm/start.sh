#!/usr/bin/env bash
# Brings up a single-node Slurm for traind's tests: munged, slurmctld and
# slurmd on this machine, no systemd. One partition (debug), one node (this
# host) with all its CPUs, 90% of its memory and two fake GPUs (gres gpu:2,
# File= symlinks to /dev/null).
#
#   tests/slurm/start.sh     start (or find) Slurm; exit 0 once `srun` works
#   tests/slurm/stop.sh      stop what start.sh started (see there)
#
# tests/run.sh runs it before ctest: when it succeeds, run.sh exports
# TRAIND_REQUIRE_SLURM=1, so the Slurm tests fail rather than skip.
#
# Idempotent. A Slurm that already works (`sinfo -h` answers and
# `srun -n1 -t1 true` runs within 10 s) is used as it is: the script prints
# "slurm up (already running)" and leaves /etc/slurm alone. Otherwise it
# needs root: it installs the Debian packages when their commands are missing
# (apt-get), writes /etc/slurm/slurm.conf and gres.conf (global: one such
# Slurm per machine), and starts what is not running. It never starts a
# second slurmctld or slurmd beside one it did not start.
#
# State, logs, pid files and a jobs/ directory (mode 1777) live under
# $TRAIND_SLURM_DIR (default /tmp/traind-slurm).
#
# Marker: $TRAIND_SLURM_DIR/started exists after a run iff that run started a
# daemon (one name a line: munged, slurmctld, slurmd). The script removes it
# first, and writes it as soon as it starts a daemon, so it is there even when
# the script then fails: whoever finds it should run stop.sh when done.
# On failure the script prints the reason and the tails of the slurmctld and
# slurmd logs on stderr and exits non-zero.
set -euo pipefail

B=${TRAIND_SLURM_DIR:-/tmp/traind-slurm}
H=$(hostname -s 2>/dev/null || uname -n | cut -d. -f1)
CONF=/etc/slurm/slurm.conf
MARKER=$B/started

# conf_value KEY: KEY's value in the current slurm.conf, if any.
conf_value() { sed -n "s/^$1=//p" "$CONF" 2>/dev/null | tail -n1; }
# alive PIDFILE COMM: the pid file names a live process called COMM.
alive() { local p; p=$(cat "$1" 2>/dev/null) && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ]; }
# pids_named COMM: the live processes called COMM.
pids_named() {
  local f
  for f in /proc/[0-9]*/comm; do
    [ "$(cat "$f" 2>/dev/null)" = "$1" ] && { f=${f#/proc/}; echo "${f%/comm}"; }
  done
  return 0
}

fail() {
  echo "slurm: $*" >&2
  local name log
  for name in slurmctld slurmd; do
    if [ $name = slurmctld ]; then log=$(conf_value SlurmctldLogFile); else log=$(conf_value SlurmdLogFile); fi
    log=${log:-$B/log/$name.log}
    if [ -s "$log" ]; then
      echo "--- tail of $log" >&2
      tail -n 20 "$log" >&2
    fi
  done
  exit 1
}

# works: Slurm answers and runs a job within about 10 s.
works() {
  command -v sinfo >/dev/null && command -v srun >/dev/null &&
    timeout 5 sinfo -h >/dev/null 2>&1 &&
    timeout 10 srun -n1 -t1 true >/dev/null 2>&1
}

started() { mkdir -p "$B"; echo "$1" >>"$MARKER"; }

rm -f "$MARKER"

if works; then
  echo "slurm up (already running)"
  exit 0
fi

# A slurmctld or slurmd that this script did not start (another pid file,
# another setup) may be running but not answering: never start a second one.
for d in slurmctld slurmd; do
  ours=$(cat "$B/run/$d.pid" 2>/dev/null || true)
  for p in $(pids_named $d); do
    [ "$p" = "$ours" ] && continue
    pf=$(conf_value "${d^}PidFile")
    fail "a $d (pid $p) not started from $B is running, but Slurm does not answer" \
         "(sinfo/srun); not starting a second one. Stop it by its pid file" \
         "(${pf:-unknown}), or fix it."
  done
done

[ "$(id -u)" -eq 0 ] || fail "needs root to install and start Slurm (writes /etc/slurm, starts munged, slurmctld, slurmd)"

mkdir -p "$B"/{state,spool,log,run,dev,jobs} /etc/slurm
chmod 1777 "$B/jobs"

if ! { command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null; then
  command -v apt-get >/dev/null || fail "Slurm is not installed and apt-get is not available"
  echo "slurm: installing slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq -o DPkg::Lock::Timeout=300 &&
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends \
      slurmctld slurmd slurm-client munge; } >"$B/log/apt.log" 2>&1 || {
    tail -n 20 "$B/log/apt.log" >&2
    fail "apt-get could not install slurmctld slurmd slurm-client munge (log: $B/log/apt.log)"
  }
fi

ln -sfn /dev/null "$B/dev/gpu0"; ln -sfn /dev/null "$B/dev/gpu1"   # fake GPUs: char-device symlinks
CPUS=$(nproc); MEM=$(( $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) * 9 / 10 ))
cat > "$CONF" <<EOF
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$B/state
SlurmdSpoolDir=$B/spool
SlurmctldPidFile=$B/run/slurmctld.pid
SlurmdPidFile=$B/run/slurmd.pid
SlurmctldLogFile=$B/log/slurmctld.log
SlurmdLogFile=$B/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$B/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
MinJobAge=300
KillWait=5
GresTypes=gpu
NodeName=$H NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
printf 'AutoDetect=off\nNodeName=%s Name=gpu File=%s/dev/gpu[0-1]\n' "$H" "$B" > /etc/slurm/gres.conf

if ! alive /run/munge/munged.pid munged; then
  if [ -n "$(pids_named munged)" ]; then
    fail "a munged is running without /run/munge/munged.pid; not starting a second one"
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey -c -f -k /etc/munge/munge.key || fail "could not create /etc/munge/munge.key"
    chown munge:munge /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --force || fail "munged did not start (see /var/log/munge/munged.log)"
  started munged
fi
ok=
for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1; done
[ -n "$ok" ] || fail "munge does not answer (munge -n | unmunge fails)"
# stop.sh stops munged only when this script started it: its pid, kept here.
if grep -qx munged "$MARKER" 2>/dev/null; then
  cp /run/munge/munged.pid "$B/run/munged.ours" || fail "munged wrote no /run/munge/munged.pid"
fi

if ! alive "$B/run/slurmctld.pid" slurmctld; then
  started slurmctld
  slurmctld -c || fail "slurmctld did not start"      # -c: cold start, forget old jobs
fi
if ! alive "$B/run/slurmd.pid" slurmd; then
  started slurmd
  slurmd || fail "slurmd did not start"
fi

S=
deadline=$((SECONDS + 60))
while [ $SECONDS -lt $deadline ]; do
  S=$(timeout 5 sinfo -h -n "$H" -o %T 2>/dev/null || true)
  case "$S" in
    idle|mixed|allocated)
      if timeout 10 srun -n1 -t1 true; then
        if [ -f "$MARKER" ]; then
          echo "slurm up: $H $S (started: $(paste -sd' ' "$MARKER"))"
        else
          echo "slurm up: $H $S"
        fi
        exit 0
      fi;;
    down*|drain*) scontrol update nodename="$H" state=resume || true;;
  esac
  sleep 0.5
done
fail "Slurm did not come up within 60 s (node $H state: ${S:-none}); logs under $B/log"
