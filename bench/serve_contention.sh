#!/usr/bin/env bash
# A neighbour arriving beside a running `ipj serve` (issue 25, item 1): the default thread plan (re-planned
# while serving) against fixed plans on 2 threads and on 1 (`--threads N`), the trained mlp (GEMM-bound: the
# case where a pool waiting on a preempted thread collapses) and cnn (oneDNN). Per setting: the server starts on
# a quiet machine, a busy loop pinned to CPU 0 arrives 1 s later (or not: the quiet condition), then `ipj load`
# (binary tensors, batch 16) measures inferences/s and p99. Prints each setting and the ratio default / best
# fixed; settings alternate within each round. Exits 0.
# Usage: bench/serve_contention.sh [rounds=2] [seconds=3] [models=mlp,cnn]
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
seconds=${2:-3}
models=${3:-mlp,cnn}
ipj=${IPJ_BIN:-$PWD/build/bin/ipj}
work=$(mktemp -d)
server="" hog=""
stop() { [ -n "$hog" ] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=""
         [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=""; }
trap 'stop; rm -rf "$work"' EXIT
unset IPJ_STATIC_THREADS

for model in ${models//,/ }; do
  "$ipj" train --model "$model" --epochs 1 --limit 6000 --test-limit 500 --quiet --json --no-energy \
    --out "$work/run-$model" >/dev/null || { echo "serve_contention: training $model failed"; exit 0; }
  mkdir -p "$work/repo-$model/$model/1"
  cp "$work/run-$model/checkpoint.pt" "$work/repo-$model/$model/1/model.pt"
  echo '{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
 "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
 "dynamic_batching": {"preferred_batch_sizes": [64], "max_queue_delay_us": 1000, "max_queue_size": 1024}}' \
    > "$work/repo-$model/$model/config.json"
done

names=(default 2-threads 1-thread)
flags=("" "--threads 2" "--threads 1")
measure() {  # model flags neighbour(0/1) -> "inferences/s p99_ms plan"
  # shellcheck disable=SC2086
  "$ipj" serve --model-repo "$work/repo-$1" --port 0 --no-energy $2 >"$work/out" 2>"$work/err" &
  server=$!
  local port=""
  for _ in $(seq 1 600); do port=$(awk '{print $3}' "$work/out" 2>/dev/null | sed 's/.*://'); [ -n "$port" ] && break; sleep 0.05; done
  [ -z "$port" ] && { echo "0 0 failed-to-start"; stop; return; }
  sleep 1
  if [ "$3" = 1 ]; then taskset -c 0 bash -c 'while :; do :; done' & hog=$!; fi
  sleep 1.5  # the sampler needs two 0.5 s intervals to see it
  local result
  result=$("$ipj" load --url "http://127.0.0.1:$port" --model "$1" --concurrency 4 --batch 16 --binary \
    --duration "$seconds" --json --quiet 2>/dev/null | jq -r '.levels[0] | "\(.inferences_per_s) \(.p99_ms)"')
  local plan
  plan=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^ipj_threads\{pool="aten"\}/ {a=$2} /^ipj_threads\{pool="openblas"\}/ {b=$2} END {printf "aten=%s,blas=%s", a, b}')
  stop
  echo "${result:-0 0} $plan"
}

for neighbour in 1 0; do
  label=$([ "$neighbour" = 1 ] && echo "a busy loop on CPU 0 arrives after the start" || echo "quiet")
  printf '\n== %s ==\n%-5s %-6s %-10s %12s %9s  %s\n' "$label" model round setting inferences/s p99_ms "threads at the end"
  for model in ${models//,/ }; do
    for round in $(seq 1 "$rounds"); do
      declare -A rate=()
      order=(0 1 2); [ $((round % 2)) = 0 ] && order=(2 1 0)
      for index in "${order[@]}"; do
        read -r per_s p99 plan <<<"$(measure "$model" "${flags[$index]}" "$neighbour")"
        rate[$index]=$per_s
        printf '%-5s %-6s %-10s %12.0f %9.2f  %s\n' "$model" "$round" "${names[$index]}" "$per_s" "$p99" "$plan"
      done
      best=$(awk -v a="${rate[1]}" -v b="${rate[2]}" 'BEGIN { print (a > b ? a : b) }')
      printf '%-5s %-6s default / best fixed: %s\n' "$model" "$round" \
        "$(awk -v a="${rate[0]}" -v b="$best" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')"
    done
  done
done
exit 0
