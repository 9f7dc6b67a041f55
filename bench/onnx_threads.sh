#!/usr/bin/env bash
# fp32 per-core check against ONNX Runtime (issue 25, item 3): ipj bench's default fp32 variant, `--threads 1`
# and `--prefer latency` (batch 1 on XNNPACK's pool whatever its CPU per call) vs ORT (onnxruntime-node) at its
# default intra-op threads, 1 and 2, spinning on (ORT's default) and off, on the cnn (trained here, 1 epoch on
# 6000 images) and torchvision's MobileNetV2 and ResNet-18 (TorchScript, 1x28x28), alternating sides per model.
# Prints p50 latency and process CPU-ms per call of each setting; exits 0.
# Usage: bench/onnx_threads.sh [rounds=2] [batch=1] [seconds_per_row=2]
#   (needs build/bin/ipj: bash scripts/build.sh; and bash scripts/install-onnxruntime.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
batch="${2:-1}"
seconds="${3:-2}"
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2 IPJ_ONNXRUNTIME_NODE="${IPJ_ONNXRUNTIME_NODE:-$PWD/node_modules}"
user_flags=(--input-shape 1,28,28 --mean 0.286 --std 0.353)
p50_and_cpu() { "$python" -c "import json,sys; r=json.load(sys.stdin)['rows'][0]; print('%.3f %.3f' % (r['p50_ms'], r['$1']))"; }

"$ipj" train --model cnn --epochs 1 --limit 6000 --test-limit 1000 --out "$work/cnn" --quiet --json >/dev/null
"$ipj" export --model "$work/cnn" --out "$work/cnn-fp32.onnx" --verify --json >/dev/null
"$python" tests/quant/make_graph_models.py "$work" >/dev/null
for model in resnet18_scripted mobilenet_v2_scripted; do
  "$ipj" export --model "$work/$model.pt" "${user_flags[@]}" --out "$work/$model-fp32.onnx" --verify --json >/dev/null
done

printf '%-5s %-22s %-26s %8s %8s\n' round model side p50_ms cpu_ms
for round in $(seq 1 "$rounds"); do
  for model in cnn mobilenet_v2_scripted resnet18_scripted; do
    source="$work/$model.pt" flags=("${user_flags[@]}")
    [ "$model" = cnn ] && source="$work/cnn" flags=()
    for setting in threads=default threads=1 prefer=latency; do
      setting_flags=()
      [ "$setting" = threads=1 ] && setting_flags=(--threads 1)
      [ "$setting" = prefer=latency ] && setting_flags=(--prefer latency)
      row=$("$ipj" bench --model "$source" "${flags[@]}" "${setting_flags[@]}" --variants fp32 --batch "$batch" \
            --window-s "$seconds" --warmup-s 0.5 --max-windows 4 --no-accuracy --no-energy --json --quiet 2>/dev/null \
            | p50_and_cpu cpu_ms_per_call)
      printf '%-5s %-22s %-26s %8s %8s\n' "$round" "$model" "ipj $setting" $row
    done
    for setting in "0 1" "1 1" "2 1" "0 0" "2 0"; do
      set -- $setting
      row=$(IPJ_ORT_THREADS=$1 IPJ_ORT_SPIN=$2 node bench/onnxruntime_bench.js "$work/$model-fp32.onnx" "$batch" \
            "$seconds" | p50_and_cpu cpu_ms_per_run)
      printf '%-5s %-22s %-26s %8s %8s\n' "$round" "$model" "ORT threads=$1 spin=$2" $row
    done
  done
done
echo "threads=0: ORT's default (its count of physical cores); spin=0: session.intra_op.allow_spinning = 0"
