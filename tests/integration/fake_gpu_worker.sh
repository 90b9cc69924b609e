#!/bin/sh
# A stand-in for traind-worker in GPU scheduling tests: it claims a GPU
# backend, and as a task it exits after a moment without training (the task
# fails as WORKER_CRASHED). What those tests watch is the GPU it leaves behind.
if [ "$1" = "--capabilities" ]; then
  echo "cpu cuda"
  exit 0
fi
sleep "${FAKE_WORKER_SECONDS:-0.5}"
exit 3
