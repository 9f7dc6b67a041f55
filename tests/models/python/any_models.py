#!/usr/bin/python3
"""Modern small architectures that ipj's graph importer does not cover, made and checked by Debian's python3-torch
for the tests of `ipj quantize --mode dynamic` and `ipj prune` on any TorchScript model.

  any_models.py make OUT_DIR NAME...   writes OUT_DIR/NAME.pt; NAME is ARCHITECTURE_scripted or ARCHITECTURE_traced
  any_models.py check MANIFEST.json    for each entry {name, original, quantized, pruned}: compares ipj's int8 file
                                       with torch.ao.quantization.quantize_dynamic of the same model, and ipj's pruned
                                       file with the float model whose pruned weights are zeroed; prints JSON
  any_models.py check-static MANIFEST.json   for each entry {name, static, images}: runs ipj's static int8 file
                                       in PyTorch against the float model on test images; prints JSON
Models take images [B, 1, 16, 16] in [0, 1] and return logits [B, 10]. Tiny on purpose (fast tests).
"""
import json
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduced):
        super().__init__()
        self.down = nn.Linear(channels, reduced)
        self.up = nn.Linear(reduced, channels)

    def forward(self, x):
        scale = torch.sigmoid(self.up(F.silu(self.down(x.mean((2, 3))))))
        return x * scale[:, :, None, None]


