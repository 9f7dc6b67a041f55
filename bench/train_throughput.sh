#!/usr/bin/env bash
# Side-by-side fp32 training throughput: ipj vs the seeds' Python loop (Debian python3-torch), same model, data,
# batch 128, SGD lr 0.01 momentum 0.9, in one run, alternating to share the machine's noise. Prints the ratio.
# IPJ_BENCH_IPJ_FLAGS adds ipj flags (e.g. the optimized recipe's "--precision bf16 --memory-format channels_last
# --prefetch 4"); the Python side stays the seeds' fp32 loop, at its best thread setting of each round (it runs
# at every setting of IPJ_BENCH_PYTHON_THREADS, default "0 1": torch's default and 1 thread). Prints per-round
# ratios, the median, and best-of.
# Usage: [IPJ_BENCH_MODELS="mlp cnn"] [IPJ_BENCH_IPJ_FLAGS=...] bench/train_throughput.sh [rounds=2]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
ipj=./build/bin/ipj
python=/usr/bin/python3
declare -A limit=([mlp]=60000 [cnn]=12000)
batch_flag="--batch 128"  # unless the extra flags set their own
[[ "${IPJ_BENCH_IPJ_FLAGS:-}" == *--batch* ]] && batch_flag=""
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

printf '%-5s %-6s %12s %12s %8s\n' model round python/s ipj/s ratio
for model in ${IPJ_BENCH_MODELS:-mlp cnn}; do
  best_python=0; best_ipj=0; ratios=""
  for round in $(seq "$rounds"); do
    py=0
    for threads in ${IPJ_BENCH_PYTHON_THREADS:-0 1}; do
      value=$("$python" bench/python/seed_train_loop.py --model "$model" --limit "${limit[$model]}" --threads "$threads" |
              field "['samples_per_s']")
      py=$("$python" -c "print(max($py, $value))")
    done
    # shellcheck disable=SC2086
    ours=$("$ipj" train --model "$model" --limit "${limit[$model]}" --epochs 1 $batch_flag --lr 0.01 --momentum 0.9 \
             --no-save --json --quiet ${IPJ_BENCH_IPJ_FLAGS:-} | field "['final']['samples_per_s']")
    printf '%-5s %-6s %12.0f %12.0f %7.2fx\n' "$model" "$round" "$py" "$ours" "$("$python" -c "print($ours/$py)")"
    ratios="$ratios $("$python" -c "print($ours/$py)")"
    best_python=$("$python" -c "print(max($best_python,$py))"); best_ipj=$("$python" -c "print(max($best_ipj,$ours))")
  done
  printf '%-5s %-6s %12s %12s %7.2fx\n' "$model" median - - \
    "$("$python" -c "import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))" $ratios)"
  printf '%-5s %-6s %12.0f %12.0f %7.2fx\n' "$model" best "$best_python" "$best_ipj" \
    "$("$python" -c "print($best_ipj/$best_python)")"
done
