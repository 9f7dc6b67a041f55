#!/usr/bin/env bash
# GPU energy check for a lent GPU machine (the `device` tool): builds ipj against the machine's CUDA LibTorch
# (the torch wheel ships TorchConfig.cmake), runs a GPU matmul loop under `ipj measure`, and compares ipj's GPU
# joules with NVML's total-energy counter read independently by nvidia-smi before and after. Goal: within 2%.
# Usage: scripts/gpu_energy_check.sh   (needs nvidia-smi, python3 with CUDA torch; no network)
set -euo pipefail
cd "$(dirname "$0")/.."
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DIPJ_WITH_CUDA=ON -DIPJ_BUILD_TESTS=OFF
cmake --build build-cuda --target ipj
./build-cuda/bin/ipj devices
energy_mj() { nvidia-smi --query-gpu=total_energy_consumption --format=csv,noheader,nounits -i 0 | tr -d ' '; }
before=$(energy_mj)
CUDA_VISIBLE_DEVICES=0 ./build-cuda/bin/ipj measure --json -- python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
end = time.time() + 20
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()' > gpu_measure.json
after=$(energy_mj)
python3 - "$before" "$after" <<'PY'
import json, sys
before, after = float(sys.argv[1]), float(sys.argv[2])
report = json.load(open("gpu_measure.json"))
gpu = [d for d in report["devices"] if d["kind"] == "gpu"][0]
reference = (after - before) / 1e3
difference = abs(gpu["energy_j"] - reference) / reference
print(f"ipj {gpu['energy_j']:.1f} J ({gpu['source']}) vs nvidia-smi {reference:.1f} J: {difference * 100:.2f}% apart")
sys.exit(0 if difference <= 0.02 else 1)
PY