class SeCnn(nn.Module):
    """Conv + SiLU + squeeze-excite (linear layers, sigmoid gate) + pool + linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.se = SqueezeExcite(8, 4)
        self.head = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.se(F.silu(self.conv(x)))
        return self.head(F.avg_pool2d(x, 4).flatten(1))


class ConcatNet(nn.Module):
    """Two branches concatenated on channels (an inception-style block)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 5, padding=2)
        self.mix = nn.Conv2d(8, 8, 1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = torch.cat([F.relu(self.a(x)), F.elu(self.b(x))], dim=1)
        return self.head(F.adaptive_avg_pool2d(F.relu(self.mix(x)), 1).flatten(1))


class ShuffleNet(nn.Module):
    """Grouped convolutions with a channel shuffle between them (ShuffleNet's view/transpose/reshape)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.group1 = nn.Conv2d(8, 8, 1, groups=2)
        self.group2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.group1(F.relu(self.stem(x))))
        b, c, h, w = x.shape
        x = x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        x = F.hardswish(self.group2(x))
        return self.head(x.mean((2, 3)))


class NormNet(nn.Module):
    """GroupNorm and LayerNorm with GELU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.group_norm = nn.GroupNorm(2, 8)
        self.fc = nn.Linear(8 * 8 * 8, 32)
        self.layer_norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.gelu(self.group_norm(self.conv(x))).flatten(1)
        return self.head(F.gelu(self.layer_norm(self.fc(x))))


class TinyTransformer(nn.Module):
    """4x4 patches -> linear embedding -> one encoder block (nn.MultiheadAttention, GELU MLP, LayerNorm)."""

    def __init__(self, dim=16):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.position = nn.Parameter(torch.randn(1, 16, dim) * 0.1)
        self.attention = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        b = x.shape[0]
        patches = x.reshape(b, 4, 4, 4, 4).permute(0, 1, 3, 2, 4).reshape(b, 16, 16)  # [B, tokens, 4*4]
        tokens = self.embed(patches) + self.position
        attended, _ = self.attention(tokens, tokens, tokens, need_weights=False)
        tokens = self.norm1(tokens + attended)
        tokens = self.norm2(tokens + self.fc2(F.gelu(self.fc1(tokens))))
        return self.head(tokens.mean(1))


class TinyEncoder(nn.Module):
    """4x4 patches -> nn.TransformerEncoderLayer x2 (batch_first: PyTorch's fused inference path,
    aten::_transformer_encoder_layer_fwd), one post-norm with ReLU, one pre-norm with GELU."""

    def __init__(self, dim=16):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.post_norm = nn.TransformerEncoderLayer(dim, 2, 2 * dim, batch_first=True)
        self.pre_norm = nn.TransformerEncoderLayer(dim, 2, 2 * dim, activation="gelu", norm_first=True,
                                                   batch_first=True)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        b = x.shape[0]
        patches = x.reshape(b, 4, 4, 4, 4).permute(0, 1, 3, 2, 4).reshape(b, 16, 16)  # [B, tokens, 4*4]
        return self.head(self.pre_norm(self.post_norm(self.embed(patches))).mean(1))


class TanhMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class TinyVit(nn.Module):
    """ViT-like: conv patches, class token and position nn.Parameters, pre-norm encoder block
    (nn.MultiheadAttention, tanh GELU MLP, dropout, stochastic depth), class token x[:, 0] -> head."""

    def __init__(self, dim=16):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 4, stride=4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        self.position = nn.Parameter(torch.randn(1, 17, dim) * 0.1)
        self.drop = nn.Dropout(0.1)
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        self.drop_path = 0.1

    def stochastic_depth(self, x):
        if not self.training or self.drop_path == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, 1) > self.drop_path
        return x * keep / (1.0 - self.drop_path)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)  # [B, 16, dim]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.drop(torch.cat([cls, x], dim=1) + self.position)
        y = self.norm1(x)
        attended, _ = self.attention(y, y, y, need_weights=False)
        x = x + self.stochastic_depth(attended)
        x = x + self.stochastic_depth(self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh")))
        return self.head(self.norm(x)[:, 0])


class MixedOps(nn.Module):
    """GroupNorm, hardswish/hardsigmoid, LeakyReLU, ELU, ReLU6, dilated/grouped conv, pools with ceil_mode and
    padding, chunk/stack/permute/split, BatchNorm1d/2d, softmax and log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=2, dilation=2)
        self.bn = nn.BatchNorm2d(8)
        self.group_norm = nn.GroupNorm(4, 8)
        self.grouped = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4)
        self.bn1d = nn.BatchNorm1d(40)
        self.fc = nn.Linear(40, 10)
        with torch.no_grad():
            for bn in (self.bn, self.bn1d):
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = F.leaky_relu(self.bn(self.conv(x)), 0.1)  # [B, 8, 16, 16]
        x = F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)  # [B, 8, 8, 8]
        x = F.hardswish(self.group_norm(x))
        a, b = x.chunk(2, dim=1)
        x = torch.cat([F.elu(a), F.relu6(b) * F.hardsigmoid(b)], dim=1)
        x = F.max_pool2d(self.grouped(x), 3, stride=2, ceil_mode=True)  # [B, 8, 3, 3]... -> [B, 8, 2, 2]
        p, q = torch.split(x, [3, 5], dim=1)
        pooled = torch.stack([p.mean((2, 3)).sum(1), q.mean((2, 3)).sum(1)], dim=1)  # [B, 2]
        features = torch.cat([x.permute(0, 2, 3, 1).flatten(1), pooled.unsqueeze(2).expand(-1, -1, 4).reshape(x.shape[0], 8)], 1)
        features = self.bn1d(features)
        logits = self.fc(features)
        return F.log_softmax(logits, dim=-1) + F.softmax(logits, dim=1)


class SortNet(nn.Module):
    """torch.sort: an operator without an ONNX form in ipj's exporter (for the refusal test)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc(torch.sort(x.flatten(1), dim=1)[0])


class ReluChain(nn.Module):
    """Three conv+BN+ReLU (one int8 region worth its borders), then SiLU and a small linear head (float)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(F.silu(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)))


ARCHITECTURES = {"se_cnn": SeCnn, "concat": ConcatNet, "shuffle": ShuffleNet, "norms": NormNet,
                 "transformer": TinyTransformer, "tanh_mlp": TanhMlp, "vit": TinyVit, "mixed": MixedOps,
                 "sort": SortNet, "relu_chain": ReluChain, "encoder": TinyEncoder}


def eager(name):
    """The model NAME.pt was made from (same seed, same weights), in eval mode."""
    torch.manual_seed(sum(map(ord, name)))
    architecture = name.rpartition("_")[0]
    return ARCHITECTURES[architecture]().eval()


def make(out_dir, name):
    model = eager(name)
    kind = name.rpartition("_")[2]
    if kind == "scripted":
        module = torch.jit.script(model)
    elif kind == "traced":
        module = torch.jit.trace(model, torch.rand(2, 1, 16, 16), check_trace=False)
    else:
        raise SystemExit(f"unknown model name {name}: ARCHITECTURE_scripted|_traced")
    module.save(f"{out_dir}/{name}.pt")


def check_pruned(model, path, x):
    """Largest |pruned file - float model with the file's zeros| and the smallest sparsity of a pruned weight."""
    pruned = torch.jit.load(path)
    original = dict(model.named_parameters())
    lowest = 1.0
    kept_changed = 0.0
    with torch.no_grad():
        for name, value in pruned.named_parameters():
            if name.endswith("weight") and value.dim() >= 2:
                lowest = min(lowest, (value == 0).float().mean().item())
                kept_changed = max(kept_changed, (value - original[name] * (value != 0)).abs().max().item())
                original[name].mul_(value != 0)
        return {"pruned_vs_masked_float": (pruned(x) - model(x)).abs().max().item(), "lowest_sparsity": lowest,
                "kept_weights_changed": kept_changed}


def check(manifest_path):
    torch.backends.quantized.engine = "onednn"
    result = {}
    for entry in json.load(open(manifest_path)):
        model = eager(entry["name"])
        torch.manual_seed(0)
        x = torch.rand(16, 1, 16, 16)
        with torch.no_grad():
            expected = model(x)
            made = torch.jit.load(entry["original"])(x)
            reference = torch.ao.quantization.quantize_dynamic(model, dtype=torch.qint8)(x)
            ipj = torch.jit.load(entry["quantized"])(x)
        row = {"original_vs_eager": (made - expected).abs().max().item(),
               "ipj_vs_pytorch": (ipj - reference).abs().max().item(),
               "ipj_vs_float": (ipj - expected).abs().max().item(),
               "pytorch_vs_float": (reference - expected).abs().max().item(),
               "logit_scale": expected.abs().max().item()}
        if entry.get("pruned"):
            row.update(check_pruned(eager(entry["name"]), entry["pruned"], x))
        result[entry["name"]] = row
    print(json.dumps(result))


def idx_images(path, count):
    """The first COUNT images of an uncompressed IDX file as [COUNT, 1, H, W] floats in [0, 1]."""
    data = open(path, "rb").read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    pixels = torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)
    return pixels[:count].unsqueeze(1).float() / 255


def check_static(manifest_path):
    """For each entry {name, static, images}: PyTorch loads and runs ipj's static int8 file on the first 16 images of
    the IDX file IMAGES (the distribution it was calibrated on); its largest difference from the float model and
    the largest float logit."""
    torch.backends.quantized.engine = "onednn"
    result = {}
    for entry in json.load(open(manifest_path)):
        model = eager(entry["name"])
        x = idx_images(entry["images"], 16)
        with torch.no_grad():
            expected = model(x)
            static = torch.jit.load(entry["static"])
            ops = sorted({node.kind() for node in static.graph.nodes() if node.kind().startswith("quantized::")})
            got = static(x)
        result[entry["name"]] = {"static_vs_float": (got - expected).abs().max().item(),
                                 "logit_scale": expected.abs().max().item(), "quantized_ops": ops}
    print(json.dumps(result))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        for name in sys.argv[3:]:
            make(sys.argv[2], name)
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check-static":
        check_static(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
