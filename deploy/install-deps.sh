#!/usr/bin/env bash
# Installs the Debian 12 packages traind needs to build, test and run,
# only those that are missing. Idempotent; needs root or sudo when something
# is missing.
#
#   deploy/install-deps.sh            build + test dependencies
#   deploy/install-deps.sh --runtime  only what a running traind needs
#   deploy/install-deps.sh --list-runtime   print those package names
#
# Every name is checked before anything is installed: one apt has no
# candidate for (a package renamed in a Debian release) stops the script
# naming it. deploy/runtime-packages.sh --check compares the runtime list with
# what the built binaries link (a ctest, and the container image test).
set -euo pipefail

build_pkgs=(
  cmake ninja-build g++ pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libdnnl-dev libabsl-dev libgtest-dev libgmock-dev libsqlite3-dev
  # gzipped IDX image files (data/idx.h).
  zlib1g-dev
  # PNG and JPEG files of image folders (data/image_decode.h).
  libpng-dev libjpeg62-turbo-dev
  # OpenBLAS's OpenMP build: the CPU backend multiplies some large f32 products
  # with it on CPUs without AVX-512 (worker/engine/backend/cpu/cpu_gemm.h).
  libopenblas0-openmp
  libyaml-cpp-dev libsystemd-dev ocl-icd-opencl-dev libcli11-dev libssl-dev openssl
  clang-format
  # The HTTP side door: Boost.Beast/Asio (header-only), prometheus-cpp, and the
  # dashboard's charts; cpp-httplib is the tests' and benchmarks' HTTP client.
  libboost-dev libcpp-httplib-dev prometheus-cpp-dev libjs-dygraphs
  # gRPC's standard protos (health, reflection v1 and v1alpha).
  grpc-proto
  # The ONNX export (worker/engine/onnx_export.h): ONNX's protos, checker and
  # shape inference (opset 17, ai.onnx.ml 3), on the same libprotobuf.
  libonnx-dev
  # The Python client (client/python) and its tests: Debian's Python packages.
  python3 python3-grpcio python3-protobuf python3-yaml python3-setuptools python3-venv
  python3-pytest python3-pandas python3-matplotlib
)
# The packages owning every library traind, traind-worker and trainctl link
# (their NEEDED entries), then those loaded at run time (dlopen), which no
# NEEDED entry shows. Keep in step: deploy/runtime-packages.sh --check.
runtime_linked_pkgs=(
  libc6 libgcc-s1 libstdc++6 libgomp1 zlib1g libssl3 libsystemd0
  libabsl20220623 libprotobuf32 libgrpc29 libgrpc++1.51 libdnnl2 libonnx1
  libsqlite3-0 libyaml-cpp0.7 libprometheus-cpp-core1.0 libpng16-16 libjpeg62-turbo
)
# OpenBLAS's OpenMP build: opened by the CPU backend (cpu_gemm.h).
runtime_loaded_pkgs=(libopenblas0-openmp)
runtime_pkgs=("${runtime_linked_pkgs[@]}" "${runtime_loaded_pkgs[@]}")
# What only the tests need: promtool (Prometheus) checks /metrics; the
# dashboard is tested in Debian's chromium, driven by playwright-core (npm);
# the exported ONNX models run in ONNX Runtime (onnxruntime-node, npm).
# tmux hosts trainctl's live view in a real terminal. The Slurm launcher is
# tested on a single-node Slurm (tests/slurm/start.sh, no systemd).
# Fashion-MNIST (IDX files) trains examples/fashion-mnist-cnn.yaml.
# scikit-learn's permutation_importance checks traind's importance.
test_pkgs=(prometheus chromium tmux iproute2 slurmctld slurmd slurm-client munge
  dataset-fashion-mnist python3-sklearn)

case "${1:-}" in
  --list-runtime) printf '%s\n' "${runtime_pkgs[@]}"; exit 0 ;;
  --list-runtime-linked) printf '%s\n' "${runtime_linked_pkgs[@]}"; exit 0 ;;
  ""|--runtime|--tests) ;;
  *) echo "usage: $0 [--runtime|--tests|--list-runtime]" >&2; exit 2 ;;
esac

pkgs=("${build_pkgs[@]}")
if [[ "${1:-}" == "--runtime" ]]; then
  pkgs=("${runtime_pkgs[@]}")
elif [[ "${1:-}" == "--tests" ]]; then
  pkgs+=("${test_pkgs[@]}")
  # Node.js with npm: a machine that already has both (Debian's or another
  # vendor's build, such as NodeSource's nodejs, which bundles npm and
  # conflicts with Debian's npm package) keeps them; only a machine with
  # neither gets Debian's.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    pkgs+=(nodejs npm)
  fi
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then sudo=(sudo); else
    echo "install-deps: missing packages and not root (no sudo): ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -o DPkg::Lock::Timeout=600 -qq
# A name apt does not know fails here, before anything is installed.
known=$(apt-cache policy "${missing[@]}" 2>/dev/null |
  awk '/^[^ ].*:$/ {name = substr($0, 1, length($0) - 1)} /^ *Candidate:/ && $2 != "(none)" {print name}')
unknown=()
for p in "${missing[@]}"; do
  grep -qxF "$p" <<<"$known" || unknown+=("$p")
done
if [[ ${#unknown[@]} -gt 0 ]]; then
  echo "install-deps: no Debian package named ${unknown[*]} in this machine's apt sources" \
    "(deploy/install-deps.sh lists it; was it renamed in this Debian release?)" >&2
  exit 1
fi
"${sudo[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"
