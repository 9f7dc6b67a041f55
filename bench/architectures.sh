#!/usr/bin/env bash
# Any architecture a user brings (issue 24): per architecture of tests/models/python/any_models.py (scripted),
# a short `ipj train` on Fashion-MNIST resized to 16x16, then `ipj bench` of the trained model.pt with the
# variants fp32, int8-dynamic and int8-static side by side in the same run (batches 1 and 64, the same test
# images), and `ipj quantize --mode static --json` for what ran in int8. Prints per architecture the int8/fp32
# throughput ratios and the accuracy drops against the goals (CNN families int8-static >= 1.5x at batch 64 with
# <= 1 pt drop; transformers int8-dynamic >= 1.3x at batch 64). Exits 0 whatever the ratios (a measurement).
# Usage: bash bench/architectures.sh [epochs=2] [window_s=0.3] [ARCH...]   (needs build/bin/ipj)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs="${1:-2}"
window="${2:-0.3}"
shift $(($# < 2 ? $# : 2))
ipj=./build/bin/ipj
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLOG_minloglevel=2
if [ $# -gt 0 ]; then
  archs=("$@")
else
  mapfile -t archs < <("$python" - <<'PY'
import importlib.util
spec = importlib.util.spec_from_file_location("any_models", "tests/models/python/any_models.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
names = getattr(module, "ARCHITECTURES", None) or getattr(module, "MODELS", None)
for name in (names.keys() if hasattr(names, "keys") else names):
    if name not in ("sort",):  # models made to be refused
        print(name)
PY
  )
fi
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; epochs $epochs" >&2
for arch in "${archs[@]}"; do
  if ! "$python" tests/models/python/any_models.py make "$work" "${arch}_scripted" >/dev/null 2>"$work/$arch.err"; then
    echo "$arch: not made: $(tail -1 "$work/$arch.err")" >&2
    continue
  fi
  echo "training $arch..." >&2
  "$ipj" train --model "$work/${arch}_scripted.pt" --input-shape 1,16,16 --resize 16,16 --epochs "$epochs" \
    --limit 12000 --test-limit 2000 --no-energy --quiet --json --out "$work/run-$arch" > "$work/train-$arch.json"
  "$ipj" quantize --model "$work/run-$arch/model.pt" --mode static --max-drop 100 --calib 512 --test-limit 2000 \
    --out "$work/static-$arch.pt" --quiet --json > "$work/static-$arch.json" 2>"$work/static-$arch.err" || true
  "$ipj" bench --model "$work/run-$arch/model.pt" --variants fp32,int8-dynamic,int8-static --batch 1,64 \
    --calib 512 --test-limit 2000 --window-s "$window" --no-energy --quiet --json \
    > "$work/bench-$arch.json" 2>"$work/bench-$arch.err" || true
done
"$python" - "$work" "${archs[@]}" <<'PY'
import json, os, sys
work, archs = sys.argv[1], sys.argv[2:]
print(f"{'architecture':14} {'variant':13} {'b1 x fp32':>9} {'b64 x fp32':>10} {'acc':>7} {'drop pt':>7}  int8 ops / float ops")
for arch in archs:
    path = f"{work}/bench-{arch}.json"
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        err = open(f"{work}/bench-{arch}.err").read().strip().splitlines() if os.path.exists(f"{work}/bench-{arch}.err") else []
        print(f"{arch:14} bench failed: {err[-1] if err else 'not run'}")
        continue
    report = json.load(open(path))
    rows = report["rows"]
    fp32 = {r["batch"]: r for r in rows if r["variant"] == "fp32"}
    ops = ""
    try:
        static = json.load(open(f"{work}/static-{arch}.json"))
        count = lambda key: sum(entry["count"] for entry in static.get(key, []))
        ops = f"static: {count('int8_ops')} int8 / {count('float_ops')} float"
    except (OSError, ValueError):
        ops = "static quantize failed"
    for variant in ("fp32", "int8-dynamic", "int8-static"):
        by_batch = {r["batch"]: r for r in rows if r["variant"] == variant}
        if not by_batch:
            reason = [s["reason"] for s in report.get("skipped", []) if s["variant"] == variant]
            print(f"{arch:14} {variant:13} skipped: {reason[0] if reason else '?'}")
            continue
        speed = {b: fp32[b]["p50_ms"] / r["p50_ms"] for b, r in by_batch.items() if b in fp32}
        acc = next(iter(by_batch.values())).get("test_acc", float("nan"))
        drop = (fp32[1].get("test_acc", float("nan")) - acc) * 100 if 1 in fp32 else float("nan")
        print(f"{arch:14} {variant:13} {speed.get(1, float('nan')):9.2f} {speed.get(64, float('nan')):10.2f} "
              f"{acc:7.4f} {drop:7.2f}  {ops if variant == 'int8-static' else ''}")
PY
