#!/usr/bin/env bash
# Build time of a clean clone with ccache off (issue 23): the `ipj` target alone (what scripts/demo.sh builds),
# then every other target (what scripts/test.sh adds). Prints ipj_target_s and all_targets_s (clean -> everything).
# Usage: bash bench/build_time.sh [--reference]   --reference: also without unity batches (-DIPJ_UNITY=OFF)
#        and prints the ratios. Uses the committed HEAD (a clean clone), not the working tree.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/ipj-build-time.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export CCACHE_DISABLE=1

# Builds one clean clone with the given cmake options; sets ipj_s and all_s (seconds).
measure() {
  local dir="$work/clone-$1"
  shift
  git clone -q "$repo" "$dir"
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPJ_WERROR=ON -DIPJ_BUILD_TESTS=ON -DIPJ_BUILD_BENCH=ON "$@" >/dev/null
  local start=$(date +%s.%N)
  cmake --build "$dir/build" --target ipj >/dev/null
  local mid=$(date +%s.%N)
  cmake --build "$dir/build" >/dev/null
  local end=$(date +%s.%N)
  ipj_s=$(awk "BEGIN{print $mid - $start}")
  all_s=$(awk "BEGIN{print $end - $start}")
  rm -rf "$dir"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git -C "$repo" rev-parse --short HEAD)"
measure unity
printf 'ipj_target_s=%.0f\nall_targets_s=%.0f\n' "$ipj_s" "$all_s"
if [ "${1:-}" = "--reference" ]; then
  unity_ipj=$ipj_s unity_all=$all_s
  measure separate -DIPJ_UNITY=OFF
  printf 'reference (one object per source, no unity batches): ipj_target_s=%.0f all_targets_s=%.0f\n' "$ipj_s" "$all_s"
  printf 'ratio separate/unity: ipj_target %.2fx, all_targets %.2fx\n' "$(awk "BEGIN{print $ipj_s / $unity_ipj}")" \
    "$(awk "BEGIN{print $all_s / $unity_all}")"
fi
