"""What autograd and per-operator overhead cost the fp32 mlp step: the seeds' mlp (784-512-512-10, SGD lr 0.01
momentum 0.9, cross-entropy) trained on random batches two ways in Debian's torch, alternating: autograd
(zero_grad, forward, backward, optimizer.step) and an explicit step (the same maths by hand into preallocated
buffers: addmm, in-place ReLU, softmax - one-hot, the eight GEMMs, fused momentum update), both with glibc's
large blocks kept in the heap (as ipj's tuned allocator does) and ATen on one thread (OpenBLAS on its own).
Limits: a probe of the headroom, not a training loop (no data loading, no evaluation); same step count each.
Prints one JSON line: {"batch", "autograd_samples_per_s", "explicit_samples_per_s"} (best of the rounds).
Usage: python3 bench/python/mlp_explicit_step.py [batch=128] [rounds=3]
"""
import ctypes
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3


def tune_malloc():
    libc = ctypes.CDLL("libc.so.6")
    for option, value in ((M_MMAP_THRESHOLD, 256 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20)):
        libc.mallopt(option, value)


def best_samples_per_s(step_functions, batch, rounds, steps=300):
    """{name: best samples/s over the rounds}, the step functions alternating, 30 warm-up steps each time."""
    best = {name: 0.0 for name in step_functions}
    for _ in range(rounds):
        for name, step_function in step_functions.items():
            for step in range(30):
                step_function(step)
            start = time.perf_counter()
            for step in range(steps):
                step_function(step)
            best[name] = max(best[name], batch * steps / (time.perf_counter() - start))
    return best


def seed_mlp(batch):
    """The seeds' mlp with its SGD (lr 0.01, momentum 0.9) and eight random batches of `batch` samples."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = [torch.randn(batch, 1, 28, 28) for _ in range(8)]  # [B, 1, 28, 28]
    labels = [torch.randint(0, 10, (batch,)) for _ in range(8)]  # [B]
    return model, optimizer, images, labels


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    tune_malloc()
    torch.set_num_threads(1)
    model, optimizer, images, labels = seed_mlp(batch)

    def autograd_step(step):
        optimizer.zero_grad()
        F.cross_entropy(model(images[step % 8]), labels[step % 8]).backward()
        optimizer.step()

    weights = [model[1].weight, model[3].weight, model[5].weight]  # [out, in] each
    biases = [model[1].bias, model[3].bias, model[5].bias]
    widths = [512, 512, 10]
    hidden = [torch.empty(batch, width) for width in widths]  # activations [B, out]
    grads = [torch.empty(batch, width) for width in widths]  # dLoss/d(pre-activation) [B, out]
    weight_grads = [torch.empty_like(weight) for weight in weights]
    bias_grads = [torch.empty_like(bias) for bias in biases]
    momenta = [torch.zeros_like(p) for p in weights + biases]
    rows = torch.arange(batch)

    @torch.no_grad()
    def explicit_step(step):
        x, y = images[step % 8].view(batch, 784), labels[step % 8]
        inputs = [x, hidden[0], hidden[1]]
        for layer in range(3):
            torch.addmm(biases[layer], inputs[layer], weights[layer].t(), out=hidden[layer])
            if layer < 2:
                hidden[layer].clamp_min_(0)
        torch.softmax(hidden[2], 1, out=grads[2])
        grads[2][rows, y] -= 1
        grads[2].div_(batch)
        for layer in (2, 1, 0):
            torch.mm(grads[layer].t(), inputs[layer], out=weight_grads[layer])
            torch.sum(grads[layer], 0, out=bias_grads[layer])
            if layer > 0:
                torch.mm(grads[layer], weights[layer], out=grads[layer - 1])
                grads[layer - 1].mul_(hidden[layer - 1] > 0)
        for parameter, grad, momentum in zip(weights + biases, weight_grads + bias_grads, momenta):
            momentum.mul_(0.9).add_(grad)
            parameter.add_(momentum, alpha=-0.01)

    best = best_samples_per_s({"autograd": autograd_step, "explicit": explicit_step}, batch, rounds)
    print(json.dumps({"batch": batch, "autograd_samples_per_s": best["autograd"],
                      "explicit_samples_per_s": best["explicit"]}))


if __name__ == "__main__":
    main()
