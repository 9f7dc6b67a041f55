# Shared by bench/serve.sh and bench/serve_frontends.sh (sourced, not run): server cleanup, a KServe model
# repository of the trained mlp (batched and unbatched configs), and waiting for a server to answer.
# Needs: $work (a scratch folder with run/checkpoint.pt once trained); servers started must be added to pids.

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

make_repo() {  # name config
  mkdir -p "$work/$1/mlp/1"
  cp "$work/run/checkpoint.pt" "$work/$1/mlp/1/model.pt"
  echo "$2" > "$work/$1/mlp/config.json"
}

# The mlp with dynamic batching (up to 64) and without; call after training into $work/run.
make_batched_and_unbatched_repos() {
  make_repo batched '{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
 "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
 "dynamic_batching": {"preferred_batch_sizes": [16, 32, 64], "max_queue_delay_us": 2000, "max_queue_size": 1024}}'
  make_repo unbatched '{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28]}],
 "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [1, 10]}], "max_batch_size": 0}'
}

wait_ready() {  # url
  for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "server at $1 never became ready" >&2; exit 1
}
