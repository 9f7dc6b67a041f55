#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (the `device` tool's CUDA image: nvcc, python3 with a CUDA torch
# 2.x, no Debian -dev packages, no network): builds `ipj` against that LibTorch with -DIPJ_WITH_CUDA=${IPJ_GPU_CUDA:-ON} and runs
# every GPU path once (devices, NVML energy vs nvidia-smi, cnn training fp32/fp16/bf16/CUDA graphs, NCCL), plus
# the CPU path on LibTorch 2.x. Never changes clocks, power limits or modes.
# Prepare here first (Debian 12): bash scripts/gpu_lent_check.sh --prepare   (downloads the .debs into .gpu/,
# copies Fashion-MNIST; .gpu/ is git-ignored through .git/info/exclude), then run on the device with carry .gpu:
#   bash scripts/gpu_lent_check.sh      (results under $OUT, or /tmp/gpu-out)
set -uo pipefail
cd "$(dirname "$0")/.."

debian_packages=(nlohmann-json3-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libprotobuf-dev
  libprotobuf32 libprotobuf-lite32 libonnx-dev libonnx1 libcpuinfo-dev libcpuinfo0 libxxhash-dev libxxhash0
  libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo libcpp-httplib-dev libcpp-httplib0.11
  libboost1.74-dev pkgconf pkgconf-bin libpkgconf3 zlib1g-dev zlib1g libbrotli1
  libgloo-dev libonnxifi libbrotli-dev)

