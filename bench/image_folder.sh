#!/usr/bin/env bash
# Image folders vs IDX: the full Fashion-MNIST as a PNG folder (scripts/make_image_folder.py) read by ipj
# (load = listing + header scan + parallel decode into memory; epoch = one shuffled epoch of batches, cached or
# decoded per batch), the IDX files through the same loader, and torchvision's ImageFolder + DataLoader with
# num_workers 0/1/2/4; then `ipj train` end to end on each (mlp, fp32, batch 128). Alternates the sides in each
# round; prints JSON lines and a summary. Run it alone (flock /work/.cpu.lock) on a quiet machine.
# Usage: bench/image_folder.sh [rounds=2] [folder=/tmp/ipj-fashion-png]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
folder="${2:-/tmp/ipj-fashion-png}"
idx=/usr/share/datasets/fashion-mnist
python=/usr/bin/python3
ipj=./build/bin/ipj
decode=./build/bin/ipj_bench_image_folder
[[ -d "$folder" ]] || "$python" scripts/make_image_folder.py --data "$idx" --out "$folder"
echo "# $(nproc) cores; folder $folder ($(find "$folder" -name '*.png' | wc -l) PNG files, $(du -sh "$folder" | cut -f1))"

train_wall() {  # prints {"wall_s": process seconds, "samples_per_s": training samples/s, "test_acc": ...}
  local start end report
  start=$(date +%s.%N)
  report=$("$ipj" train --model mlp --epochs "$1" --no-save --json --quiet --seed 1 "${@:2}")
  end=$(date +%s.%N)
  echo "$report" | "$python" -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'wall_s': round($end-$start, 3), \
'samples_per_s': round(r['final']['samples_per_s']), 'test_acc': r['final']['test_acc'], 'storage': r['dataset'].get('storage', 'memory')}))"
}

for round in $(seq "$rounds"); do
  echo "## round $round: loader"
  for threads in 1 2; do
    "$decode" "$folder" cache "$threads"
    "$decode" "$folder" stream "$threads"
    "$decode" "$folder" stream "$threads" 1 given-normalization
  done
  "$decode" "$idx" cache 1
  for workers in 0 1 2 4; do
    "$python" bench/python/torchvision_image_folder.py "$folder" "$workers"
  done
  echo "## round $round: ipj train --model mlp end to end"
  for epochs in 1 3; do
    echo "{\"epochs\": $epochs, \"data\": \"png cached\", \"result\": $(train_wall "$epochs" --data "$folder")}"
    echo "{\"epochs\": $epochs, \"data\": \"png streamed\", \"result\": $(train_wall "$epochs" --data "$folder" --image-cache-mb 0)}"
    echo "{\"epochs\": $epochs, \"data\": \"png streamed, 1 decode thread\", \"result\": $(train_wall "$epochs" --data "$folder" --image-cache-mb 0 --decode-threads 1)}"
    echo "{\"epochs\": $epochs, \"data\": \"idx\", \"result\": $(train_wall "$epochs" --data "$idx")}"
  done
done
