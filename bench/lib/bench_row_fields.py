"""One `ipj bench --json` row as the ORT comparison scripts print it: p50 ms, the engine the load picked for
the row's batch size (fp32: batch1_engine / batch_engine; int8: batch1_threads.engine / int8_batch_engine.engine;
"+split" where the batch's rows run split across one-thread XNNPACK runtimes), process CPU-ms per call and the
percentage of calls XNNPACK's or oneDNN's runtime answered. Usage: ipj bench ... --json | python3 bench_row_fields.py BATCH
"""
import json
import sys

batch = int(sys.argv[1])
report = json.load(sys.stdin)
row, variant = report["rows"][0], report["variants"][0]
fp32 = variant.get("fp32_engine") or {}
int8_batch = variant.get("int8_batch_engine") or {}
if fp32:
    engine = fp32.get("batch1_engine" if batch == 1 else "batch_engine")
    split = batch > 1 and engine == "xnnpack" and fp32.get("batch_xnnpack_row_parts", 0) > 0
elif batch == 1:
    engine, split = (variant.get("batch1_threads") or {}).get("engine", "libtorch"), False
else:
    engine = int8_batch.get("engine", "libtorch")
    split = engine == "xnnpack" and int8_batch.get("row_parts", 0) > 0
print(row["p50_ms"], engine + ("+split" if split else ""), row["cpu_ms_per_call"],
      round(100 * (row["xnnpack_calls"] + row.get("onednn_calls", 0)) / max(1, row["calls"])))
