#!/usr/bin/env bash
# Inference efficiency, side by side in one run: ipj's variants (fp32, frozen TorchScript, int8 dynamic/static)
# against the same model run by the seeds' Python loop (Debian python3-torch, fp32 and torch's quantize_dynamic),
# per batch size: p50/p99 latency, throughput, J/1000 and accuracy. Prints the ratios the goals are about.
# Usage: bench/inference.sh [model=mlp] [window_s=0.5]   (needs build/bin/ipj: bash scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-mlp}"
window="${2:-0.5}"
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2

echo "training $model (1 epoch) for the benchmark..." >&2
"$ipj" train --model "$model" --epochs 1 --quiet --out "$work/run" --json > /dev/null
"$ipj" bench --model "$work/run" --variants fp32,jit,int8-dynamic,int8-static --batch 1,64,256 \
  --window-s "$window" --quiet --json > "$work/ipj.json"
GLOG_minloglevel=2 "$python" bench/python/seed_inference.py --model "$model" --batch 1,64,256 --window-s "$window" \
  > "$work/python.json"

"$python" - "$work/ipj.json" "$work/python.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))["rows"]
theirs = json.load(open(sys.argv[2]))["rows"]
rows = ours + theirs
print(f"{'variant':22} {'batch':>5} {'p50 ms':>8} {'p99 ms':>8} {'inf/s':>9} {'J/1000':>8} {'acc':>7}")
for r in rows:
    j = r.get("j_per_1000")
    acc = r.get("test_acc")
    print(f"{r['variant']:22} {r['batch']:5d} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['throughput_per_s']:9.0f} "
          f"{(f'{j:.3f}' if j is not None else '-'):>8} {(f'{acc:.4f}' if acc is not None else '-'):>7}")
get = lambda v, b: next(r for r in rows if r["variant"] == v and r["batch"] == b)
print()
for b in (64, 256):
    for v in ("int8-dynamic", "int8-static"):
        ratio = get(v, b)["throughput_per_s"] / get("fp32", b)["throughput_per_s"]
        drop = (get("fp32", b)["test_acc"] - get(v, b)["test_acc"]) * 100
        print(f"ipj {v} / ipj fp32 at batch {b}: {ratio:.2f}x throughput, accuracy drop {drop:.2f} pt (goal >= 1.5x, <= 0.5 pt)")
for v in ("fp32", "jit"):
    ratio = get("python fp32", 1)["p50_ms"] / get(v, 1)["p50_ms"]
    print(f"ipj {v} vs python fp32 at batch 1: p50 {get(v, 1)['p50_ms']:.3f} vs {get('python fp32', 1)['p50_ms']:.3f} ms "
          f"({ratio:.2f}x faster; goal > 1)")
for b in (64, 256):
    ratio = get("int8-dynamic", b)["throughput_per_s"] / get("python int8-dynamic", b)["throughput_per_s"]
    print(f"ipj int8-dynamic vs python int8-dynamic at batch {b}: {ratio:.2f}x throughput")
PY
