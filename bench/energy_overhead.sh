#!/usr/bin/env bash
# Energy monitoring overhead: window-edge cost and sampler CPU share (Google Benchmark), then the same MLP training
# run with and without the monitor, alternating, in one run. Goal: < 1% slower with the monitor.
# Usage: bench/energy_overhead.sh [rounds=3]   (needs build/: bash scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
./build/bin/ipj_bench_energy_overhead --benchmark_min_time=0.5
python=/usr/bin/python3
field() { "$python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }
train() { ./build/bin/ipj train --model mlp --limit 30000 --test-limit 2000 --epochs 1 --no-save --json --quiet "$@" |
          field "['final']['samples_per_s']"; }
printf '%-6s %14s %14s %8s\n' round with/s without/s ratio
with_all=(); without_all=()
for round in $(seq "$rounds"); do
  with=$(train); without=$(train --no-energy)
  with_all+=("$with"); without_all+=("$without")
  printf '%-6s %14.0f %14.0f %7.3fx\n' "$round" "$with" "$without" "$("$python" -c "print($with/$without)")"
done
"$python" - "${with_all[*]}" "${without_all[*]}" <<'PY'
import statistics, sys
with_monitor = [float(v) for v in sys.argv[1].split()]
without = [float(v) for v in sys.argv[2].split()]
# Median of the per-round ratios: each round runs both sides back to back, sharing the machine's noise.
ratio = statistics.median(w / wo for w, wo in zip(with_monitor, without))
print(f"median of per-round ratios {ratio:.3f}x ({(1 - ratio) * 100:+.1f}% slower with the monitor)")
PY
