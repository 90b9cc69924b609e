#!/usr/bin/env bash
# `pip install ./client/python` as the docs say, offline: a virtual
# environment with Debian's site packages, pip without build isolation and
# without an index. The source is copied first, so that pip's build leaves
# nothing in the source tree. Then the installed package is imported from
# elsewhere, stubs included.
#
#   pip_install_check.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
python=$1 source_dir=$2 work=$3
rm -rf "$work"
mkdir -p "$work/src/client"
cp -r "$source_dir/client/python" "$work/src/client/python"
cp -r "$source_dir/proto" "$work/src/proto"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --quiet --no-index --no-build-isolation "$work/src/client/python"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, traind
from traind.v1 import job_pb2, training_service_pb2_grpc
assert traind.__file__.startswith(os.path.join(os.getcwd(), "venv")), traind.__file__
assert hasattr(training_service_pb2_grpc, "TrainingServiceStub")
assert job_pb2.Job.State.Name(job_pb2.Job.SUCCEEDED) == "SUCCEEDED"
print("installed", traind.__version__, "at", os.path.dirname(traind.__file__))
PY
"$work/venv/bin/pip" show --quiet traind >/dev/null
rm -rf "$work"
