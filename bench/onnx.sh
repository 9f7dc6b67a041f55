#!/usr/bin/env bash
# ONNX Runtime vs ipj on the same models in the same run: mlp and cnn trained here (1 epoch, 6000 images), each as
# fp32 and static int8, exported with `ipj export --verify`; per batch (1, 64, 256) ipj bench's p50 and ONNX
# Runtime's p50 (onnxruntime-node 1.30 through Node.js, CPU, default options), alternating the two sides.
# Usage: bench/onnx.sh [rounds=2] [seconds_per_row=2]
#   (needs build/bin/ipj: bash scripts/build.sh; and bash scripts/install-onnxruntime.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
seconds="${2:-2}"
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
field() { "$python" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

for model in mlp cnn; do
  "$ipj" train --model "$model" --epochs 1 --limit 6000 --test-limit 1000 --out "$work/$model" --quiet --json >/dev/null
  "$ipj" quantize --model "$work/$model" --mode static --calib 500 --test-limit 1000 --max-drop 100 \
    --out "$work/$model-int8.pt" --quiet --json >/dev/null
  "$ipj" export --model "$work/$model" --out "$work/$model-fp32.onnx" --verify --json | field "d['verify']['status']" \
    | sed "s/^/$model fp32 export verify: /"
  "$ipj" export --model "$work/$model-int8.pt" --out "$work/$model-int8.onnx" --verify --json | field "d['verify']['status']" \
    | sed "s/^/$model int8 export verify: /"
done

printf '%-5s %-5s %6s %5s %12s %12s %10s\n' model prec batch round ipj_p50_ms ort_p50_ms ort/ipj
for round in $(seq 1 "$rounds"); do
  for model in mlp cnn; do
    for precision in fp32 int8; do
      if [ "$precision" = fp32 ]; then source="$work/$model" variants=fp32; else source="$work/$model-int8.pt" variants=file; fi
      for batch in 1 64 256; do
        ours=$("$ipj" bench --model "$source" --variants "$variants" --batch "$batch" --window-s "$seconds" \
               --warmup-s 0.5 --max-windows 4 --no-accuracy --no-energy --json --quiet | field "d['rows'][0]['p50_ms']")
        theirs=$(node bench/onnxruntime_bench.js "$work/$model-$precision.onnx" "$batch" "$seconds" \
                 | field "d['rows'][0]['p50_ms']")
        printf '%-5s %-5s %6s %5s %12.3f %12.3f %9.2fx\n' "$model" "$precision" "$batch" "$round" "$ours" "$theirs" \
          "$("$python" -c "print($theirs/$ours)")"
      done
    done
  done
done
