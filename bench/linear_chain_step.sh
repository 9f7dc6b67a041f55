#!/usr/bin/env bash
# ipj's linear-chain training step (--optimizer-impl fused on the mlp) against the same training through
# autograd + one-pass SGD (--optimizer-impl autograd), side by side in one run, alternating the sides (the
# order flips each round) to share the machine's noise. For each precision it prints per-round samples/s, the
# ratio fused/autograd, the median ratio, and each side's best round as a share of the step's GEMM ceiling
# (bench/python/mlp_gemm_ceiling.py: the step's eight matrix products alone; oneDNN bf16 for bf16).
# IPJ_BENCH_TORCHSCRIPT=1 trains the seeds' Python Mlp (bench/python/seed_train_loop.py, the same 784-512-512-10
# shape) saved by torch.jit.script instead: a user's TorchScript MLP.
# Usage: [IPJ_BENCH_PRECISIONS="fp32 bf16"] [IPJ_BENCH_BATCH=256] [IPJ_BENCH_TORCHSCRIPT=1]
#        bench/linear_chain_step.sh [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
batch="${IPJ_BENCH_BATCH:-256}"
ipj=./build/bin/ipj
python=/usr/bin/python3
model=mlp
if [[ "${IPJ_BENCH_TORCHSCRIPT:-0}" == 1 ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  model="$scratch/seed_mlp.pt"
  PYTHONPATH=bench/python "$python" -c "import sys, torch, seed_train_loop as s
torch.jit.script(s.Mlp()).save(sys.argv[1])" "$model"
fi
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }
run_ipj() {  # precision impl -> samples/s of one epoch over the 60,000 training images
  "$ipj" train --model "$model" --epochs 1 --batch "$batch" --lr 0.1 --momentum 0.9 --prefetch 4 --precision "$1" \
    --optimizer-impl "$2" --no-save --no-energy --json --quiet | field "['final']['samples_per_s']"
}
ceiling() {  # precision -> the GEMMs' samples/s at this batch
  local engine=openblas
  [[ "$1" == bf16 ]] && engine=onednn-bf16
  "$python" bench/python/mlp_gemm_ceiling.py --engine "$engine" "$batch" | field "['ceiling_samples_per_s']"
}

printf '%-5s %-6s %12s %12s %8s\n' prec round autograd/s fused/s ratio
for precision in ${IPJ_BENCH_PRECISIONS:-fp32 bf16}; do
  ratios=""; best_autograd=0; best_fused=0
  gemm_ceiling=$(ceiling "$precision")
  for round in $(seq "$rounds"); do
    if (( round % 2 )); then
      autograd=$(run_ipj "$precision" autograd); fused=$(run_ipj "$precision" fused)
    else
      fused=$(run_ipj "$precision" fused); autograd=$(run_ipj "$precision" autograd)
    fi
    ratio=$("$python" -c "print($fused / $autograd)")
    ratios="$ratios $ratio"
    best_autograd=$("$python" -c "print(max($best_autograd, $autograd))")
    best_fused=$("$python" -c "print(max($best_fused, $fused))")
    printf '%-5s %-6s %12.0f %12.0f %7.2fx\n' "$precision" "$round" "$autograd" "$fused" "$ratio"
  done
  gemm_ceiling=$("$python" -c "print(max($gemm_ceiling, $(ceiling "$precision")))")
  printf '%-5s %-6s %12s %12s %7.2fx\n' "$precision" median - - \
    "$("$python" -c "import statistics,sys; print(statistics.median(float(v) for v in sys.argv[1:]))" $ratios)"
  "$python" -c "print(f'$precision  ceiling: GEMMs alone at batch $batch {$gemm_ceiling:.0f}/s; best rounds: autograd ' \
f'{$best_autograd / $gemm_ceiling:.0%}, fused {$best_fused / $gemm_ceiling:.0%} of it')"
done
