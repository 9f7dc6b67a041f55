# Writes TorchScript models made by Debian's python3-torch/torchvision (scripted and traced) and PyTorch's own
# outputs for them, for ipj's graph importer and int8 tests. BatchNorm statistics come from real Fashion-MNIST
# images (one pass in train mode, no training), so activations have realistic ranges. Models that ipj must
# refuse (LSTM, a custom activation) are written too, and the small residual net trained briefly (one pass over
# 2000 images, ~45% accuracy) for the accuracy guard and CLI tests. Usage: make_graph_models.py OUT_DIR
import gzip
import sys

import numpy as np
import torch
import torchvision

DATA = "/usr/share/datasets/fashion-mnist/"
MEAN, STD = 0.2860, 0.3530


def images(split, count):
    name = "train" if split == "train" else "t10k"
    with gzip.open(f"{DATA}{name}-images-idx3-ubyte.gz") as file:
        pixels = np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:count]
    return torch.from_numpy(pixels.astype(np.float32) / 255.0)


class CnnBn(torch.nn.Module):  # takes raw pixels; view(x.size(0), -1), dropout
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(32)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 64)
        self.drop = torch.nn.Dropout(0.2)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)  # [B, 16, 14, 14]
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)  # [B, 32, 7, 7]
        x = x.view(x.size(0), -1)
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


class Block(torch.nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels_out)
        self.conv2 = torch.nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels_out)
        self.relu = torch.nn.ReLU(inplace=True)
        self.shortcut = torch.nn.Sequential()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = torch.nn.Sequential(torch.nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                                                torch.nn.BatchNorm2d(channels_out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return self.relu(out)


class SmallResidual(torch.nn.Module):  # residual adds, projection shortcut, avg_pool2d, mean over H, W
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(16),
                                        torch.nn.ReLU())
        self.block1 = Block(16, 16, 1)
        self.block2 = Block(16, 32, 2)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))  # [B, 32, 14, 14]
        return self.fc(self.pool(x).mean((2, 3)))


class Swish(torch.nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class WithSwish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.block = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3), Swish())
        self.fc = torch.nn.Linear(4 * 24 * 24, 10)

    def forward(self, x):
        return self.fc(self.block(self.conv(x)).flatten(1))


class WithLstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(28, 32, batch_first=True)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        out, _ = self.rnn(x)  # x: [B, 28, 28], the rows of the image as a sequence
        return self.fc(out[:, -1])


def resnet18():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # 1-channel stem, 28x28 -> 1x1 at layer4
    return model


def mobilenet_v2():
    model = torchvision.models.mobilenet_v2(num_classes=10)
    model.features[0][0] = torch.nn.Conv2d(1, 32, 3, 2, 1, bias=False)
    return model


class Holder(torch.nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, value in tensors.items():
            self.register_buffer(name, value)


def set_batch_norm_statistics(model, inputs):
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # cumulative average over the passes
    model.train()
    with torch.no_grad():
        for start in range(0, inputs.size(0), 128):
            model(inputs[start:start + 128])
    model.eval()


def labels(split, count):
    name = "train" if split == "train" else "t10k"
    with gzip.open(f"{DATA}{name}-labels-idx1-ubyte.gz") as file:
        return torch.from_numpy(np.frombuffer(file.read(), np.uint8, offset=8)[:count].astype(np.int64))


def train_briefly(model, count):
    """One pass of SGD over the first `count` training images (normalised), batch 32; returns the model in eval
    mode and its accuracy on the first 1000 test images."""
    pixels, targets = (images("train", count) - MEAN) / STD, labels("train", count)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for start in range(0, count, 32):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(pixels[start:start + 32]), targets[start:start + 32])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model((images("test", 1000) - MEAN) / STD).argmax(1)
    return model, (predicted == labels("test", 1000)).float().mean()


def main(out_dir):
    torch.manual_seed(5)
    calibration, test = images("train", 512), images("test", 64)
    tensors = {"input": test}
    models = {"cnn_bn": (CnnBn(), False), "residual": (SmallResidual(), True), "resnet18": (resnet18(), True),
              "mobilenet_v2": (mobilenet_v2(), True)}
    for name, (model, normalized) in models.items():
        prepare = (lambda x: (x - MEAN) / STD) if normalized else (lambda x: x)
        set_batch_norm_statistics(model, prepare(calibration))
        with torch.no_grad():
            tensors[name] = model(prepare(test))
        torch.jit.script(model).save(f"{out_dir}/{name}_scripted.pt")
        torch.jit.trace(model, prepare(test[:2])).save(f"{out_dir}/{name}_traced.pt")
    trained, tensors["residual_trained_acc"] = train_briefly(SmallResidual(), 2000)
    torch.jit.script(trained).save(f"{out_dir}/residual_trained.pt")
    one_linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).eval()  # raw pixels in
    torch.jit.script(one_linear).save(f"{out_dir}/one_linear.pt")
    torch.jit.script(WithSwish().eval()).save(f"{out_dir}/swish.pt")
    torch.jit.script(WithLstm().eval()).save(f"{out_dir}/lstm.pt")
    torch.jit.script(Holder(tensors)).save(f"{out_dir}/golden.pt")


if __name__ == "__main__":
    main(sys.argv[1])
