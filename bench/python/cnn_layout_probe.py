"""Layout probe for the seeds' cnn in Debian's python3-torch: max-pool forward time NCHW vs channels-last, then
training steps per second of the whole cnn (fp32 and bf16 autocast) in both layouts, alternating, 2 threads.
Usage: MALLOC_MMAP_THRESHOLD_=268435456 /usr/bin/python3 bench/python/cnn_layout_probe.py [rounds=2]
(the malloc setting matches ipj's tuned allocator, so that page faults do not mask the kernels)."""
import ctypes
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seed_train_loop import SmallCnn  # noqa: E402

torch.set_num_threads(2)
# ipj's thread plan for convolutional models: ATen's pool gets the cores, OpenBLAS one thread (else the two
# pools oversubscribe the CPU and NCHW numbers drop for reasons that have nothing to do with the layout).
for library in ("libopenblas.so.0", "libblas.so.3"):
    try:
        ctypes.CDLL(library).openblas_set_num_threads(1)
        break
    except (OSError, AttributeError):
        continue
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def pool_ms(memory_format):
    x = torch.randn(128, 32, 28, 28).contiguous(memory_format=memory_format).requires_grad_()
    for _ in range(3):
        F.max_pool2d(x, 2)
    start = time.perf_counter()
    for _ in range(20):
        F.max_pool2d(x, 2)
    return (time.perf_counter() - start) / 20 * 1e3


def train_samples_per_s(bf16, channels_last):
    torch.manual_seed(0)
    model = SmallCnn()
    x = torch.randn(128, 1, 28, 28)  # [B, 1, 28, 28]
    y = torch.randint(0, 10, (128,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        F.cross_entropy(logits.float(), y).backward()
        optimizer.step()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(30):
        step()
    return 30 * 128 / (time.perf_counter() - start)


for round_index in range(rounds):
    print(f"round {round_index}: max_pool2d [128,32,28,28] forward NCHW {pool_ms(torch.contiguous_format):.2f} ms, "
          f"channels-last {pool_ms(torch.channels_last):.2f} ms")
    for bf16 in (False, True):
        nchw = train_samples_per_s(bf16, False)
        nhwc = train_samples_per_s(bf16, True)
        print(f"round {round_index}: cnn {'bf16' if bf16 else 'fp32'} training NCHW {nchw:.0f} samples/s, "
              f"channels-last {nhwc:.0f} samples/s ({nhwc / nchw:.2f}x)")
