#!/usr/bin/env bash
# Data-parallel costs on this machine: (1) c10d Gloo all-reduce latency and bus bandwidth vs message size between
# 2 local ranks (ipj_bench_allreduce); (2) mlp training throughput of 1 process vs `ipj launch --nproc-per-node 2
# ... train --distributed`, same global batch and samples, alternating rounds; (3) a multi-node scaling model from
# the measured numbers (bench/python/scaling_model.py). Loopback only: no real network is measured here.
# Usage: [IPJ_BENCH_LIMIT=20000] [IPJ_BENCH_BATCH=128] bench/distributed.sh [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
ipj=./build/bin/ipj
python=/usr/bin/python3
limit="${IPJ_BENCH_LIMIT:-20000}"
batch="${IPJ_BENCH_BATCH:-128}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "== all-reduce (Gloo, 2 ranks on 127.0.0.1, fp32 sum, median of 20) =="
"$ipj" launch --nproc-per-node 2 -- ./build/bin/ipj_bench_allreduce $((64 << 20)) 20 | tee "$work/allreduce.jsonl" |
  "$python" -c '
import json, sys
print("%12s %12s %12s" % ("bytes", "median_us", "bus_GB/s"))
for line in sys.stdin:
    r = json.loads(line)
    print("%12d %12.1f %12.3f" % (r["bytes"], r["median_us"], r["bus_gb_s"]))'

echo "== mlp training, global batch $batch, $limit samples, 1 epoch, fp32 (samples/s over the training loop) =="
common=(--model mlp --epochs 1 --batch "$batch" --limit "$limit" --test-limit 2000 --no-energy --json --quiet)
printf '%-6s %12s %12s %8s\n' round 1-proc/s 2-ranks/s ratio
ratios=""
for round in $(seq "$rounds"); do
  one=$("$ipj" train "${common[@]}" --out "$work/one-$round" | field "['final']['samples_per_s']")
  two=$("$ipj" launch --nproc-per-node 2 -- "$ipj" train --distributed "${common[@]}" --out "$work/two-$round" |
          field "['final']['samples_per_s']")
  ratio=$("$python" -c "print($two/$one)")
  ratios="$ratios $ratio"
  printf '%-6s %12.0f %12.0f %7.2fx\n' "$round" "$one" "$two" "$ratio"
  echo "{\"one_samples_per_s\": $one, \"two_samples_per_s\": $two}" >>"$work/training.jsonl"
done
# shellcheck disable=SC2086
printf '%-6s %12s %12s %7.2fx\n' median - - \
  "$("$python" -c "import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))" $ratios)"
parameters=$("$python" -c "import json; print(json.load(open('$work/one-1/results.json'))['model']['parameters'])")

echo "== multi-node model (mlp, $parameters parameters, global batch $batch) =="
"$python" bench/python/scaling_model.py --allreduce "$work/allreduce.jsonl" --training "$work/training.jsonl" \
  --parameters "$parameters" --batch "$batch"
