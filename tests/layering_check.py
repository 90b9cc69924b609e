#!/usr/bin/env python3
"""traind's layering (docs/architecture.md, "What may depend on what"), checked
on the build itself rather than on its letter:

  1. the target graph: every CMake target belongs to the layer of the folder
     that defines it, and each of its dependencies (CMake's file API,
     codemodel-v2) lies in its own layer or one the table allows;
  2. the link lines: every traind archive on an executable's or module's
     link line belongs to an allowed layer, and no layer links an outside
     library it must not (the daemon and trainctl: no oneDNN, CUDA, cuBLAS,
     NCCL or libonnx; the engine, spec/, data/ and base/: no gRPC, no SQLite);
  3. the includes: a source file includes headers of its own layer, of an
     allowed one, the generated protos and third-party headers only (tests
     may add the shared test kit, tests/testing/);
  4. the binaries: traind and trainctl load no CUDA library and no libonnx
     (ldd), whatever the build files say.

  tests/layering_check.py --source SRC --build BUILD [--bin BIN] [--reply DIR]

--reply reads the codemodel from DIR (a copy of BUILD/.cmake/api/v1/reply,
as the planted-edge test makes) instead of the build's. Without a reply in
the build tree (a build configured before its query existed), the project is
configured once more in a scratch directory to get one.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Layer -> the layers it may depend on (besides itself). Closed under
# transitivity: what a layer may use, its users may too. Order matters for
# the folder lookup: the longest prefix wins.
ALLOWED = {
    "proto": set(),
    "base": set(),
    "data": {"base", "proto"},
    "spec": {"data", "base", "proto"},
    "worker/engine": {"spec", "data", "base", "proto"},
    "worker": {"worker/engine", "spec", "data", "base", "proto"},
    "server": {"spec", "data", "base", "proto"},
    "client": {"spec", "data", "base", "proto"},
    # Benchmarks and black-box tests drive every part.
    "bench": {"worker", "worker/engine", "server", "client", "spec", "data", "base", "proto"},
    "tests": {"worker", "worker/engine", "server", "client", "spec", "data", "base", "proto"},
}

# Outside libraries a layer must not link: (pattern on a link fragment, why).
NO_DEVICE = [
    (r"dnnl", "oneDNN (engine code)"),
    (r"libcuda|libcudart|cudart_static|libcublas|libcudnn|libnccl|CUDA::", "CUDA"),
    (r"onnx", "libonnx (models are read and written by traind-worker)"),
]
NO_RPC = [
    (r"grpc", "gRPC"),
    (r"sqlite", "SQLite"),
]
FORBIDDEN_LINKS = {
    "server": NO_DEVICE,
    "client": NO_DEVICE,
    "spec": NO_DEVICE + NO_RPC,
    "data": NO_DEVICE + NO_RPC,
    "base": NO_DEVICE + NO_RPC,
    "worker/engine": NO_RPC,
}

TEST_KIT = "tests/testing"

# Outside headers a layer must not include.
RPC_HEADERS = [(r"^(grpcpp?/|sqlite3\.h$|traind/v1/[a-z_]+\.grpc\.pb\.h$)", "gRPC or SQLite")]
DEVICE_HEADERS = [(r"^(dnnl|oneapi/dnnl|cuda|cublas|cudnn|nccl|onnx/)", "oneDNN, CUDA or ONNX")]
FORBIDDEN_INCLUDES = {
    "worker/engine": RPC_HEADERS,
    "spec": RPC_HEADERS + DEVICE_HEADERS,
    "data": RPC_HEADERS + DEVICE_HEADERS,
    "base": RPC_HEADERS + DEVICE_HEADERS,
    "server": DEVICE_HEADERS,
    "client": DEVICE_HEADERS,
}


def layer_of(path):
    """The layer of a path relative to the source root, or None."""
    path = path.strip("/")
    best = None
    for layer in ALLOWED:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def may_use(layer, other):
    return other == layer or other in ALLOWED.get(layer, set())


class Checker:
    def __init__(self):
        self.failures = []

    def fail(self, message):
        if message not in self.failures:  # an archive appears twice on a link line
            self.failures.append(message)


def find_reply(build):
    reply = os.path.join(build, ".cmake", "api", "v1", "reply")
    return reply if glob.glob(os.path.join(reply, "index-*.json")) else None


def configure_scratch(source):
    """Configures the project in a scratch directory with a codemodel query;
    returns (reply directory, scratch directory to remove)."""
    scratch = tempfile.mkdtemp(prefix="traind-layering-")
    query = os.path.join(scratch, ".cmake", "api", "v1", "query", "client-traind")
    os.makedirs(query)
    open(os.path.join(query, "codemodel-v2"), "w").close()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", source, "-B", scratch, *generator, "-DTRAIND_BUILD_TESTS=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    return os.path.join(scratch, ".cmake", "api", "v1", "reply"), scratch


def load_targets(reply):
    index_path = sorted(glob.glob(os.path.join(reply, "index-*.json")))[-1]
    with open(index_path) as f:
        index = json.load(f)
    codemodel_ref = None
    for obj in index["objects"]:
        if obj["kind"] == "codemodel":
            codemodel_ref = obj["jsonFile"]
    if codemodel_ref is None:
        raise SystemExit(f"layering: {index_path} has no codemodel reply")
    with open(os.path.join(reply, codemodel_ref)) as f:
        codemodel = json.load(f)
    config = codemodel["configurations"][0]
    directories = [d["source"] for d in config["directories"]]
    targets = {}
    for ref in config["targets"]:
        with open(os.path.join(reply, ref["jsonFile"])) as f:
            target = json.load(f)
        target["_dir"] = directories[ref["directoryIndex"]]
        targets[target["id"]] = target
    return targets


def check_targets(targets, checker):
    archive_layer = {}  # "libtraind_spec.a" -> "spec"
    for t in targets.values():
        layer = layer_of(t["_dir"])
        t["_layer"] = layer
        if t["type"] == "STATIC_LIBRARY":
            for artifact in t.get("artifacts", []):
                archive_layer[os.path.basename(artifact["path"])] = (t["name"], layer)
    checked = 0
    for t in targets.values():
        layer = t["_layer"]
        if layer is None:
            continue
        for dep in t.get("dependencies", []):
            other = targets.get(dep["id"])
            if other is None or other["_layer"] is None:
                continue
            if other["type"] == "EXECUTABLE":
                continue  # built to be run as a process (a test's child): nothing is linked
            checked += 1
            if not may_use(layer, other["_layer"]):
                checker.fail(f"target {t['name']} ({layer}/) depends on {other['name']} "
                             f"({other['_layer']}/): an edge back up the layers")
        for fragment in t.get("link", {}).get("commandFragments", []):
            if fragment.get("role") != "libraries":
                continue
            text = fragment["fragment"]
            for word in text.split():
                base = os.path.basename(word)
                if base in archive_layer:
                    name, other = archive_layer[base]
                    if other is not None and not may_use(layer, other):
                        checker.fail(f"{t['name']} ({layer}/) links {name} ({other}/) on its "
                                     f"link line")
            for pattern, what in FORBIDDEN_LINKS.get(layer, []):
                if re.search(pattern, text, re.IGNORECASE):
                    checker.fail(f"{t['name']} ({layer}/) links {what}: {text}")
    return checked


INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')


def check_includes(source, checker):
    checked = 0
    for layer in ALLOWED:
        root = os.path.join(source, layer)
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, source)
            if layer_of(rel_dir) != layer:
                continue  # a deeper layer's folder (worker/engine under worker)
            dirnames[:] = [d for d in dirnames if d != "node_modules"]
            for name in filenames:
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                rel = os.path.join(rel_dir, name)
                is_test = name.endswith(("_test.cc", "_test.cu")) or "/testing/" in "/" + rel_dir + "/"
                with open(os.path.join(dirpath, name), errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1)
                        for pattern, what in FORBIDDEN_INCLUDES.get(layer, []):
                            if re.search(pattern, header):
                                checker.fail(f"{rel}:{number}: includes {header} ({what} in "
                                             f"{layer}/)")
                        if is_test and header.startswith(TEST_KIT + "/"):
                            continue
                        other = layer_of(os.path.dirname(header))
                        if other is None or not os.path.exists(os.path.join(source, header)):
                            continue  # generated (traind/v1/...) or third-party
                        checked += 1
                        if not may_use(layer, other):
                            checker.fail(f"{rel}:{number}: includes {header} ({other}/ is not "
                                         f"below {layer}/)")
    return checked


def check_binaries(bin_dir, checker):
    for exe in ("traind", "trainctl"):
        path = os.path.join(bin_dir, exe)
        result = subprocess.run(["ldd", path], capture_output=True, text=True)
        if result.returncode != 0:
            checker.fail(f"cannot list the libraries of {path}")
            continue
        for line in result.stdout.splitlines():
            if re.search(r"libcuda|libcublas|libnccl|libcudart|libcudnn", line):
                checker.fail(f"{exe} loads CUDA: {line.strip()}")
            if re.search(r"libonnx", line):
                checker.fail(f"{exe} loads libonnx: {line.strip()}")
            if re.search(r"libdnnl", line):
                checker.fail(f"{exe} loads oneDNN: {line.strip()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--bin", help="where traind and trainctl are (ldd check)")
    parser.add_argument("--reply", help="a codemodel reply directory to read instead")
    parser.add_argument("--skip-includes", action="store_true")
    args = parser.parse_args()

    checker = Checker()
    scratch = None
    reply = args.reply or find_reply(args.build)
    if reply is None:
        reply, scratch = configure_scratch(args.source)
    try:
        targets = load_targets(reply)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    edges = check_targets(targets, checker)
    if edges == 0:
        checker.fail(f"no dependency between traind's targets found in {reply}")
    includes = 0 if args.skip_includes else check_includes(args.source, checker)
    if args.bin:
        check_binaries(args.bin, checker)

    for message in checker.failures:
        print(f"layering: {message}", file=sys.stderr)
    if checker.failures:
        return 1
    print(f"layering: {len(targets)} targets, {edges} target edges and {includes} includes "
          f"of traind's own headers keep to the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
