#!/usr/bin/env bash
# README command 1: install what building and running ipj needs, build the `ipj` CLI only, and run the main job
# on the embedded default data (Fashion-MNIST from Debian's dataset-fashion-mnist). scripts/test.sh adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --runtime
bash scripts/build.sh --target ipj -DIPJ_BUILD_TESTS=OFF -DIPJ_BUILD_BENCH=OFF
./build/bin/ipj devices
./build/bin/ipj compare --model mlp --out runs/demo-compare
