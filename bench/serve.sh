#!/usr/bin/env bash
# Serving, side by side in one run on loopback with the same MLP (784-512-512-10): the seeds' FastAPI server
# (python3-fastapi + uvicorn + python3-torch) vs `ipj serve` with dynamic batching on and off, driven by wrk at the
# same concurrency, then `ipj load` (JSON and binary tensors). Prints throughput/p99 ratios and ipj's in-server
# overhead per request at batch 1 (request time minus model compute, from Triton-style /stats).
# Usage: bench/serve.sh [seconds_per_run=5] [concurrency=64]   (needs build/bin/ipj and the packages in
# scripts/install-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-5}"
connections="${2:-64}"
ipj=$PWD/build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
# shellcheck source=bench/lib/serve_common.sh
source bench/lib/serve_common.sh

echo "training the mlp (1 epoch) for the benchmark..." >&2
"$ipj" train --model mlp --epochs 1 --quiet --out "$work/run" --json > /dev/null
make_batched_and_unbatched_repos

# Request bodies: one 28x28 image of pixel values, the same numbers for both servers.
"$python" - "$work" <<'PY'
import json, random, sys
random.seed(3)
pixels = [round(random.random(), 4) for _ in range(784)]
kserve = {"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": pixels}]}
for name, body, path in (("ipj", kserve, "/v2/models/mlp/infer"), ("fastapi", pixels, "/predict")):
    with open(f"{sys.argv[1]}/{name}.lua", "w") as lua:
        lua.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        lua.write(f"wrk.body = {json.dumps(json.dumps(body))}\nwrk.path = \"{path}\"\n")
PY

run_wrk() {  # label port lua connections -> "label rps p99_ms"
  local out; out=$(wrk -t1 -c"$4" -d"${seconds}s" --latency -s "$work/$3.lua" "http://127.0.0.1:$2" 2>&1)
  "$python" - "$1" "$out" <<'PY'
import re, sys
label, out = sys.argv[1], sys.argv[2]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
def ms(text):
    found = re.match(r"([\d.]+)(us|ms|s|m)", text)
    if not found:
        sys.exit(f"cannot read a latency from {text!r} in wrk's output:\n{out}")
    value, unit = found.groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{label} {rps:.1f} {p50:.3f} {p99:.3f} {errors.group(1) if errors else 0}")
PY
}

GLOG_minloglevel=2 "$python" bench/python/seed_inference_server.py --port 18200 & pids+=($!)
# All load comes from one address (127.0.0.1): lift the per-client bound (--max-connections / 8).
"$ipj" serve --model-repo "$work/batched" --port 18201 --max-connections-per-client 1024 > /dev/null 2>&1 & pids+=($!)
"$ipj" serve --model-repo "$work/unbatched" --port 18202 --max-connections-per-client 1024 > /dev/null 2>&1 & pids+=($!)
wait_ready http://127.0.0.1:18200/docs
wait_ready http://127.0.0.1:18201/v2/health/ready
wait_ready http://127.0.0.1:18202/v2/health/ready

results="$work/results.txt"
run_wrk "seed-fastapi(c$connections)" 18200 fastapi "$connections" >> "$results"
run_wrk "ipj-batched(c$connections)" 18201 ipj "$connections" >> "$results"
run_wrk "ipj-unbatched(c$connections)" 18202 ipj "$connections" >> "$results"
run_wrk "seed-fastapi(c1)" 18200 fastapi 1 >> "$results"
run_wrk "ipj-batched(c1)" 18201 ipj 1 >> "$results"
curl -s http://127.0.0.1:18202/v2/models/mlp/stats > "$work/stats_before.json"
run_wrk "ipj-unbatched(c1)" 18202 ipj 1 >> "$results"
curl -s http://127.0.0.1:18202/v2/models/mlp/stats > "$work/stats_after.json"

echo "wrk -t1 -d${seconds}s, same MLP, same image:"
printf '%-24s %10s %9s %9s %7s\n' server req/s p50_ms p99_ms non2xx
while read -r label rps p50 p99 errors; do printf '%-24s %10s %9s %9s %7s\n' "$label" "$rps" "$p50" "$p99" "$errors"; done < "$results"
"$python" - "$results" "$work/stats_before.json" "$work/stats_after.json" "$connections" <<'PY'
import json, sys
rows = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in open(sys.argv[1])}
c = sys.argv[4]
fast, batched, unbatched = rows[f"seed-fastapi(c{c})"], rows[f"ipj-batched(c{c})"], rows[f"ipj-unbatched(c{c})"]
print()
print(f"ipj batched vs seed FastAPI at c{c}: {batched[0] / fast[0]:.1f}x throughput, p99 {batched[2]:.2f} vs {fast[2]:.2f} ms (goal >= 10x at equal or better p99)")
print(f"ipj batching on vs off at c{c}: {batched[0] / unbatched[0]:.2f}x throughput (goal >= 4x)")
before, after = (json.load(open(p))["model_stats"][0]["inference_stats"] for p in sys.argv[2:4])
count = after["success"]["count"] - before["success"]["count"]
request_ns = after["success"]["ns"] - before["success"]["ns"]
compute_ns = after["compute_infer"]["ns"] - before["compute_infer"]["ns"]
print(f"ipj in-server overhead at batch 1 (unbatched, c1, JSON body of 784 floats): "
      f"{(request_ns - compute_ns) / count / 1000:.1f} us per request (request {request_ns / count / 1000:.1f} us - "
      f"compute {compute_ns / count / 1000:.1f} us; goal < 30 us)")
PY

echo
echo "ipj load (closed loop, same servers):"
"$ipj" load --url http://127.0.0.1:18201 --model mlp --concurrency 1,"$connections" --duration "$seconds" --quiet
"$ipj" load --url http://127.0.0.1:18201 --model mlp --concurrency "$connections" --duration "$seconds" --binary --quiet
