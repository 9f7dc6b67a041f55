#!/usr/bin/env bash
# fp32 batch 1 beside a neighbour (issue 25, items 1 and 3): ipj bench's default (batch 1 on XNNPACK's pool for
# back-to-back calls where that won at load, raced against the calling thread) against `--threads 1` (the
# calling thread only), with a busy loop pinned to CPU 0 from the start ("hog from start": the load sees it) or
# arriving 3 s in, after the load ("hog after load": the race has to notice), or none ("quiet"). Settings
# alternate within each round; prints p50 / p99 / mean ms, CPU ms per call and the pool's load-time choice,
# then mean ratios default / --threads 1. Exits 0.
# Usage: bench/batch1_neighbour.sh [rounds=2] [model.pt] [C,H,W] [mean] [std]   (default: torchvision's
# ResNet-18 with a 1-channel stem from tests/quant/make_graph_models.py, 1x28x28)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
ipj=${IPJ_BIN:-$PWD/build/bin/ipj}
work=$(mktemp -d)
hog=""
stop_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=""; }
trap 'stop_hog; rm -rf "$work"' EXIT
export GLOG_minloglevel=2
if [ $# -ge 2 ]; then
  model=$2 shape=${3:-1,28,28} mean=${4:-0} std=${5:-1}
else
  /usr/bin/python3 tests/quant/make_graph_models.py "$work" >/dev/null
  model=$work/resnet18_scripted.pt shape=1,28,28 mean=0.286 std=0.353
fi
printf '%-5s %-15s %-12s %8s %8s %8s %8s %-28s %s\n' round condition setting p50_ms p99_ms mean_ms cpu_ms \
  pool "race switches"
declare -A means
for round in $(seq 1 "$rounds"); do
  for condition in quiet "hog from start" "hog after load"; do
    for setting in default "--threads 1"; do
      flags=()
      [ "$setting" = default ] || flags=(--threads 1)
      case "$condition" in
        "hog from start") taskset -c 0 bash -c 'while :; do :; done' & hog=$!; sleep 0.5 ;;
        "hog after load") (sleep 3; exec taskset -c 0 bash -c 'while :; do :; done') & hog=$! ;;
      esac
      out=$(timeout 120 "$ipj" bench --model "$model" --input-shape "$shape" --mean "$mean" --std "$std" \
            --variants fp32 --batch 1 --window-s 2 --warmup-s 0.5 --max-windows 4 --no-accuracy --no-energy \
            "${flags[@]}" --json 2>"$work/log")
      stop_hog
      pkill -f "taskset -c 0 bash -c while" 2>/dev/null
      switches=$(grep -c "now runs it" "$work/log")
      line=$(/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1]); r = d["rows"][0]; e = d["variants"][0]["fp32_engine"]
pool = "on %d threads" % e["batch1_pool_threads"] if e["batch1_pool_threads"] else (
    "kept out" if e["batch1_pool_ms"] else "not timed")
pool += " (%.2fx CPU)" % e["batch1_pool_cpu_ratio"] if e["batch1_pool_cpu_ratio"] else ""
print("%.3f %.3f %.3f %.3f" % (r["p50_ms"], r["p99_ms"], r["mean_ms"], r["cpu_ms_per_call"]), pool)
' "$out" 2>/dev/null) || line="- - - - (bench failed: $(tail -1 "$work/log"))"
      read -r p50 p99 mean_ms cpu pool <<<"$line"
      printf '%-5s %-15s %-12s %8s %8s %8s %8s %-28s %s\n' "$round" "$condition" "$setting" "$p50" "$p99" \
        "$mean_ms" "$cpu" "$pool" "$switches"
      means["$condition|$setting"]+="$mean_ms "
    done
  done
done
for condition in quiet "hog from start" "hog after load"; do
  /usr/bin/python3 -c '
import sys
def avg(text):
    values = [float(v) for v in text.split() if v != "-"]
    return sum(values) / len(values) if values else float("nan")
ours, one = avg(sys.argv[2]), avg(sys.argv[3])
print("%s: mean latency --threads 1 / default %.2fx (above 1: the default is faster)" % (sys.argv[1], one / ours))
' "$condition" "${means["$condition|default"]}" "${means["$condition|--threads 1"]}"
done
exit 0
