"""What a second vCPU is worth on this machine: a one-thread kernel timed alone, then two copies at once in
two processes (each pinned to its own CPU when there are two). fp32: the mlp's first layer at batch 64
([64, 784] x [784, 512]^T, OpenBLAS); int8: the same layer quantized (the first quantized engine of x86,
fbgemm, onednn, qnnpack that this torch has; VNNI where the engine and CPU have it). Prints one JSON line
per kernel: alone and paired calls/s, and paired / alone (2.0: two full cores; ~1.0-1.3: the vCPUs share a
physical core's execution units, as SMT siblings do). Limits: one shape.
Usage: python3 bench/python/vcpu_pairing.py [seconds=3]
"""
import json
import multiprocessing as mp
import os
import sys
import time

import torch


def quantized_engine():
    engines = torch.backends.quantized.supported_engines
    return next(e for e in ("x86", "fbgemm", "onednn", "qnnpack") if e in engines)


def kernel(kind):
    torch.set_num_threads(1)
    x = torch.randn(64, 784)  # [batch 64, 784 inputs]
    w = torch.randn(512, 784)  # [512 outputs, 784 inputs]
    b = torch.zeros(512)
    if kind == "fp32":
        return lambda: torch.nn.functional.linear(x, w, b)
    torch.backends.quantized.engine = quantized_engine()
    qx = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
    qw = torch.quantize_per_tensor(w, 0.02, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qw, b)
    return lambda: torch.ops.quantized.linear(qx, packed, 0.1, 128)


def calls_per_s(kind, seconds, cpu, start, out):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    run = kernel(kind)
    for _ in range(200):
        run()
    start.wait()
    calls, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        for _ in range(20):
            run()
        calls += 20
    out.put(calls / (time.perf_counter() - began))


def measure(kind, seconds, copies):
    cpus = sorted(os.sched_getaffinity(0))
    start, out = mp.Barrier(copies), mp.Queue()
    procs = [mp.Process(target=calls_per_s,
                        args=(kind, seconds, cpus[i] if len(cpus) >= copies else None, start, out))
             for i in range(copies)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(results)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    for kind in ("fp32", "int8"):
        alone = measure(kind, seconds, 1)
        paired = measure(kind, seconds, 2)
        alone_again = measure(kind, seconds, 1)
        best_alone = max(alone, alone_again)
        engine = quantized_engine() if kind == "int8" else "openblas"
        print(json.dumps({"kernel": kind, "engine": engine, "cpus": len(os.sched_getaffinity(0)),
                          "alone_calls_per_s": round(best_alone, 1), "paired_calls_per_s": round(paired, 1),
                          "paired_over_alone": round(paired / best_alone, 3)}), flush=True)
