#!/usr/bin/env python3
"""The layering check fails on a planted back-edge (tests/layering_check.py).

Copies the build's codemodel reply and plants, one at a time:
  - a dependency of the spec library on the engine (the target graph);
  - the engine's archive and oneDNN on the daemon's link line (link lines);
and expects the check to fail naming each; the unchanged copy must pass.

  tests/layering_check_test.py SOURCE_DIR BUILD_DIR
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
source, build = sys.argv[1], sys.argv[2]
reply = os.path.join(build, ".cmake", "api", "v1", "reply")
if not glob.glob(os.path.join(reply, "index-*.json")):
    print(f"no codemodel reply in {reply}: configure the build with tests/run.sh", file=sys.stderr)
    sys.exit(1)


def target_file(directory, name):
    for path in glob.glob(os.path.join(directory, f"target-{name}-*.json")):
        with open(path) as f:
            if json.load(f)["name"] == name:
                return path
    raise SystemExit(f"no target {name} in {directory}")


def run_check(directory):
    return subprocess.run([sys.executable, os.path.join(here, "layering_check.py"), "--source",
                           source, "--build", build, "--reply", directory, "--skip-includes"],
                          capture_output=True, text=True)


def planted(edit):
    work = tempfile.mkdtemp(prefix="traind-layering-test-")
    try:
        copy = os.path.join(work, "reply")
        shutil.copytree(reply, copy)
        edit(copy)
        return run_check(copy)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spec_on_engine(directory):
    path = target_file(directory, "traind_spec")
    with open(target_file(directory, "traind_engine")) as f:
        engine_id = json.load(f)["id"]
    with open(path) as f:
        target = json.load(f)
    target.setdefault("dependencies", []).append({"id": engine_id})
    with open(path, "w") as f:
        json.dump(target, f)


def daemon_links_engine(directory):
    path = target_file(directory, "traind")
    with open(path) as f:
        target = json.load(f)
    target["link"]["commandFragments"].append(
        {"fragment": "worker/engine/libtraind_engine.a", "role": "libraries"})
    target["link"]["commandFragments"].append({"fragment": "/usr/lib/libdnnl.so.2.6", "role": "libraries"})
    with open(path, "w") as f:
        json.dump(target, f)


failures = []
clean = planted(lambda d: None)
if clean.returncode != 0:
    failures.append(f"the unchanged reply fails: {clean.stderr}")

result = planted(spec_on_engine)
expected = "target traind_spec (spec/) depends on traind_engine (worker/engine/)"
if result.returncode == 0 or expected not in result.stderr:
    failures.append(f"a planted spec -> engine edge was not caught: rc {result.returncode}, "
                    f"stderr {result.stderr!r}")

result = planted(daemon_links_engine)
for expected in ("traind (server/) links traind_engine (worker/engine/) on its link line",
                 "traind (server/) links oneDNN"):
    if result.returncode == 0 or expected not in result.stderr:
        failures.append(f"not caught: {expected!r}: rc {result.returncode}, "
                        f"stderr {result.stderr!r}")

for f in failures:
    print(f"FAILED: {f}", file=sys.stderr)
if failures:
    sys.exit(1)
print("layering check: catches a planted spec -> engine edge and the engine on traind's link line")
