#!/usr/bin/env bash
# Stops the single-node Slurm that tests/slurm/start.sh started, by the pid
# files under $TRAIND_SLURM_DIR (default /tmp/traind-slurm); never by name.
#
#   tests/slurm/stop.sh           cancel the jobs, stop slurmd, slurmctld (and
#                                 munged, if start.sh started it)
#   tests/slurm/stop.sh --purge   the same, then wipe state, spool, logs, jobs
#
# tests/run.sh runs it on exit when start.sh left its marker
# ($TRAIND_SLURM_DIR/started: that run of start.sh started a daemon). A Slurm
# that start.sh did not start (another pid file) is left alone. Every job on
# this Slurm is one of traind's (its tests'): they are cancelled first, so
# their steps end before slurmd does. Idempotent; needs root.
set -uo pipefail

B=${TRAIND_SLURM_DIR:-/tmp/traind-slurm}
CONF=/etc/slurm/slurm.conf

# pid_of PIDFILE COMM: the pid in PIDFILE, if it is a live process called COMM.
pid_of() { local p; p=$(cat "$1" 2>/dev/null) && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && echo "$p"; }

ctld=$(pid_of "$B/run/slurmctld.pid" slurmctld)
# Cancel the jobs only when slurm.conf still points at this slurmctld, so that
# squeue and scancel cannot reach another controller.
if [ -n "$ctld" ] && grep -qxF "SlurmctldPidFile=$B/run/slurmctld.pid" "$CONF" 2>/dev/null; then
  timeout 10 squeue -h -o %i 2>/dev/null | xargs -r timeout 10 scancel
  for _ in $(seq 50); do
    [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
    sleep 0.2
  done
fi

# stop PID...: SIGTERM, then SIGKILL whatever still runs 10 s later.
stop() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  for p in "$@"; do
    for _ in $(seq 100); do [ -d "/proc/$p" ] || break; sleep 0.1; done
    if [ -d "/proc/$p" ]; then
      echo "slurm: pid $p did not stop on SIGTERM in 10 s; SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null
    fi
  done
}

# Slurm's daemons first, then munged (only the one start.sh started).
slurmd=$(pid_of "$B/run/slurmd.pid" slurmd)
# shellcheck disable=SC2086  # each is one pid or empty
stop $slurmd $ctld
munged=$(pid_of /run/munge/munged.pid munged)
if [ -n "$munged" ] && [ "$munged" = "$(cat "$B/run/munged.ours" 2>/dev/null)" ]; then
  stop "$munged"
  rm -f /run/munge/munged.pid
fi
rm -f "$B/run/slurmd.pid" "$B/run/slurmctld.pid" "$B/run/munged.ours" "$B/started"

if [ "${1:-}" = --purge ]; then
  rm -rf "${B:?}"/{state,spool,log,run,dev,jobs}
  rmdir "$B" 2>/dev/null
fi
echo "slurm stopped"
