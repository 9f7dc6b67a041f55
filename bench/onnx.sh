#!/usr/bin/env bash
# ONNX Runtime vs ipj on the same models in the same run: mlp and cnn trained here (1 epoch, 6000 images) as fp32
# and static int8, and a user's residual net and MobileNetV2 (torchvision, TorchScript, 1x28x28: made by
# tests/quant/make_graph_models.py) as fp32 and static int8 (`ipj quantize`), each exported with `ipj export
# --verify`. Per batch: ipj bench's p50 of its default fp32 variant or the int8 file (the engine it picks at load
# for that batch size, shown: static int8 may run on XNNPACK's int8 runtime, at batch 1 on the calling
# thread, at larger batches on a pool or, "+split", the rows split across one-thread runtimes; else on LibTorch's
# int8 kernels; and rt%: the share of the measured
# calls XNNPACK's or oneDNN's runtime really answered, where a route races it against that engine), and ONNX Runtime's p50
# (onnxruntime-node 1.30 through Node.js, CPU, default options), alternating sides; each side's process CPU time
# per run too (what the energy estimate counts: a side that keeps two cores busy for one answer costs twice).
# Usage: bench/onnx.sh [rounds=2] [seconds_per_row=2] [batches=1,64]
#   (needs build/bin/ipj: bash scripts/build.sh; and bash scripts/install-onnxruntime.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
seconds="${2:-2}"
batches="${3:-1,64}"
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2
field() { "$python" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fields() { "$python" -c "import json,sys; d=json.load(sys.stdin); print(*($1))"; }
user_flags=(--input-shape 1,28,28 --mean 0.286 --std 0.353)

for model in mlp cnn; do
  "$ipj" train --model "$model" --epochs 1 --limit 6000 --test-limit 1000 --out "$work/$model" --quiet --json >/dev/null
  "$ipj" quantize --model "$work/$model" --mode static --calib 500 --test-limit 1000 --max-drop 100 \
    --out "$work/$model-int8.pt" --quiet --json >/dev/null
  "$ipj" export --model "$work/$model" --out "$work/$model-fp32.onnx" --verify --json | field "d['verify']['status']" \
    | sed "s/^/$model fp32 export verify: /"
  "$ipj" export --model "$work/$model-int8.pt" --out "$work/$model-int8.onnx" --verify --json | field "d['verify']['status']" \
    | sed "s/^/$model int8 export verify: /"
done
"$python" tests/quant/make_graph_models.py "$work" >/dev/null
for model in resnet18_scripted mobilenet_v2_scripted; do
  "$ipj" export --model "$work/$model.pt" "${user_flags[@]}" --out "$work/$model-fp32.onnx" --verify --json \
    | field "d['verify']['status']" | sed "s/^/$model fp32 export verify: /"
  "$ipj" quantize --model "$work/$model.pt" "${user_flags[@]}" --mode static --calib 500 --test-limit 1000 \
    --max-drop 100 --out "$work/$model-int8.pt" --quiet --json >/dev/null
  # not --verify: these nets are untrained (random weights, BatchNorm statistics only), where ORT's and ipj's int8
  # rounding drift apart by more than the verify tolerance (ResNet-18: 0.226 vs 0.215); the rows time the same graph
  "$ipj" export --model "$work/$model-int8.pt" --out "$work/$model-int8.onnx" --json >/dev/null
  echo "$model int8 export: written (not verified: untrained net)"
done

printf '%-22s %-5s %6s %5s %-13s %5s %11s %11s %9s %12s %12s\n' model prec batch round engine rt% ipj_p50_ms ort_p50_ms ort/ipj \
  ipj_cpu_ms/run ort_cpu_ms/run
for round in $(seq 1 "$rounds"); do
  for model in mlp cnn resnet18_scripted mobilenet_v2_scripted; do
    for precision in fp32 int8; do
      flags=()
      case "$model-$precision" in
        *_scripted-fp32) source="$work/$model.pt" variants=fp32 flags=("${user_flags[@]}") ;;
        *-fp32) source="$work/$model" variants=fp32 ;;
        *) source="$work/$model-int8.pt" variants=file ;;
      esac
      for batch in ${batches//,/ }; do
        ours=$("$ipj" bench --model "$source" "${flags[@]}" --variants "$variants" --batch "$batch" \
               --window-s "$seconds" --warmup-s 0.5 --max-windows 4 --no-accuracy --no-energy --json --quiet 2>/dev/null \
               | "$python" bench/lib/bench_row_fields.py "$batch")
        theirs=$(IPJ_SAMPLE_SHAPE='[1,28,28]' node bench/onnxruntime_bench.js "$work/$model-$precision.onnx" "$batch" \
                 "$seconds" | fields "d['rows'][0]['p50_ms'], d['rows'][0]['cpu_ms_per_run']")
        read -r ours_ms engine ours_cpu runtime_share <<<"$ours"
        read -r theirs_ms theirs_cpu <<<"$theirs"
        printf '%-22s %-5s %6s %5s %-13s %4s%% %11.3f %11.3f %8.2fx %12.3f %12.3f\n' "$model" "$precision" "$batch" \
          "$round" "$engine" "$runtime_share" "$ours_ms" "$theirs_ms" "$("$python" -c "print($theirs_ms/$ours_ms)")" "$ours_cpu" \
          "$theirs_cpu"
      done
    done
  done
done
