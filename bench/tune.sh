#!/usr/bin/env bash
# `ipj tune` against the hand-tuned recipe and the seed recipe, in one run, per model (mlp and cnn by default):
# 1. the seed recipe's cost: `ipj compare --seed 0` (seed recipe + hand-tuned recipe; its wall time sets the budget);
# 2. `ipj tune --seed 0 --budget-s FACTOR x that cost` (held-out runs included in the budget);
# 3. on held-out seeds 3 4 5 (not the tuner's seeds 0 and 100, nor 0-2 on which compare's recipes were
#    hand-tuned): `ipj compare --seed S` (seed recipe vs hand-tuned) and `ipj train --recipe tuned/recipe.json
#    --seed S` (the tuned recipe), their order alternating from seed to seed: joules and seconds to the target,
#    medians and ranges, and the per-seed ratios tuned / hand-tuned and tuned / seed.
# Usage: bench/tune.sh [models="mlp cnn"]   (needs build/bin/ipj: bash scripts/build.sh)
# Env: IPJ_TUNE_BUDGET_FACTOR (10), IPJ_TUNE_LIMIT / IPJ_TUNE_TEST_LIMIT (0 = all samples), IPJ_TUNE_TARGET
# (0 = compare's default per model), IPJ_TUNE_SEEDS ("3 4 5"), IPJ_TUNE_OUT (a temporary folder).
# IPJ_BENCH_LOCK=FILE runs each ipj command under `flock FILE` (a machine shared with builds: each step holds
# the lock on its own, so no hold lasts longer than the tune step).
# A tiny smoke run: IPJ_TUNE_LIMIT=3000 IPJ_TUNE_TEST_LIMIT=1000 IPJ_TUNE_TARGET=0.75 IPJ_TUNE_BUDGET_FACTOR=3 bench/tune.sh mlp
set -euo pipefail
cd "$(dirname "$0")/.."
models="${1:-mlp cnn}"
ipj=./build/bin/ipj
python=/usr/bin/python3
factor="${IPJ_TUNE_BUDGET_FACTOR:-10}"
limit="${IPJ_TUNE_LIMIT:-0}"
test_limit="${IPJ_TUNE_TEST_LIMIT:-0}"
target="${IPJ_TUNE_TARGET:-0}"
seeds="${IPJ_TUNE_SEEDS:-3 4 5}"
out="${IPJ_TUNE_OUT:-$(mktemp -d)}"
subset=(--limit "$limit" --test-limit "$test_limit")
run() { if [ -n "${IPJ_BENCH_LOCK:-}" ]; then flock "$IPJ_BENCH_LOCK" "$@"; else "$@"; fi; }
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

for model in $models; do
  echo "== $model (subset: limit $limit, test-limit $test_limit; results under $out/$model)"
  mkdir -p "$out/$model"
  run "$ipj" compare --model "$model" --seed 0 --target-acc "$target" "${subset[@]}" --json --quiet \
    --out "$out/$model/compare-seed0" > "$out/$model/compare-seed0.json"
  seed_cost=$(field "['baseline']['wall_s']" < "$out/$model/compare-seed0.json")
  model_target=$(field "['target_acc']" < "$out/$model/compare-seed0.json")
  budget=$("$python" -c "print(round($factor * $seed_cost, 1))")
  echo "seed recipe (seed 0): $seed_cost s to run; tune budget $factor x = $budget s; target $model_target"

  run "$ipj" tune --model "$model" --target-acc "$model_target" --budget-s "$budget" --seed 0 "${subset[@]}" \
    --out "$out/$model/tune" --json > "$out/$model/tune.json" 2> "$out/$model/tune.log"
  "$python" - "$out/$model/tune.json" "$seed_cost" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
seed_cost = float(sys.argv[2])
budget, search, best = report["budget"], report["search"], report["best"]
print(f"tune: {search['trials']} trials ({search['reached']} reached the target, {search['stopped_early']} stopped "
      f"early, {search['failed']} failed), stopped: {search['stopped_because']}; cost {budget['total']:.1f} "
      f"{budget['unit']} of {budget['limit']:.1f} (search {budget['search']:.1f} + confirm {budget['confirm']:.1f} + held-out {budget['heldout']:.1f}), "
      f"session wall {budget['session_wall_s']:.1f} s; search cost {budget['total'] / seed_cost:.1f}x the seed recipe's run")
if best:
    values = " ".join(f"{k}={v}" for k, v in best["values"].items())
    print(f"tuned recipe (trial {best['trial']}): {values} lr={best['recipe']['lr']:.4g}; on seed 0: "
          f"{best['energy_to_target_j']} J, {best['time_to_target_s']} s to the target")
PY
  test -f "$out/$model/tune/recipe.json" || { echo "no recipe.json: the search found nothing to compare"; continue; }

  compare_side() {
    run "$ipj" compare --model "$model" --seed "$1" --target-acc "$model_target" "${subset[@]}" --json --quiet \
      --out "$out/$model/compare-seed$1" > "$out/$model/compare-seed$1.json"
  }
  tuned_side() {
    run "$ipj" train --recipe "$out/$model/tune/recipe.json" --seed "$1" "${subset[@]}" --no-save --json --quiet \
      > "$out/$model/tuned-seed$1.json"
  }
  turn=0
  for seed in $seeds; do  # alternate which side runs first, so that drift on a shared machine hits both
    if [ $((turn % 2)) -eq 0 ]; then compare_side "$seed"; tuned_side "$seed"; else tuned_side "$seed"; compare_side "$seed"; fi
    turn=$((turn + 1))
  done
  "$python" - "$out/$model" "$seeds" <<'PY'
import json, statistics, sys
folder, seeds = sys.argv[1], sys.argv[2].split()
rows = {"seed recipe": [], "hand-tuned": [], "tuned": []}
for seed in seeds:
    compare = json.load(open(f"{folder}/compare-seed{seed}.json"))
    tuned = json.load(open(f"{folder}/tuned-seed{seed}.json"))["final"]
    for name, side in (("seed recipe", compare["baseline"]), ("hand-tuned", compare["optimized"]), ("tuned", tuned)):
        rows[name].append((side["energy_to_target_j"], side["time_to_target_s"], side["samples_per_s"], side["test_acc"]))
def spread(values, pattern):
    values = [v for v in values if v is not None]
    if not values:
        return "none reached"
    return f"{pattern % statistics.median(values)} ({pattern % min(values)}-{pattern % max(values)})"
print(f"held-out seeds {' '.join(seeds)}: median (range)")
print(f"{'recipe':<12} {'J to target':>24} {'s to target':>22} {'samples/s':>22} {'missed':>6}")
for name, values in rows.items():
    print(f"{name:<12} {spread([v[0] for v in values], '%.1f'):>24} {spread([v[1] for v in values], '%.2f'):>22} "
          f"{spread([v[2] for v in values], '%.0f'):>22} {sum(v[0] is None for v in values):>6}")
def ratio(a, b, index):
    pairs = [(x[index], y[index]) for x, y in zip(rows[a], rows[b]) if x[index] is not None and y[index] is not None]
    return [x / y for x, y in pairs]
for a, b in (("tuned", "hand-tuned"), ("tuned", "seed recipe"), ("hand-tuned", "seed recipe")):
    joules, throughput = ratio(a, b, 0), ratio(a, b, 2)
    text = f"median {statistics.median(joules):.2f} (range {min(joules):.2f}-{max(joules):.2f})" if joules else "n/a"
    print(f"{a} / {b}: joules to target {text}; throughput median {statistics.median(throughput):.2f}x")
PY
done
