#!/usr/bin/python3
"""The seeds' PyTorch training loop (SGD lr 0.01 momentum 0.9, batch 128) on Fashion-MNIST, for side-by-side
benchmarks against ipj and `ipj compare --python-baseline`. Same data files (IDX, gzipped or not), same
normalisation, same architectures as ipj's mlp and cnn. --threads N sets torch's intra-op threads (0: torch's
default), so that scripts can try Python's best setting rather than its default.
Prints one JSON line: {"model", "samples", "train_wall_s", "samples_per_s", "test_acc", "threads"}.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(folder, name):
    path = os.path.join(folder, name)
    opener = open if os.path.exists(path) else gzip.open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as handle:
        content = handle.read()
    dims = content[3]
    shape = [int.from_bytes(content[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(content, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64)
        self.fc1, self.fc2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    train_x = read_idx(args.data, "train-images-idx3-ubyte")
    train_y = read_idx(args.data, "train-labels-idx1-ubyte")
    test_x = read_idx(args.data, "t10k-images-idx3-ubyte")
    test_y = read_idx(args.data, "t10k-labels-idx1-ubyte")
    if args.limit:
        train_x, train_y = train_x[: args.limit], train_y[: args.limit]
    if args.test_limit:
        test_x, test_y = test_x[: args.test_limit], test_y[: args.test_limit]
    mean, std = (train_x / 255.0).mean(), (train_x / 255.0).std()
    to_tensor = lambda images: ((torch.from_numpy(images.astype(np.float32)) / 255.0 - mean) / std).unsqueeze(1)
    xs, ys = to_tensor(train_x), torch.from_numpy(train_y.astype(np.int64))
    model = {"mlp": Mlp, "cnn": SmallCnn}[args.model]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    train_seconds, samples = 0.0, 0
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(len(xs))
        start = time.perf_counter()
        for first in range(0, len(xs), args.batch):
            index = order[first: first + args.batch]
            X, y = xs[index], ys[index]
            optimizer.zero_grad()
            loss = loss_fn(model(X), y)
            loss.backward()
            optimizer.step()
            samples += len(index)
        train_seconds += time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = (model(to_tensor(test_x)).argmax(1) == torch.from_numpy(test_y.astype(np.int64))).sum().item()
    print(json.dumps({"model": args.model, "samples": samples, "train_wall_s": train_seconds,
                      "samples_per_s": samples / train_seconds, "test_acc": correct / len(test_y),
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
