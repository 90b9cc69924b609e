"""Builds the traind package; the gRPC stubs are generated from proto/ here.

The stubs (traind/v1/*_pb2*.py) are never committed: build_py runs protoc on
traind's .proto files and writes them into the build tree. It needs `protoc`
3.15 or newer (proto3 `optional`) and gRPC's Python plugin:

    apt-get install protobuf-compiler protobuf-compiler-grpc   # Debian 12: protoc 3.21

Debian's python3-grpc-tools bundles protoc 3.5.1, which rejects the protos
("Explicit 'optional' labels are disallowed in the Proto3 syntax"), so it is
not used. Environment: PROTOC, GRPC_PYTHON_PLUGIN (the tools), TRAIND_PROTO_DIR
(the directory holding traind/v1/*.proto; default: ../../proto).
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["traind/v1/dataset.proto", "traind/v1/job.proto", "traind/v1/training_service.proto"]


def _tool(env, name, hint):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit(f"traind: {name} not found ({hint}); set {env} to its path")
    return path


def generate_stubs(out_dir):
    """Writes traind/v1/*_pb2.py, *_pb2.pyi and *_pb2_grpc.py under out_dir."""
    proto_dir = os.environ.get("TRAIND_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    proto_dir = os.path.abspath(proto_dir)
    for p in PROTOS:
        if not os.path.isfile(os.path.join(proto_dir, p)):
            raise SystemExit(f"traind: {p} not found under {proto_dir} (set TRAIND_PROTO_DIR)")
    protoc = _tool("PROTOC", "protoc", "apt-get install protobuf-compiler")
    plugin = _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin",
                   "apt-get install protobuf-compiler-grpc")
    version = subprocess.run([protoc, "--version"], check=True, capture_output=True,
                             text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", version)
    if not m or (int(m.group(1)), int(m.group(2))) < (3, 15):
        raise SystemExit(f"traind: {protoc} is {version.strip()}; the protos need protoc 3.15 "
                         "or newer (proto3 optional). python3-grpc-tools' bundled protoc 3.5.1 "
                         "is too old: use the protobuf-compiler package")
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, f"--plugin=protoc-gen-grpc={plugin}", f"-I{proto_dir}",
                    f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_out={out_dir}",
                    *PROTOS], check=True)
    init = os.path.join(out_dir, "traind", "v1", "__init__.py")
    with open(init, "w") as f:
        f.write('"""Generated from traind\'s proto/traind/v1 at build time."""\n')


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
