# Writes TorchScript models made by Debian's python3-torch and the outputs PyTorch itself computes for them,
# for ipj's inference tests. Usage: make_torchscript_golden.py OUT_DIR
import sys

import torch


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)  # [B, 8, 14, 14]
        return self.fc(x.flatten(1))  # [B, 10]


class Holder(torch.nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, value in tensors.items():
            self.register_buffer(name, value)


def main(out_dir):
    torch.manual_seed(11)
    model = SmallNet()
    with torch.no_grad():  # non-trivial BN statistics
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    model.eval()
    x = torch.rand(5, 1, 28, 28)
    with torch.no_grad():
        expected = model(x)
        normalized_expected = model((x - 0.25) / 0.5)
    torch.jit.script(model).save(f"{out_dir}/scripted.pt")
    torch.jit.trace(model, x).save(f"{out_dir}/traced.pt")
    torch.jit.script(Holder({"input": x, "expected": expected, "normalized_expected": normalized_expected})).save(
        f"{out_dir}/golden.pt")


if __name__ == "__main__":
    main(sys.argv[1])
