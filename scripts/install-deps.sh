#!/usr/bin/env bash
# Installs the Debian 12 packages ipj needs (idempotent; run as root): all of them; with --runtime only what
# building and running the `ipj` CLI needs (scripts/demo.sh); with --build what building every target needs
# (scripts/test.sh installs the tests' peers, below, while it compiles). Keep these lists the single source of
# truth: README, CI and the scripts all go through it. --check installs nothing: it fails (exit 1) where packages
# are missing and this is not root, so that a caller learns it before a long build.
set -euo pipefail
mode=all
check_only=0
for option in "$@"; do
  case "$option" in
    --runtime) mode=runtime ;;
    --build) mode=build ;;
    --check) check_only=1 ;;
    *)
      echo "install-deps: unknown option '$option' (use --runtime, --build, --check or nothing)" >&2
      exit 2
      ;;
  esac
done

packages=(
  # toolchain
  g++ cmake ninja-build ccache clang-format make
  # LibTorch (CPU, oneDNN) and a fast BLAS: without libopenblas0 training runs ~20x slower; oneDNN's own API
  # (the libdnnl LibTorch already links) for the linear-chain step's GEMMs
  libtorch-dev libopenblas0 libdnnl-dev
  # the real data
  dataset-fashion-mnist
  # libraries
  zlib1g-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcpuinfo-dev pkg-config
  # HTTP for `ipj serve` / `ipj load` (Boost.Beast/Asio front end), file checksums
  libcpp-httplib-dev libboost-dev libxxhash-dev
  # image folders (PNG, JPEG)
  libpng-dev libjpeg62-turbo-dev
  # XNNPACK's subgraph runtime (fp32 batch 1; the same libXNNPACK Debian's LibTorch links) and its thread pool
  libxnnpack-dev libpthreadpool-dev
  # ONNX export (libonnx protobuf types, checker, shape inference) and c10d's Gloo backend (headers only)
  libonnx-dev libprotobuf-dev protobuf-compiler python3-onnx libgloo-dev
)
build_test_packages=(
  # building the tests and benchmarks: GoogleTest, Google Benchmark
  libgtest-dev libgmock-dev libbenchmark-dev
)
test_peer_packages=(
  # what the tests run beside ipj: PyTorch reference (golden files, side-by-side loops)
  python3-torch python3-numpy python3-torchvision
  # ONNX Runtime for export parity tests and bench/onnx.sh: Node.js runs the npm package onnxruntime-node
  # (scripts/install-onnxruntime.sh installs it into node_modules/); npm is added below where Node.js lacks it
  nodejs
  # report rendering checks (headless Chromium) and Prometheus rule checks (promtool)
  chromium prometheus
  # serving benchmark peers: the seeds' FastAPI server and wrk
  python3-fastapi python3-uvicorn wrk
)
[ "$mode" = runtime ] || packages+=("${build_test_packages[@]}")
[ "$mode" != all ] || packages+=("${test_peer_packages[@]}")

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# Debian's npm conflicts with Node.js builds that ship npm inside (NodeSource): only where no npm exists.
if [ "$mode" = all ] && ! command -v npm >/dev/null; then
  packages+=(npm)
  missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run this script as root (or with sudo)" >&2
  exit 1
fi
if [ "$check_only" -eq 1 ]; then
  echo "install-deps: ${#missing[@]} package(s) to install"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt or dpkg (unattended upgrades, a second install) instead of failing at once.
apt-get -o DPkg::Lock::Timeout=300 update -q
apt-get -o DPkg::Lock::Timeout=300 install -y -q "${packages[@]}"