if [[ "${1:-}" == "--prepare" ]]; then
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  mkdir -p .gpu/debs .gpu/data
  (cd .gpu/debs && apt-get download "${debian_packages[@]}")
  cp /usr/share/datasets/fashion-mnist/*.gz .gpu/data/
  du -sh .gpu
  exit 0
fi

final_out=${OUT:-/tmp/gpu-out}
out=/tmp/gpu-check  # many small files: packed into $final_out/results.tgz at the end (few files come back)
mkdir -p "$out" "$final_out"
trap 'tar czf "$final_out/results.tgz" -C "$out" . 2>/dev/null' EXIT
deps=${IPJ_GPU_DEPS:-/opt/ipjdeps}
lib=$deps/usr/lib/x86_64-linux-gnu
start=$(date +%s)
elapsed() { echo "[$(($(date +%s) - start)) s] $*"; }

# 1. Debian's build dependencies, unpacked beside the system (never over /).
for deb in .gpu/debs/*.deb; do dpkg -x "$deb" "$deps"; done
torch_prefix=${IPJ_GPU_TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
torch_dir=${IPJ_GPU_TORCH_DIR:-$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')}
# LibTorch's own gloo headers, where the wheel ships them, must win over Debian's.
[[ -d "$torch_dir/include/gloo" ]] && rm -rf "$deps/usr/include/gloo"
sed -i '/^Requires.private/d' "$lib/pkgconfig/cpp-httplib.pc"
mkdir -p "$deps/bin"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s PKG_CONFIG_LIBDIR=%s/pkgconfig PKG_CONFIG_SYSROOT_DIR=%s exec %s/usr/bin/pkgconf "$@"\n' \
  "$lib" "$lib" "$deps" "$deps" >"$deps/bin/pkg-config"
chmod +x "$deps/bin/pkg-config"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  g++ --version | head -1
  nproc
} >"$out/machine.txt" 2>&1
elapsed "dependencies unpacked"

# 2. Build: RPATH (not RUNPATH) so that the libraries' own Debian dependencies resolve from $lib too.
cmake -S . -B "${IPJ_GPU_BUILD_DIR:-build-cuda}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
  -DPKG_CONFIG_EXECUTABLE="$deps/bin/pkg-config" -DIPJ_WITH_CUDA=${IPJ_GPU_CUDA:-ON} -DIPJ_BUILD_TESTS=OFF -DIPJ_BUILD_BENCH=OFF \
  -DIPJ_UNITY="${IPJ_GPU_UNITY:-ON}" -DIPJ_UNITY_BATCH_SIZE=3 \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath,$lib -Wl,-rpath-link,$lib" >"$out/configure.log" 2>&1 ||
  { elapsed "configure failed"; tail -40 "$out/configure.log"; exit 1; }
elapsed "configured"
[[ "${IPJ_GPU_CONFIGURE_ONLY:-0}" == 1 ]] && exit 0
if ! timeout "${IPJ_GPU_BUILD_S:-330}" cmake --build build-cuda --target ipj -j "$(nproc)" -- -k 0 >"$out/build.log" 2>&1; then
  grep -E 'error|Error' "$out/build.log" | grep -v '^\[' | head -80 >"$out/errors.txt"
  elapsed "build failed: $(grep -c 'error:' "$out/build.log") errors"
  head -60 "$out/errors.txt"
  exit 1
fi
elapsed "built"
ipj=./build-cuda/bin/ipj
data=.gpu/data

# 3. What ipj sees.
$ipj devices --json >"$out/devices.json" 2>"$out/devices.err" || cat "$out/devices.err"
python3 - "$out/devices.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("cuda:", json.dumps(d.get("cuda"))[:400])
print("energy meters:", json.dumps(d.get("energy_meters"))[:600])
PY
elapsed "devices"

# 4. NVML energy through ipj measure vs nvidia-smi's power readings (100 ms) integrated around it.
nvidia-smi --query-gpu=timestamp,power.draw --format=csv,noheader,nounits -i 0 -lms 100 >"$out/power.csv" &
sampler=$!
sleep 1
CUDA_VISIBLE_DEVICES=0 timeout 60 $ipj measure --json -- python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
end = time.time() + 12
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()' >"$out/measure.json" 2>"$out/measure.err"
sleep 1
kill $sampler
python3 - "$out/power.csv" "$out/measure.json" <<'PY' || cat "$out/measure.err"
import datetime, json, sys
rows = []
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    try:
        rows.append((datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(parts[1])))
    except (ValueError, IndexError):
        pass
report = json.load(open(sys.argv[2]))
start, end = rows[0][0], rows[-1][0]
reference = sum((t1 - t0) * p0 for (t0, p0), (t1, _) in zip(rows, rows[1:]))
idle = min(p for _, p in rows)
print(f"nvidia-smi: {len(rows)} samples over {end - start:.1f} s, {reference:.1f} J, min {idle:.0f} W, max {max(p for _, p in rows):.0f} W")
for gpu in [d for d in report["devices"] if d["kind"] == "gpu"]:
    outside = (end - start - report["wall_s"]) * idle  # the sampler runs ~2 s longer than ipj's window, near idle
    print(f"energy: ipj {gpu['energy_j']:.1f} J ({gpu['source']}) over {report['wall_s']:.2f} s vs nvidia-smi"
          f" {reference:.1f} J - ~{outside:.0f} J outside ipj's window = {reference - outside:.1f} J:"
          f" {abs(gpu['energy_j'] - (reference - outside)) / (reference - outside) * 100:.2f}% apart")
print("energy: wall", report.get("wall_s"), "s; total", report.get("energy_j"), "J")
PY
elapsed "energy"

# 5. Training on the GPU: one epoch of the cnn per precision / step form.
summary() {
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); f=r['final']; p=r['precision'];
print(sys.argv[2].ljust(24), p['used'], p.get('loss_scaling'), round(f['samples_per_s']), 'samples/s acc',
  round(f['test_acc'], 4), round(f['energy_j'], 1), 'J', f['energy_source'], 'skipped', f.get('skipped_steps'),
  'dropped', f.get('dropped_batches'))" "$1" "$2" 2>&1 || tail -5 "${1%.json}.err"
}
for recipe in "fp32" "fp16 --loss-scale dynamic" "bf16" "auto" "bf16 --compile graphs" "fp32 --compile graphs"; do
  name=$(echo "$recipe" | tr ' ' '_' | tr -d '-')
  # shellcheck disable=SC2086
  timeout 90 $ipj train --device cuda --model cnn --data "$data" --epochs 2 --batch 256 --lr 0.05 \
    --schedule cosine --precision $recipe --no-save --json --quiet >"$out/train_$name.json" 2>"$out/train_$name.err"
  summary "$out/train_$name.json" "$recipe"
done
elapsed "training"

# 6. NCCL data parallelism: one rank per GPU (this machine has one) through ipj launch.
timeout 120 $ipj launch --nproc-per-node "$(nvidia-smi -L | wc -l)" -- $ipj train --distributed --device cuda \
  --model cnn --data "$data" --epochs 1 --batch 256 --lr 0.05 --no-save --json --quiet \
  >"$out/nccl.json" 2>"$out/nccl.err"
echo "nccl exit $?"
tail -3 "$out/nccl.err"
elapsed "nccl"

# 7. The CPU path on LibTorch 2.x: train, quantize, bench, export.
timeout 120 $ipj train --model mlp --data "$data" --epochs 1 --limit 20000 --out /tmp/cpu-run --json --quiet \
  >"$out/cpu_train.json" 2>"$out/cpu_train.err"
echo "cpu train exit $?"
summary "$out/cpu_train.json" "cpu mlp fp32"
timeout 60 $ipj quantize --model /tmp/cpu-run --data "$data" --mode dynamic --out /tmp/mlp-int8.pt --json --quiet \
  >"$out/cpu_quantize.json" 2>"$out/cpu_quantize.err"
echo "cpu quantize exit $?; $(tail -2 "$out/cpu_quantize.err")"
elapsed "done"
