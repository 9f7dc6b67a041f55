#!/usr/bin/env bash
# Side-by-side fp32 training throughput: ipj vs the seeds' Python loop (Debian python3-torch), same model, data,
# batch 128, SGD lr 0.01 momentum 0.9, in one run, alternating to share the machine's noise. Prints the ratio.
# IPJ_BENCH_IPJ_FLAGS adds ipj flags (e.g. the optimized recipe's "--precision bf16 --memory-format channels_last
# --prefetch 4"); the Python side stays the seeds' fp32 loop, at its best thread setting of each round (it runs
# at every setting of IPJ_BENCH_PYTHON_THREADS, default "0 1": torch's default and 1 thread). Prints per-round
# ratios, the median, and best-of. For the mlp it then prints the fp32 GEMM ceiling of a step
# (bench/python/mlp_gemm_ceiling.py: the step's matrix products alone) at each side's batch and the share of it
# that each side's best round reached (ipj's only when it trains in fp32).
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

# The mlp's fp32 GEMM ceiling at the Python loop's batch (128) and ipj's, measured before the rounds and after
# them (the higher of the two counts: a neighbour's burst only lowers it), and each side's best round's share.
ipj_batch=128
[[ " ${IPJ_BENCH_IPJ_FLAGS:-} " =~ \ --batch[\ =]([0-9]+) ]] && ipj_batch="${BASH_REMATCH[1]}"
ceiling_rows=$(mktemp)
trap 'rm -f "$ceiling_rows"' EXIT
measure_gemm_ceiling() { "$python" bench/python/mlp_gemm_ceiling.py 128 "$ipj_batch" >> "$ceiling_rows"; }
print_gemm_ceiling() {
  "$python" -c "
import json, sys
ceiling = {}
for row in map(json.loads, open(sys.argv[1])):
    if row['batch'] not in ceiling or row['ceiling_samples_per_s'] > ceiling[row['batch']]['ceiling_samples_per_s']:
        ceiling[row['batch']] = row
python_row, ipj_row = ceiling[128], ceiling[$ipj_batch]
print(f\"mlp   ceiling: fp32 GEMMs alone at batch 128 {python_row['ceiling_samples_per_s']:.0f}/s \"
      f\"({python_row['gemm_gflop_per_s']:.0f} GFLOP/s): Python's best round at {$1 / python_row['ceiling_samples_per_s']:.0%}\")
if '--precision bf16' not in sys.argv[2] and '--precision fp16' not in sys.argv[2]:
    print(f\"mlp   ceiling: at batch $ipj_batch {ipj_row['ceiling_samples_per_s']:.0f}/s: ipj's best round at \"
          f\"{$2 / ipj_row['ceiling_samples_per_s']:.0%}; ratio at ipj's ceiling \"
          f\"{ipj_row['ceiling_samples_per_s'] / $1:.2f}x Python's best round\")" "$ceiling_rows" " ${IPJ_BENCH_IPJ_FLAGS:-} "
}

printf '%-5s %-6s %12s %12s %8s\n' model round python/s ipj/s ratio
for model in ${IPJ_BENCH_MODELS:-mlp cnn}; do
  best_python=0; best_ipj=0; ratios=""
  [[ "$model" == mlp ]] && measure_gemm_ceiling
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
  if [[ "$model" == mlp ]]; then measure_gemm_ceiling; print_gemm_ceiling "$best_python" "$best_ipj"; fi
done
