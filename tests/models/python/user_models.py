#!/usr/bin/python3
"""Users' TorchScript models for ipj's tests, made and checked by Debian's python3-torch (and torchvision).

  user_models.py make OUT_DIR NAME...     writes OUT_DIR/NAME.pt for each NAME (list below)
  user_models.py check MANIFEST.json      runs each listed model.pt on its input, prints {name: max |diff|}
  user_models.py train MANIFEST.json      trains each listed model file as PyTorch itself would (SGD steps on
                                          the batches ipj used) and writes its parameters and buffers after
Models take normalised images [B, 1, 28, 28] (flat_mlp: [B, 784]) and return logits [B, 10]; NAME ends in
_scripted (torch.jit.script) or _traced (torch.jit.trace).
"""
import json
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, inputs=784, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 64)
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class FlatMlp(Mlp):
    def forward(self, x):  # x: [B, 784]
        return self.fc2(F.relu(self.fc1(x)))


class ViewMlp(Mlp):
    def forward(self, x):  # the tutorials' x.view(x.size(0), -1)
        x = x.view(x.size(0), -1)
        return self.fc2(F.relu(self.fc1(x)))


def seq_mlp():  # three Linear layers in nn.Sequential, an in-place ReLU
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(inplace=True), nn.Linear(64, 32), nn.ReLU(),
                         nn.Linear(32, 10))


class DropoutMlp(Mlp):
    """Active dropout when scripted; traced in eval mode, dropout(x, 0.2, False) passes values through."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


class TiedMlp(Mlp):
    """One hidden Linear applied twice: its weight is used by two layers of the chain."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(64, 64)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.hidden(x))
        return self.fc2(F.relu(self.hidden(x)))


def no_bias_mlp():
    model = Mlp()
    model.fc1 = nn.Linear(784, 64, bias=False)
    return model


def partly_frozen_mlp():  # fc1 frozen (fine-tuning the head only)
    model = Mlp()
    model.fc1.requires_grad_(False)
    return model


class ReluLogitsMlp(Mlp):
    def forward(self, x):
        return F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))


class CnnBn(nn.Module):
    """Conv + BatchNorm + ReLU + pool, dropout, linear: BN statistics and dropout masks exercise train mode."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)  # [B, 8, 14, 14]
        return self.fc(self.drop(x.flatten(1)))


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))  # residual add


class SmallResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(Block(8), Block(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))


class TiedResidual(nn.Module):
    """Both convolutions feed a residual add: structured pruning can only narrow the tiny head (fc1)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(16, 4)
        self.fc2 = nn.Linear(4, 10)

    def forward(self, x):
        y = F.relu(self.conv1(x))
        y = y + F.relu(self.conv2(y))
        return self.fc2(F.relu(self.fc1(self.pool(y).flatten(1))))


class NoParameters(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]


class TupleOutput(Mlp):
    def forward(self, x):
        y = self.fc2(F.relu(self.fc1(x.flatten(1))))
        return y, y


class DepthwiseBnHardswish(nn.Module):
    """Depthwise convolution + BatchNorm + hardswish: LibTorch 1.13's optimize_for_inference miscomputes it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(12, 12, 3, groups=12, bias=False)
        self.bn = nn.BatchNorm2d(12)
        with torch.no_grad():  # statistics far from the defaults, so that folding them matters
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 2)
            self.bn.bias.uniform_(-1, 1)
        self.eval()

    def forward(self, x):
        return F.hardswish(self.bn(self.conv(x.repeat(1, 12, 1, 1)))).flatten(1)


class NegativeClamp(nn.Module):
    """A 1x1 convolution of +-0.1 weights then clamp(-0.5, 0.7): LibTorch 1.13's optimize_for_inference runs the
    clamp as MKLDNNClamp_, wrong where values fall below 0 (on [0, 1) pixels the convolution never reaches -0.5,
    so only wider inputs show it)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 1)
        self.fc = nn.Linear(4 * 28 * 28, 10)
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor([0.1, -0.1, 0.05, -0.05]).view(4, 1, 1, 1))
            self.conv.bias.zero_()
        self.eval()

    def forward(self, x):
        return self.fc(torch.clamp(self.conv(x), -0.5, 0.7).flatten(1))


class SharedConvBn(nn.Module):
    """A convolution used twice, once before BatchNorm, residual adds and a ceil-mode max pool: the graph
    LibTorch 1.13's XNNPACK path (ipj's optimizeForMobile graph) makes of it differs from eager by ~0.2 at
    batch 64 (a hostile pass, 12-07), where XNNPACK's runtime of ipj's graph IR is exact."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)  # [B, 3, 32, 32] inputs
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(16)
        self.c3 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.b3 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)
        with torch.no_grad():  # statistics far from the defaults, so that folding them matters
            for bn in (self.b1, self.b2, self.b3):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.3, 0.3)
        self.eval()

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(x)))
        x = F.relu(x + self.b3(self.c3(y)))
        z = F.relu(self.c2(x)) + x
        z = F.max_pool2d(z, 3, 2, ceil_mode=True)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(z, 1), 1))


class InplaceInput(nn.Module):
    """Changes its input in place: every call must get its own copy when two engines are compared."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        x.add_(1.0)
        x.mul_(0.5)
        return self.fc(x.flatten(1))


