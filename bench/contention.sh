#!/usr/bin/env bash
# Threads that survive neighbours (issue 25): ipj's default thread plan against the best of {python plan,
# 1 thread, 2 threads}, for training and inference (batch 1 and 64), with a CPU hog pinned to CPU 0 beside it
# and on the quiet machine. Prints samples/s per setting and the ratio default / best other; exits 0.
# Short by default (one epoch on a subset, 0.5 s bench windows): a smoke figure, noisy on shared machines.
# Usage: [IPJ_CONTENTION_MODEL=cnn] [IPJ_CONTENTION_LIMIT=4000] bench/contention.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ipj=${IPJ_BIN:-./build/bin/ipj}
model=${IPJ_CONTENTION_MODEL:-cnn}
limit=${IPJ_CONTENTION_LIMIT:-4000}
work=$(mktemp -d)
hog=""
stop_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=""; }
trap 'stop_hog; rm -rf "$work"' EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }

# The settings: name and ipj flags. "default" is what a user gets without flags.
names=(default python 1-thread 2-threads)
flags=("" "--thread-plan python" "--threads 1" "--threads 2")

"$ipj" train --model "$model" --epochs 1 --limit "$limit" --test-limit 500 --quiet --json --no-energy \
  --out "$work/model" >/dev/null || { echo "contention: training the model to bench failed"; exit 0; }

train_rate() {  # flags -> training samples/s
  # shellcheck disable=SC2086
  "$ipj" train --model "$model" --epochs 1 --limit "$limit" --test-limit 200 --no-save --quiet --json \
    --no-energy $1 2>/dev/null | jq -r '.final.samples_per_s // 0'
}
bench_rate() {  # flags batch -> inferences/s of the fp32 variant
  # shellcheck disable=SC2086
  "$ipj" bench --model "$work/model" --variants fp32 --batch "$2" --window-s 0.5 --warmup-s 0.2 --max-windows 3 \
    --no-accuracy --no-energy --json $1 2>/dev/null | jq -r '.rows[0].throughput_per_s // 0'
}

run_condition() {  # label
  printf '\n== %s ==\n' "$1"
  printf '%-10s %14s %14s %14s  %s\n' setting train/s infer-b1/s infer-b64/s "plan (default)"
  declare -A best=([train]=0 [b1]=0 [b64]=0)
  declare -A mine=()
  for i in "${!names[@]}"; do
    t=$(train_rate "${flags[$i]}"); b1=$(bench_rate "${flags[$i]}" 1); b64=$(bench_rate "${flags[$i]}" 64)
    note=""
    if [ "$i" = 0 ]; then
      mine=([train]=$t [b1]=$b1 [b64]=$b64)
      note=$("$ipj" train --model "$model" --epochs 1 --limit 256 --test-limit 64 --no-save --quiet --json \
               --no-energy 2>/dev/null | jq -r '"\(.threads.torch)/\(.threads.blas) threads: \(.threads.reason)"')
    else
      best[train]=$(max "${best[train]}" "$t"); best[b1]=$(max "${best[b1]}" "$b1"); best[b64]=$(max "${best[b64]}" "$b64")
    fi
    printf '%-10s %14.0f %14.0f %14.0f  %s\n' "${names[$i]}" "$t" "$b1" "$b64" "${note:0:110}"
  done
  printf 'default / best other: training %sx, inference batch 1 %sx, batch 64 %sx\n' \
    "$(ratio "${mine[train]}" "${best[train]}")" "$(ratio "${mine[b1]}" "${best[b1]}")" \
    "$(ratio "${mine[b64]}" "${best[b64]}")"
}

echo "model $model, $limit training samples, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$(nproc) CPU(s) here"
taskset -c 0 sh -c 'while :; do :; done' &
hog=$!
sleep 0.5
run_condition "with a CPU hog pinned to CPU 0"
stop_hog
sleep 1
run_condition "quiet (as quiet as this machine is)"
echo "(cgroup CPU quota of 1: not tried here; run this script under 'systemd-run --scope -p CPUQuota=100%' or"
echo " 'docker run --cpus 1' where the machine allows)"
exit 0
