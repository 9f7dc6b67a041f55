#!/usr/bin/env bash
# README command 2 (and .ci/run): install, check formatting, build with warnings as errors, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-onnxruntime.sh
bash scripts/format.sh --check
bash scripts/build.sh -DIPJ_BUILD_TESTS=ON -DIPJ_BUILD_BENCH=ON  # after demo.sh: only what it did not build
cd build
ctest --output-on-failure -j2 --timeout 900
