#!/usr/bin/env python3
# A multi-node scaling model for ipj's data-parallel training from measured numbers: the all-reduce cost
# (ipj_bench_allreduce, fitted as t = latency + bytes / bandwidth), the model's gradient size and the measured
# step time of one process. Network links other than the measured loopback are assumptions and are labelled so.
# Used by bench/distributed.sh; needs only the standard library.
import argparse
import json
import math
import statistics


def fit_allreduce(rows):
    """Least squares t_us = a + b * bytes over the messages of 64 kB and more (latency a, 1 / bandwidth b)."""
    points = [(r["bytes"], r["median_us"]) for r in rows if r["bytes"] >= 65536]
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    small = min(rows, key=lambda r: r["bytes"])
    return small["median_us"] * 1e-6, 1.0 / (slope * 1e-6)  # seconds, bytes/s (2-rank algorithm bandwidth)


def ring_allreduce_s(gradient_bytes, nodes, latency_s, link_bytes_per_s, buckets):
    """Ring all-reduce: 2 (N-1) steps of gradient_bytes / N each, per bucket one latency per step."""
    if nodes == 1:
        return 0.0
    return 2 * (nodes - 1) * (buckets * latency_s + gradient_bytes / nodes / link_bytes_per_s)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--allreduce", required=True)
    parser.add_argument("--training", required=True)
    parser.add_argument("--parameters", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.allreduce) if line.strip()]
    runs = [json.loads(line) for line in open(args.training) if line.strip()]
    latency, two_rank_rate = fit_allreduce(rows)
    gradient_bytes = 4 * args.parameters
    buckets = 1 + max(0, math.ceil((gradient_bytes - (1 << 20)) / (25 << 20)))  # Reducer: 1 MB, then 25 MB
    one_rate = statistics.median(r["one_samples_per_s"] for r in runs)
    two_rate = statistics.median(r["two_samples_per_s"] for r in runs)
    step_one = args.batch / one_rate  # seconds per global batch, one process on the whole machine
    step_two = args.batch / two_rate
    loopback_allreduce = latency * buckets + gradient_bytes / two_rank_rate
    print(f"measured: all-reduce latency {latency * 1e6:.0f} us, 2-rank loopback algorithm bandwidth "
          f"{two_rank_rate / 1e9:.2f} GB/s (fit over >= 64 kB)")
    print(f"gradients: {args.parameters} parameters = {gradient_bytes / 1e6:.2f} MB fp32 in {buckets} bucket(s); "
          f"one all-reduce on loopback ~ {loopback_allreduce * 1e3:.2f} ms")
    print(f"step (global batch {args.batch}): 1 process {step_one * 1e3:.2f} ms, 2 ranks {step_two * 1e3:.2f} ms "
          f"(difference {(step_two - step_one) * 1e3:.2f} ms)")
    # A 2-rank ring is 2 steps of G/2 bytes: t = 2 latency_step + G / link, so link = the fitted rate and
    # latency_step = half the small-message time.
    links = [("loopback (measured)", latency / 2, two_rank_rate),
             ("10 GbE (assumed 50 us)", 50e-6, 10e9 / 8),
             ("100 Gb/s (assumed 10 us)", 10e-6, 100e9 / 8)]
    print("model: each node = this machine running one rank; compute scales as 1/N at a fixed global batch")
    print("(strong scaling, optimistic for small local batches); all-reduce not overlapped (pessimistic).")
    print("%-26s %5s %12s %12s %9s %11s" % ("link", "nodes", "compute_ms", "allreduce_ms", "speedup",
                                            "efficiency"))
    for name, link_latency, link_rate in links:
        for nodes in (1, 2, 4, 8, 16, 32):
            compute = step_one / nodes
            communicate = ring_allreduce_s(gradient_bytes, nodes, link_latency, link_rate, buckets)
            speedup = step_one / (compute + communicate)
            print("%-26s %5d %12.3f %12.3f %8.2fx %10.0f%%" % (name, nodes, compute * 1e3, communicate * 1e3,
                                                               speedup, 100 * speedup / nodes))


if __name__ == "__main__":
    main()