class ViewThenInplaceRelu(nn.Module):
    """ReLUs a tensor in place after taking a view of it: eager's view sees the ReLU, LibTorch 1.13's frozen
    graph drops it (a hostile pass: ONNX export wrote that graph without a word)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 28 * 28, 10)

    def forward(self, x):
        a = self.conv(x)
        f = a.view(a.size(0), -1)
        a.relu_()
        return self.fc(f)


class ComplexOutput(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x.flatten(1)[:, :10])


class NanOutput(Mlp):
    """NaN in every place where fc2's output is below zero, the same places on every engine."""

    def forward(self, x):
        return torch.sqrt(self.fc2(F.relu(self.fc1(x.flatten(1)))))


def resnet18():
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, 7, stride=2, padding=3, bias=False)  # 1-channel stem
    return model


def mobilenet_v2():
    import torchvision
    model = torchvision.models.mobilenet_v2(num_classes=10)
    model.features[0][0] = nn.Conv2d(1, 32, 3, stride=2, padding=1, bias=False)  # 1-channel stem
    return model


ARCHITECTURES = {
    "mlp": Mlp, "flat_mlp": FlatMlp, "cnn_bn": CnnBn, "residual": SmallResidual, "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2, "wrong_classes": lambda: Mlp(classes=5), "wrong_input": lambda: Mlp(inputs=3 * 32 * 32),
    "no_parameters": NoParameters, "tuple_output": TupleOutput, "tied_residual": TiedResidual,
    "depthwise_bn_hardswish": DepthwiseBnHardswish, "negative_clamp": NegativeClamp, "shared_conv_bn": SharedConvBn,
    "inplace_input": InplaceInput, "complex_output": ComplexOutput, "view_then_inplace_relu": ViewThenInplaceRelu,
    "nan_output": NanOutput, "view_mlp": ViewMlp, "seq_mlp": seq_mlp, "dropout_mlp": DropoutMlp,
    "tied_mlp": TiedMlp, "no_bias_mlp": no_bias_mlp, "partly_frozen_mlp": partly_frozen_mlp,
    "relu_logits_mlp": ReluLogitsMlp,
}


def make(out_dir, name):
    path = f"{out_dir}/{name}.pt"
    if name == "garbage":
        open(path, "wb").write(b"this is not a zip archive" * 100)
        return
    torch.manual_seed(sum(map(ord, name)))
    architecture, _, kind = name.rpartition("_")
    if name == "state_dict":  # torch.save of weights: a zip archive but not TorchScript
        torch.save(Mlp().state_dict(), path)
        return
    if kind == "frozen":  # torch.jit.freeze turns the weights into constants: nothing left to train
        torch.jit.freeze(torch.jit.script(Mlp().eval())).save(path)
        return
    model = ARCHITECTURES[architecture]()
    if kind == "scripted":
        torch.jit.script(model).save(path)
    elif kind == "traced":
        example = torch.randn(2, 784) if architecture == "flat_mlp" else torch.randn(2, 1, 28, 28)
        # Traced in eval mode, as models are exported: tracing records BatchNorm's and dropout's training flag
        # as a constant, so the traced module keeps eval behaviour (running statistics, no dropout) even while
        # ipj trains its weights.
        torch.jit.trace(model.eval(), example).save(path)
    else:
        raise SystemExit(f"unknown model name {name}: ARCHITECTURE_scripted|_traced, garbage, state_dict, mlp_frozen")


def read(path, shape, dtype="<f4"):
    return torch.from_numpy(np.fromfile(path, dtype=dtype).reshape(shape).copy())


def write(path, tensor):
    tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(path)


def check(manifest_path):
    """Each entry: model (a trained model.pt), original (the file it was trained from), input (.bin, shape),
    expected (.bin): ipj's outputs."""
    result = {}
    for entry in json.load(open(manifest_path)):
        extra = {"ipj.json": ""}
        model = torch.jit.load(entry["model"], _extra_files=extra)
        x = read(entry["input"], entry["shape"])
        with torch.no_grad():
            y = model(x)
        expected = read(entry["expected"], list(y.shape))
        original = dict(torch.jit.load(entry["original"]).named_parameters())
        changed = max((value - original[name]).abs().max().item() for name, value in model.named_parameters())
        result[entry["name"]] = {"max_abs_diff": (y - expected).abs().max().item(), "max_abs": y.abs().max().item(),
                                 "training": model.training,
                                 "has_ipj_json": bool(extra["ipj.json"]), "changed_from_original": changed}
    print(json.dumps(result))


def train(manifest_path):
    """Each entry: model (the untrained file), lr, momentum, weight_decay, batches [{input, shape, labels}],
    out (a folder for after.NAME.bin of every floating-point parameter and buffer)."""
    torch.set_num_threads(1)
    for entry in json.load(open(manifest_path)):
        model = torch.jit.load(entry["model"])
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=entry["lr"], momentum=entry["momentum"],
                                    weight_decay=entry["weight_decay"])
        for batch in entry["batches"]:
            optimizer.zero_grad()
            logits = model(read(batch["input"], batch["shape"]))
            F.cross_entropy(logits, torch.tensor(batch["labels"], dtype=torch.int64)).backward()
            optimizer.step()
        for name, value in list(model.named_parameters()) + list(model.named_buffers()):
            if value.is_floating_point():
                write(f"{entry['out']}/after.{name}.bin", value)


def main():
    command = sys.argv[1]
    if command == "make":
        for name in sys.argv[3:]:
            make(sys.argv[2], name)
    elif command == "check":
        check(sys.argv[2])
    elif command == "train":
        train(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
