"""The fp32 GEMM ceiling of the mlp's training step: the eight matrix products of one SGD step of the seeds'
mlp (784-512-512-10; forward x W^T for three layers, backward dW for three and dX for the last two) timed
alone, best of five spells each, so that samples/s = batch / (their summed time) is what a loop that did
nothing else would reach. --engine openblas (default): torch.mm, OpenBLAS in Debian's torch on all its
threads, what both training loops run; onednn: the same products as torch's oneDNN fp32 linear (input in
oneDNN's layout, not counted; ATen's threads = all cores), what a loop on oneDNN's GEMMs could reach;
onednn-bf16: torch.mm on bf16 tensors (oneDNN's bf16 GEMMs where the CPU has AVX512-BF16 or AMX; ATen's
threads = all cores), the GEMM part of a bf16 autocast step.
Limits: those GEMMs only (no bias, activation, loss or optimizer time), one timing per shape.
Prints one JSON line per batch: {"batch", "engine", "gflop", "gemm_gflop_per_s", "ceiling_samples_per_s"}.
Usage: python3 bench/python/mlp_gemm_ceiling.py [--engine openblas|onednn|onednn-bf16] [batch ...]   (default: 128 256)
"""
import json
import os
import sys
import time

import torch

LAYERS = ((784, 512), (512, 512), (512, 10))  # (inputs, outputs) of fc1, fc2, fc3


def step_gemms(batch):
    """(m, k, n) of each product in one step: y = x W^T, dW = g^T x, dX = g W (not for fc1: its input is data)."""
    shapes = []
    for index, (inputs, outputs) in enumerate(LAYERS):
        shapes.append((batch, inputs, outputs))  # forward: [batch, in] x [in, out]
        shapes.append((outputs, batch, inputs))  # dW: [out, batch] x [batch, in]
        if index > 0:
            shapes.append((batch, outputs, inputs))  # dX: [batch, out] x [out, in]
    return shapes


def product(engine, m, k, n):
    """A call computing [m, k] x [k, n] on the engine."""
    a, b = torch.randn(m, k), torch.randn(k, n)  # [m, k], [k, n]
    if engine == "onednn":
        a_onednn, b_rows = a.to_mkldnn(), b.t().contiguous()  # [m, k] in oneDNN's layout; [n, k] as linear weight
        return lambda: torch.ops.aten.mkldnn_linear(a_onednn, b_rows, None)
    if engine == "onednn-bf16":
        a, b = a.bfloat16(), b.bfloat16()
    out = torch.empty(m, n, dtype=a.dtype)
    return lambda: torch.mm(a, b, out=out)


def best_seconds(call, spells=5, spell_s=0.08):
    for _ in range(5):
        call()
    best = float("inf")
    for _ in range(spells):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < spell_s:
            call()
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main():
    arguments = sys.argv[1:]
    engine = "openblas"
    if arguments[:1] == ["--engine"]:
        engine, arguments = arguments[1], arguments[2:]
    if engine not in ("openblas", "onednn", "onednn-bf16"):
        sys.exit(f"--engine {engine}: expected openblas, onednn or onednn-bf16")
    batches = [int(value) for value in arguments] or [128, 256]
    # openblas: ATen's pool idle, the GEMMs on OpenBLAS's own threads; onednn: on ATen's pool
    torch.set_num_threads(1 if engine == "openblas" else os.cpu_count())
    for batch in batches:
        shapes = step_gemms(batch)
        flop = sum(2 * m * k * n for m, k, n in shapes)
        seconds = sum(best_seconds(product(engine, m, k, n)) for m, k, n in shapes)
        print(json.dumps({"batch": batch, "engine": engine, "gflop": flop / 1e9,
                          "gemm_gflop_per_s": flop / seconds / 1e9, "ceiling_samples_per_s": batch / seconds}))


if __name__ == "__main__":
    main()
