#!/usr/bin/env bash
# README command 1: install what is needed, build, and run the main job on the embedded default data
# (Fashion-MNIST from Debian's dataset-fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target ipj  # only what the main job needs; scripts/test.sh builds the rest
./build/bin/ipj devices
./build/bin/ipj compare --model mlp --out runs/demo-compare
