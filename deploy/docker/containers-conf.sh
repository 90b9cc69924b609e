#!/usr/bin/env bash
# Prints a containers.conf for Debian 12's podman (4.3) on hosts with cgroups
# in hybrid mode or where root lacks CAP_SYS_RESOURCE (VMs, sandboxes):
#
#   deploy/docker/containers-conf.sh > traind-containers.conf
#   export CONTAINERS_CONF=$PWD/traind-containers.conf
#
#  - runtime runc: crun 1.8 refuses cgroups in hybrid mode;
#  - the containers' nofile and nproc ulimits within this shell's hard limits:
#    podman's defaults (1048576) are above them, and setting a limit above the
#    hard one needs CAP_SYS_RESOURCE, which root may lack (in a container or a
#    sandbox: "setrlimit RLIMIT_NOFILE: Operation not permitted"). nproc is
#    kept at 32768 at most: higher values were refused by runc on such
#    machines even below the shell's hard limit.
set -euo pipefail
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[[ $nofile == unlimited ]] && nofile=1048576
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
cat <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
CONF
