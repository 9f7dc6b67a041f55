# The seeds' inference_benchmark loop in Debian's python3-torch: the same model as ipj (mlp 784-512-512-10 or the
# 2-conv cnn), eval + no_grad, per-call timing in fixed windows; fp32 and torch's own quantize_dynamic int8.
# Prints one JSON object: {"rows": [{"variant", "batch", "p50_ms", "p99_ms", "throughput_per_s"}]}.
import argparse
import json
import time

import torch


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def measure(model, batch, window_s):
    x = torch.rand(batch, 1, 28, 28)
    latencies = []
    with torch.no_grad():
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:  # warm-up
            model(x)
        start = time.perf_counter()
        end = start + 3 * window_s
        previous = start
        while previous < end:
            model(x)
            now = time.perf_counter()
            latencies.append((now - previous) * 1000.0)
            previous = now
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * (len(latencies) - 1) + 0.5))]
    return {"batch": batch, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "throughput_per_s": len(latencies) * batch / (previous - start)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    parser.add_argument("--batch", default="1,64,256")
    parser.add_argument("--window-s", type=float, default=0.5)
    args = parser.parse_args()
    torch.backends.quantized.engine = "onednn" if "onednn" in torch.backends.quantized.supported_engines else "qnnpack"
    model = (mlp() if args.model == "mlp" else cnn()).eval()
    variants = {"python fp32": model,
                "python int8-dynamic": torch.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)}
    rows = []
    for name, variant in variants.items():
        for batch in [int(b) for b in args.batch.split(",")]:
            rows.append({"variant": name, **measure(variant, batch, args.window_s)})
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
