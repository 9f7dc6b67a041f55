#!/usr/bin/env bash
# XNNPACK's batch-1 runtime on one thread vs a two-thread pool whose worker sleeps or spins after each call
# (p50 latency and CPU per call back to back and with 0.1-5 ms between calls), on the cnn-like net, ResNet-18 and
# MobileNetV2 of tests/quant/make_graph_models.py (1x28x28). Prints the table per model and exits 0.
# Usage: bash bench/xnnpack_threads.sh [rounds=3]   (needs build/bin/ipj_bench_xnnpack_threads: scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2
/usr/bin/python3 tests/quant/make_graph_models.py "$work" >/dev/null
for model in cnn_bn resnet18 mobilenet_v2; do
  echo "== $model"
  if [ "$model" = cnn_bn ]; then
    ./build/bin/ipj_bench_xnnpack_threads "$work/${model}_scripted.pt" 1,28,28 0 1 "$rounds"
  else
    ./build/bin/ipj_bench_xnnpack_threads "$work/${model}_scripted.pt" 1,28,28 0.286 0.353 "$rounds"
  fi
done
