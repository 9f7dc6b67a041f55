#!/usr/bin/env bash
# Training throughput of a user's TorchScript model vs the same architecture from ipj's zoo (mlp, cnn), fp32
# and bf16, alternating the two sides in each round; prints the ratio script / zoo (docs/PERFORMANCE.md).
# Usage: bench/script_vs_zoo_training.sh [IPJ_BINARY] [ROUNDS]   (run it under flock /work/.cpu.lock)
set -euo pipefail
cd "$(dirname "$0")/.."
IPJ=${1:-build/bin/ipj}
ROUNDS=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work" <<'PY'
import sys, torch
sys.path.insert(0, "tests/train/python")
from reference_step import Mlp, SmallCnn
torch.jit.script(Mlp()).save(f"{sys.argv[1]}/mlp.pt")
torch.jit.script(SmallCnn()).save(f"{sys.argv[1]}/cnn.pt")
PY
rate() { "$IPJ" train "$@" --limit 12000 --test-limit 1000 --no-save --no-energy --json --quiet |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["final"]["samples_per_s"])'; }
for round in $(seq "$ROUNDS"); do
  for model in mlp cnn; do
    for precision in fp32 bf16; do
      extra=()
      [ "$model" = cnn ] && [ "$precision" = bf16 ] && extra=(--memory-format channels_last)
      zoo=$(rate --model "$model" --precision "$precision" "${extra[@]}")
      script=$(rate --model "$work/$model.pt" --precision "$precision" "${extra[@]}")
      echo "round $round $model $precision zoo $zoo script $script ratio $(/usr/bin/python3 -c "print(round($script / $zoo, 3))")"
    done
  done
done
