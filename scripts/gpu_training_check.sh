#!/usr/bin/env bash
# GPU training check for a lent GPU machine (the `device` tool): builds ipj against the machine's CUDA LibTorch
# (the torch wheel ships TorchConfig.cmake) with -DIPJ_WITH_CUDA=ON, then trains the cnn on Fashion-MNIST on the GPU
# in fp32, fp16 + dynamic loss scaling, bf16 and auto, then bf16 and fp32 with the whole step as a CUDA graph
# (--compile graphs), printing samples/s, accuracy, joules and their source.
# Usage: scripts/gpu_training_check.sh   (needs python3 with CUDA torch and the Fashion-MNIST files; no network)
set -euo pipefail
cd "$(dirname "$0")/.."
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DIPJ_WITH_CUDA=ON -DIPJ_BUILD_TESTS=OFF -DIPJ_BUILD_BENCH=OFF
cmake --build build-cuda --target ipj
./build-cuda/bin/ipj devices
data="${IPJ_DATA:-/usr/share/datasets/fashion-mnist}"
for precision in fp32 "fp16 --loss-scale dynamic" bf16 auto "bf16 --compile graphs" "fp32 --compile graphs"; do
  # shellcheck disable=SC2086
  ./build-cuda/bin/ipj train --device cuda --model cnn --data "$data" --epochs 2 --batch 256 --lr 0.05 \
    --schedule cosine --precision $precision --no-save --json --quiet |
    python3 -c "import json,sys; r=json.load(sys.stdin); f=r['final']; print(r['precision']['used'],
      r['precision']['loss_scaling'], round(f['samples_per_s']), 'samples/s, acc', round(f['test_acc'], 4),
      round(f['energy_j'], 1), 'J', f['energy_source'], 'skipped steps', f['skipped_steps'], 'dropped batches', f['dropped_batches'])"
done
