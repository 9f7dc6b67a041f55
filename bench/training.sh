#!/usr/bin/env bash
# Training efficiency, side by side in one run: the seeds' Python loop (Debian python3-torch, fp32, batch 128)
# against ipj with each optimisation switched on in turn (samples/s), then `ipj compare` (seed recipe vs optimized
# recipe, time and energy to the target accuracy; mlp and cnn, IPJ_BENCH_COMPARE_MODELS) over 3 seeds, median and
# spread; evaluation with and without --compile jit.
# Usage: bench/training.sh [compare_seeds=3]   (needs build/bin/ipj: bash scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-3}"
ipj=./build/bin/ipj
python=/usr/bin/python3
declare -A limit=([mlp]=60000 [cnn]=8000)
# The optimized recipes' speed settings (src/train/compare.cpp optimized_recipe), at the bench's lr.
declare -A optimized_flags=([mlp]="--batch 256 --prefetch 4 --precision bf16"
                            [cnn]="--batch 128 --prefetch 4 --precision bf16 --memory-format channels_last")
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }
ratio() { "$python" -c "print(f'{$1/$2:.2f}x')"; }

printf '%-5s %-52s %10s %9s\n' model variant samples/s vs_python
for model in mlp cnn; do
  n=${limit[$model]}
  py=$("$python" bench/python/seed_train_loop.py --model "$model" --limit "$n" | field "['samples_per_s']")
  printf '%-5s %-52s %10.0f %9s\n' "$model" "python seed loop (fp32, b128)" "$py" 1.00x
  while IFS='|' read -r name flags; do
    flags=${flags/'${optimized_flags[$model]}'/${optimized_flags[$model]}}
    # shellcheck disable=SC2086
    ours=$("$ipj" train --model "$model" --limit "$n" --test-limit 1000 --epochs 1 --lr 0.01 --no-save --json --quiet \
           $flags | field "['final']['samples_per_s']")
    printf '%-5s %-52s %10.0f %9s\n' "$model" "$name" "$ours" "$(ratio "$ours" "$py")"
  done <<'VARIANTS'
ipj seed recipe (fp32, b128, no prefetch, python threads, glibc malloc, torch SGD)|--batch 128 --prefetch 0 --thread-plan python --allocator system --optimizer-impl torch
ipj + prefetch|--batch 128 --prefetch 4 --thread-plan python --allocator system --optimizer-impl torch
ipj + tuned allocator|--batch 128 --prefetch 4 --thread-plan python --optimizer-impl torch
ipj + fused SGD step|--batch 128 --prefetch 4 --thread-plan python
ipj + tuned threads|--batch 128 --prefetch 4
ipj + bf16|--batch 128 --prefetch 4 --precision bf16
ipj + bf16 + channels-last|--batch 128 --prefetch 4 --precision bf16 --memory-format channels_last
ipj + bf16 + channels-last + batch 256|--batch 256 --prefetch 4 --precision bf16 --memory-format channels_last
ipj + bf16 + batch 256|--batch 256 --prefetch 4 --precision bf16
ipj optimized recipe's settings (as ipj compare runs them)|${optimized_flags[$model]}
VARIANTS
done

echo
echo "graph optimisation for evaluation (--compile none vs jit; test-set pass of 10,000 images, same accuracy):"
for model in mlp cnn; do
  for compile in none jit; do
    line=$("$ipj" train --model "$model" --limit 2000 --epochs 1 --compile "$compile" --no-save --json --quiet |
           "$python" -c "import json,sys; r=json.load(sys.stdin)['epochs'][0]; print(f\"{r['eval_wall_s']:.3f} s, test acc {r['test_acc']:.4f}\")")
    printf '%-5s --compile %-4s eval %s\n' "$model" "$compile" "$line"
  done
done

echo
for model in ${IPJ_BENCH_COMPARE_MODELS:-mlp cnn}; do
echo "ipj compare --model $model (its default target), seeds 0..$((seeds - 1)):"
speedups=(); energy=()
for seed in $(seq 0 $((seeds - 1))); do
  report=$("$ipj" compare --model "$model" --seed "$seed" --json --quiet --out "$(mktemp -d)")
  s=$(echo "$report" | field "['speedup']"); e=$(echo "$report" | field "['energy_ratio']")
  d=$(echo "$report" | field "['acc_delta_pt']")
  printf 'seed %d: speed-up %s, energy ratio %s, accuracy delta %s pt\n' "$seed" "$s" "$e" "$d"
  speedups+=("$s"); energy+=("$e")
done
"$python" - "${speedups[*]}" "${energy[*]}" <<'PY'
import statistics, sys
values = lambda text: [float(v) for v in text.split() if v != "None"]
s, e = values(sys.argv[1]), values(sys.argv[2])
if s and e:
    print(f"median speed-up {statistics.median(s):.2f}x (range {min(s):.2f}-{max(s):.2f}); "
          f"median energy ratio {statistics.median(e):.2f} (range {min(e):.2f}-{max(e):.2f}); "
          f"runs that missed the target: {len(sys.argv[1].split()) - len(s)}")
else:
    print("no run reached the target on both sides")
PY
done
