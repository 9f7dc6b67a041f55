#!/usr/bin/env bash
# Threads that survive neighbours (issue 25): ipj's default thread plan against the best of {python plan,
# 1 thread, 2 threads}, for training and inference (batch 1 and 64), with a CPU hog pinned to CPU 0 beside it,
# on the quiet machine, and under a cgroup CPU quota of 1 CPU where this user may make one (root with a writable
# cgroup v1 cpu controller or cgroup v2 with cpu delegated). Prints samples/s per setting and the ratio default /
# best other; exits 0.
# Short runs (one epoch on a subset, 0.5 s bench windows), `rounds` of them per setting in a rotating order,
# the median of each compared (min-max shown): one run is a smoke figure, +-20% apart on a 2-vCPU VM.
# Usage: [IPJ_CONTENTION_MODEL=cnn] [IPJ_CONTENTION_LIMIT=4000 (mlp: 20000)] bench/contention.sh [rounds=3]
set -uo pipefail
cd "$(dirname "$0")/.."
ipj=${IPJ_BIN:-./build/bin/ipj}
model=${IPJ_CONTENTION_MODEL:-cnn}
# One epoch long enough to time: the mlp runs 4,000 samples in ~0.1 s, where start-up and the OS's scheduling
# decide the figure (12-07: 0.71x on 4,000 samples where 20,000 read 0.91-1.05x), so it gets 20,000.
case "$model" in mlp) default_limit=20000 ;; *) default_limit=4000 ;; esac
limit=${IPJ_CONTENTION_LIMIT:-$default_limit}
rounds=${1:-3}
case "$rounds" in '' | *[!0-9]* | 0) echo "contention: rounds must be a whole number >= 1, got '$rounds'" >&2; exit 2 ;; esac
work=$(mktemp -d)
hog=""
stop_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=""; }
quota_group=""   # a cgroup folder with a quota of 1 CPU, while the quota condition runs
launch=()        # what ipj's runs start under: nothing, or joining quota_group first
remove_quota_group() { [ -n "$quota_group" ] && rmdir "$quota_group" 2>/dev/null; quota_group=""; launch=(); }
trap 'stop_hog; remove_quota_group; rm -rf "$work"' EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }

# The settings: name and ipj flags. "default" is what a user gets without flags.
names=(default python 1-thread 2-threads)
flags=("" "--thread-plan python" "--threads 1" "--threads 2")

"$ipj" train --model "$model" --epochs 1 --limit "$limit" --test-limit 500 --quiet --json --no-energy \
  --out "$work/model" >/dev/null || { echo "contention: training the model to bench failed"; exit 0; }

train_rate() {  # flags -> training samples/s
  # shellcheck disable=SC2086
  "${launch[@]}" "$ipj" train --model "$model" --epochs 1 --limit "$limit" --test-limit 200 --no-save --quiet --json \
    --no-energy $1 2>/dev/null | jq -r '.final.samples_per_s // 0'
}
bench_rate() {  # flags batch -> inferences/s of the fp32 variant
  # shellcheck disable=SC2086
  "${launch[@]}" "$ipj" bench --model "$work/model" --variants fp32 --batch "$2" --window-s 0.5 --warmup-s 0.2 --max-windows 3 \
    --no-accuracy --no-energy --json $1 2>/dev/null | jq -r '.rows[0].throughput_per_s // 0'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
spread() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo, hi }'; }

run_condition() {  # label: `rounds` rounds, the settings' order rotated each round; medians compared
  printf '\n== %s ==\n' "$1"
  declare -A runs=()  # "setting measure" -> the rounds' values, space-separated
  local round i k n=${#names[@]} note=""
  for ((round = 0; round < rounds; ++round)); do
    for ((k = 0; k < n; ++k)); do
      i=$(((k + round) % n))
      runs["$i train"]+=" $(train_rate "${flags[$i]}")"
      runs["$i b1"]+=" $(bench_rate "${flags[$i]}" 1)"
      runs["$i b64"]+=" $(bench_rate "${flags[$i]}" 64)"
    done
  done
  note=$("${launch[@]}" "$ipj" train --model "$model" --epochs 1 --limit 256 --test-limit 64 --no-save --quiet --json \
           --no-energy 2>/dev/null | jq -r '"\(.threads.torch)/\(.threads.blas) threads: \(.threads.reason)"')
  printf '%-10s %22s %22s %22s\n' setting "train/s (min-max)" "infer-b1/s" "infer-b64/s"
  declare -A best=([train]=0 [b1]=0 [b64]=0) mine=()
  for ((i = 0; i < n; ++i)); do
    local cells=()
    for k in train b1 b64; do
      local m
      m=$(median <<<"${runs[$i $k]}")
      cells+=("$(printf '%.0f (%s)' "$m" "$(spread <<<"${runs[$i $k]}")")")
      if [ "$i" = 0 ]; then mine[$k]=$m; else best[$k]=$(max "${best[$k]}" "$m"); fi
    done
    printf '%-10s %22s %22s %22s\n' "${names[$i]}" "${cells[@]}"
  done
  echo "default plan: ${note:0:160}"
  printf 'default / best other: training %sx, inference batch 1 %sx, batch 64 %sx (medians of %s rounds)\n' \
    "$(ratio "${mine[train]}" "${best[train]}")" "$(ratio "${mine[b1]}" "${best[b1]}")" \
    "$(ratio "${mine[b64]}" "${best[b64]}")" "$rounds"
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
# A cgroup with a quota of 1 CPU (100 ms per 100 ms period), v1's cpu controller or v2's cpu.max; ipj's runs
# join it (launch) and read the quota from /proc/self/cgroup. Fails quietly where this user may not make one.
make_quota_group() {
  local v1 v2=/sys/fs/cgroup
  for v1 in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    if [ ! -w "$v1" ] || [ ! -f "$v1/cpu.cfs_quota_us" ]; then continue; fi
    quota_group="$v1/ipj-contention-$$"
    mkdir "$quota_group" 2>/dev/null && echo 100000 >"$quota_group/cpu.cfs_period_us" &&
      echo 100000 >"$quota_group/cpu.cfs_quota_us" && return 0
    remove_quota_group
  done
  if grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null && [ -w "$v2" ]; then
    quota_group="$v2/ipj-contention-$$"
    { grep -qw cpu "$v2/cgroup.subtree_control" || echo +cpu >"$v2/cgroup.subtree_control"; } 2>/dev/null &&
      mkdir "$quota_group" 2>/dev/null && echo "100000 100000" >"$quota_group/cpu.max" && return 0
    remove_quota_group
  fi
  return 1
}
if make_quota_group; then
  # shellcheck disable=SC2016
  launch=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$quota_group")
  run_condition "under a cgroup CPU quota of 1 CPU ($quota_group)"
  remove_quota_group
else
  echo "(cgroup CPU quota of 1: no cgroup could be made here; run this script as root where the cpu controller is"
  echo " writable, or under 'systemd-run --scope -p CPUQuota=100%' / 'docker run --cpus 1')"
fi
exit 0
