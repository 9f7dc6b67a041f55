#!/usr/bin/python3
"""Golden values for ipj's parity test, computed with Debian's python3-torch.

Reads the weights, buffers and batch that the C++ test wrote to FOLDER (raw little-endian float32 + manifest.json),
builds the same architecture in PyTorch, and writes: logits, loss, every gradient after one backward pass, and
every parameter/buffer after two SGD steps (lr 0.1, momentum 0.9) on that batch.
Usage: reference_step.py FOLDER MODEL   (MODEL: mlp | cnn)
"""
import json
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def read(folder, name, shape):
    return torch.from_numpy(np.fromfile(f"{folder}/{name}.bin", dtype="<f4").reshape(shape).copy())


def write(folder, name, tensor):
    tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(f"{folder}/{name}.bin")


def main():
    folder, model_name = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    manifest = json.load(open(f"{folder}/manifest.json"))
    model = {"mlp": Mlp, "cnn": SmallCnn}[model_name]()
    state = {name: read(folder, "in." + name, shape) for name, shape in manifest["state"].items()}
    for name, value in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = value
    model.load_state_dict(state)
    x = read(folder, "input", manifest["input_shape"])
    labels = torch.tensor(manifest["labels"], dtype=torch.int64)

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    write(folder, "out.logits", logits)
    json.dump({"loss": loss.item()}, open(f"{folder}/out.loss.json", "w"))
    for name, parameter in model.named_parameters():
        write(folder, "out.grad." + name, parameter.grad)
    optimizer.step()
    optimizer.zero_grad()
    F.cross_entropy(model(x), labels).backward()
    optimizer.step()
    for name, value in model.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            write(folder, "out.after." + name, value)


if __name__ == "__main__":
    main()
