"""What autocast and per-operator overhead cost the bf16 mlp step: the seeds' mlp (784-512-512-10, SGD lr 0.01
momentum 0.9, cross-entropy) trained on random batches two ways in Debian's torch, alternating: bf16 autocast
with autograd (ipj's bf16 recipe's maths) and an explicit step (fp32 master weights cast to bf16 once per
step, the eight GEMMs in bf16 into preallocated buffers, bias and ReLU in place, softmax - one-hot in fp32,
fp32 momentum update). glibc's large blocks kept in the heap (as ipj's tuned allocator does), ATen on all
cores (oneDNN's bf16 GEMMs run on its pool). Limits: a probe of the headroom, not a training loop (no data
loading, no evaluation); bf16 GEMMs need AVX512-BF16 or AMX to be fast.
Prints one JSON line: {"batch", "autocast_samples_per_s", "explicit_samples_per_s"} (best of the rounds).
Usage: python3 bench/python/mlp_explicit_bf16_step.py [batch=256] [rounds=3]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

from mlp_explicit_step import best_samples_per_s, seed_mlp, tune_malloc  # this folder: the fp32 probe


def explicit_step_function(model, batch, images, labels):
    weights = [model[1].weight, model[3].weight, model[5].weight]  # fp32 masters [out, in]
    biases = [model[1].bias, model[3].bias, model[5].bias]
    widths = [512, 512, 10]
    bf16 = torch.bfloat16
    low_weights = [torch.empty_like(weight, dtype=bf16) for weight in weights]  # bf16 copies, cast per step
    low_biases = [torch.empty_like(bias, dtype=bf16) for bias in biases]
    hidden = [torch.empty(batch, width, dtype=bf16) for width in widths]  # activations [B, out]
    grads = [torch.empty(batch, width, dtype=bf16) for width in widths]  # dLoss/d(pre-activation) [B, out]
    low_weight_grads = [torch.empty_like(weight, dtype=bf16) for weight in weights]
    probabilities = torch.empty(batch, 10)  # fp32 softmax [B, 10]
    momenta = [torch.zeros_like(p) for p in weights + biases]
    rows = torch.arange(batch)

    @torch.no_grad()
    def step(index):
        x, y = images[index % 8].view(batch, 784).to(bf16), labels[index % 8]
        for layer in range(3):
            low_weights[layer].copy_(weights[layer])
            low_biases[layer].copy_(biases[layer])
        inputs = [x, hidden[0], hidden[1]]
        for layer in range(3):
            torch.addmm(low_biases[layer], inputs[layer], low_weights[layer].t(), out=hidden[layer])
            if layer < 2:
                hidden[layer].clamp_min_(0)
        torch.softmax(hidden[2].float(), 1, out=probabilities)
        probabilities[rows, y] -= 1
        probabilities.div_(batch)
        grads[2].copy_(probabilities)
        bias_grads = [None, None, probabilities.sum(0)]
        for layer in (2, 1, 0):
            torch.mm(grads[layer].t(), inputs[layer], out=low_weight_grads[layer])
            if layer < 2:
                bias_grads[layer] = grads[layer].sum(0, dtype=torch.float32)
            if layer > 0:
                torch.mm(grads[layer], low_weights[layer], out=grads[layer - 1])
                grads[layer - 1].mul_(hidden[layer - 1] > 0)
        for parameter, grad, momentum in zip(weights + biases, low_weight_grads + bias_grads, momenta):
            momentum.mul_(0.9).add_(grad)
            parameter.add_(momentum, alpha=-0.01)

    return step


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    tune_malloc()
    torch.set_num_threads(os.cpu_count())
    model, optimizer, images, labels = seed_mlp(batch)

    def autocast_step(index):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[index % 8]), labels[index % 8])
        loss.backward()
        optimizer.step()

    explicit_step = explicit_step_function(model, batch, images, labels)
    best = best_samples_per_s({"autocast": autocast_step, "explicit": explicit_step}, batch, rounds)
    print(json.dumps({"batch": batch, "autocast_samples_per_s": best["autocast"],
                      "explicit_samples_per_s": best["explicit"]}))


if __name__ == "__main__":
    main()
