#!/usr/bin/env bash
# A user's TorchScript models in int8, side by side in one run: ipj's graph import (`ipj bench --variants
# fp32,int8-dynamic,int8-static` on the .pt file) and LibTorch's own graph-mode quantization passes (through
# torch.ao.quantization.quantize_jit in Debian's python3-torch), on a small residual net trained briefly by
# Python and on torchvision ResNet-18 / MobileNetV2 with 1-channel stems (untrained, BatchNorm statistics from
# real images), and torchvision ResNet-18 fp32 vs bf16 vs int8-static at batch 32 (bf16 is emulated, ~50x slower
# than fp32, on CPUs without AVX-512 BF16 or AMX). Prints ipj's rows, the passes' results and the ratios.
# Trained versions of ResNet-18/MobileNetV2: docs/INFERENCE.md. Usage: bench/user_models.sh [window_s=0.3]
# [batches=1,64,256]   (needs build/bin/ipj: bash scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
window="${1:-0.3}"
batches="${2:-1,64,256}"
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2

echo "making the models (python3-torch/torchvision)..." >&2
"$python" tests/quant/make_graph_models.py "$work" >&2
for name in residual_trained resnet18_scripted mobilenet_v2_scripted; do
  "$ipj" bench --model "$work/$name.pt" --input-shape 1,28,28 --mean 0.286 --std 0.353 \
    --variants fp32,int8-dynamic,int8-static --batch "$batches" --calib 512 --test-limit 1000 \
    --window-s "$window" --no-energy --quiet --json > "$work/ipj-$name.json"
done
"$ipj" bench --model "$work/resnet18_scripted.pt" --input-shape 1,28,28 --mean 0.286 --std 0.353 \
  --variants fp32,bf16,int8-static --batch 32 --calib 512 --no-accuracy --window-s "$window" --no-energy \
  --quiet --json > "$work/precisions-resnet18.json"
"$python" bench/python/graph_mode_quant.py "$work" --engine qnnpack --batch "$batches" > "$work/passes-qnnpack.json"
"$python" bench/python/graph_mode_quant.py "$work" --engine onednn --batch "$batches" > "$work/passes-onednn.json"

"$python" - "$work" "$batches" <<'PY'
import glob, json, sys
work, batches = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
print(f"{'route':30} {'model':22} {'batch':>5} {'p50 ms':>8} {'int8/fp32 speed':>15} {'acc':>7}")
for path in sorted(glob.glob(f"{work}/ipj-*.json")):
    name = path.rsplit("ipj-", 1)[1][:-5]
    rows = json.load(open(path))["rows"]
    fp32 = {r["batch"]: r for r in rows if r["variant"] == "fp32"}
    for r in rows:
        speed = fp32[r["batch"]]["p50_ms"] / r["p50_ms"]
        print(f"{'ipj ' + r['variant']:30} {name:22} {r['batch']:5d} {r['p50_ms']:8.3f} {speed:15.2f} "
              f"{r['test_acc']:7.4f}")
rows = json.load(open(f"{work}/precisions-resnet18.json"))["rows"]
fp32 = [r for r in rows if r["variant"] == "fp32"][0]
for r in rows:
    print(f"{'ipj ' + r['variant']:30} {'resnet18 (precisions)':22} {r['batch']:5d} {r['p50_ms']:8.3f} "
          f"{fp32['p50_ms'] / r['p50_ms']:15.2f}")
for engine in ("qnnpack", "onednn"):
    for row in json.load(open(f"{work}/passes-{engine}.json"))["rows"]:
        if "error" in row:
            print(f"{'passes ' + engine:30} {row['model']:22} refused: {row['error']}")
            continue
        for b in batches:
            speed = row[f"fp32_p50_ms_b{b}"] / row[f"int8_p50_ms_b{b}"]
            print(f"{'passes ' + engine + ' int8-static':30} {row['model']:22} {b:5d} {row[f'int8_p50_ms_b{b}']:8.3f} "
                  f"{speed:15.2f}   agreement {row['argmax_agreement']:.3f}, rel. error {row['relative_error']:.3f}")
PY
