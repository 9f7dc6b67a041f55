#!/usr/bin/env bash
# Two `ipj serve` front ends side by side in one run, same MLP (784-512-512-10), same config, same request body:
# a baseline binary (e.g. the cpp-httplib front end, built from an older commit) against build/bin/ipj (Beast).
# wrk at each concurrency, the two servers alternating at each level, then the batching gain (dynamic batching
# on vs off) and the in-server overhead at batch 1 (request time minus model compute, from /stats) of each.
# Usage: bench/serve_frontends.sh BASELINE_IPJ [seconds_per_run=5] [concurrency list=1,16,64,256]
set -euo pipefail
cd "$(dirname "$0")/.."
baseline="${1:?usage: bench/serve_frontends.sh BASELINE_IPJ [seconds] [concurrency list]}"
seconds="${2:-5}"
levels="${3:-1,16,64,256}"
ipj=$PWD/build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
# shellcheck source=bench/lib/serve_common.sh
source bench/lib/serve_common.sh

"$ipj" train --model mlp --epochs 1 --limit 2000 --quiet --out "$work/run" --json > /dev/null
make_batched_and_unbatched_repos
"$python" - "$work" <<'PY'
import json, random, sys
random.seed(3)
pixels = [round(random.random(), 4) for _ in range(784)]
body = {"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": pixels}]}
with open(f"{sys.argv[1]}/ipj.lua", "w") as lua:
    lua.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
    lua.write(f"wrk.body = {json.dumps(json.dumps(body))}\nwrk.path = \"/v2/models/mlp/infer\"\n")
PY

run_wrk() {  # label port connections
  local out; out=$(wrk -t1 -c"$3" -d"${seconds}s" --latency -s "$work/ipj.lua" "http://127.0.0.1:$2" 2>&1)
  "$python" - "$1" "$3" "$out" <<'PY'
import re, sys
label, connections, out = sys.argv[1:4]
def ms(text):
    value, unit = re.match(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
socket_errors = sum(int(x) for x in errors.groups()) if errors else 0
print(f"{label} {connections} {rps:.1f} {p50:.3f} {p99:.3f} {bad.group(1) if bad else 0} {socket_errors}")
PY
}
overhead() {  # label port -> in-server us per request at c1 (request - compute, from /stats deltas)
  curl -s "http://127.0.0.1:$2/v2/models/mlp/stats" > "$work/before.json"
  run_wrk "$1" "$2" 1 > /dev/null
  curl -s "http://127.0.0.1:$2/v2/models/mlp/stats" > "$work/after.json"
  "$python" - "$1" "$work/before.json" "$work/after.json" <<'PY'
import json, sys
before, after = (json.load(open(p))["model_stats"][0]["inference_stats"] for p in sys.argv[2:4])
count = after["success"]["count"] - before["success"]["count"]
request = (after["success"]["ns"] - before["success"]["ns"]) / count / 1000
compute = (after["compute_infer"]["ns"] - before["compute_infer"]["ns"]) / count / 1000
print(f"{sys.argv[1]}: {request - compute:.1f} us in-server overhead per request (request {request:.1f} - compute {compute:.1f} us)")
PY
}

"$baseline" serve --model-repo "$work/batched" --port 18301 > /dev/null 2>&1 & pids+=($!)
# All load comes from one address (127.0.0.1): lift the per-client bound (--max-connections / 8).
"$ipj" serve --model-repo "$work/batched" --port 18302 --max-connections-per-client 1024 > /dev/null 2>&1 & pids+=($!)
"$baseline" serve --model-repo "$work/unbatched" --port 18303 > /dev/null 2>&1 & pids+=($!)
"$ipj" serve --model-repo "$work/unbatched" --port 18304 --max-connections-per-client 1024 > /dev/null 2>&1 & pids+=($!)
for port in 18301 18302 18303 18304; do wait_ready "http://127.0.0.1:$port/v2/health/ready"; done

results="$work/results.txt"
for connections in ${levels//,/ }; do
  run_wrk baseline-batched 18301 "$connections" >> "$results"
  run_wrk beast-batched 18302 "$connections" >> "$results"
done
run_wrk baseline-unbatched 18303 64 >> "$results"
run_wrk beast-unbatched 18304 64 >> "$results"
run_wrk baseline-batched 18301 64 >> "$results"
run_wrk beast-batched 18302 64 >> "$results"

echo "wrk -t1 -d${seconds}s, same MLP and JSON body (784 floats); servers alternate at each level:"
printf '%-20s %5s %10s %9s %9s %7s %7s\n' server conns req/s p50_ms p99_ms non2xx sockerr
while read -r label connections rps p50 p99 bad errors; do
  printf '%-20s %5s %10s %9s %9s %7s %7s\n' "$label" "$connections" "$rps" "$p50" "$p99" "$bad" "$errors"
done < "$results"
"$python" - "$results" <<'PY'
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, connections, rps = line.split()[:3]
    rows[(label, int(connections))].append(float(rps))
def best(label, connections): return max(rows[(label, connections)])
print()
for side in ("baseline", "beast"):
    print(f"{side}: batching gain at c64 = {best(side + '-batched', 64) / best(side + '-unbatched', 64):.2f}x (goal >= 4x)")
for (label, connections), values in sorted(rows.items()):
    if label == "beast-batched" and ("baseline-batched", connections) in rows:
        print(f"beast / baseline throughput at c{connections}: {max(values) / best('baseline-batched', connections):.2f}x")
PY
echo
overhead baseline-unbatched 18303
overhead beast-unbatched 18304
overhead baseline-unbatched 18303
overhead beast-unbatched 18304
