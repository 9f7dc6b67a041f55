# The other int8 route for a user's TorchScript file: LibTorch's own graph-mode quantization passes
# (InsertObservers, InsertQuantDeQuant, Finalize in torch/csrc/jit/passes/quantization/), driven here through
# torch.ao.quantization.quantize_jit, which calls exactly those passes. Per model: whether the passes convert
# it, int8 vs fp32 argmax agreement and relative error on real test images, latency at each batch size, and
# with --accuracy the test-set accuracy of both (all 10,000 images, --calib training images for calibration).
# Prints one JSON object. Usage: graph_mode_quant.py MODELS_DIR [--engine qnnpack|onednn] [--batch 1,64]
#   [--names a,b] [--calib 512] [--accuracy]
import argparse
import json
import sys
import time

import torch
from torch.ao.quantization import get_default_qconfig, quantize_jit

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/tests/quant")
import make_graph_models as models  # noqa: E402  (Fashion-MNIST readers, MEAN, STD)


def latency_ms(model, batch, pixels, seconds=0.5):
    x = pixels[:batch] if batch <= pixels.size(0) else pixels[:1].expand(batch, -1, -1, -1).contiguous()
    with torch.no_grad():
        for _ in range(3):
            model(x)
        times = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 5:
            start = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def test_accuracy(model):
    images = (models.images("test", 10000) - models.MEAN) / models.STD
    labels = models.labels("test", 10000)
    correct = 0
    with torch.no_grad():
        for start in range(0, images.size(0), 500):
            correct += (model(images[start:start + 500]).argmax(1) == labels[start:start + 500]).sum().item()
    return correct / images.size(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("models_dir")
    parser.add_argument("--engine", default="qnnpack")
    parser.add_argument("--batch", default="1,64")
    parser.add_argument("--names", default="residual_trained,resnet18_scripted,mobilenet_v2_scripted")
    parser.add_argument("--calib", type=int, default=512)
    parser.add_argument("--accuracy", action="store_true")
    args = parser.parse_args()
    torch.backends.quantized.engine = args.engine
    calibration = (models.images("train", args.calib) - models.MEAN) / models.STD
    test = (models.images("test", 256) - models.MEAN) / models.STD
    rows = []
    for name in args.names.split(","):
        fp32 = torch.jit.load(f"{args.models_dir}/{name}.pt").eval()
        row = {"model": name, "engine": args.engine}
        try:
            def calibrate(model, data):
                with torch.no_grad():
                    for start in range(0, data.size(0), 128):
                        model(data[start:start + 128])

            started = time.perf_counter()
            int8 = quantize_jit(fp32, {"": get_default_qconfig(args.engine)}, calibrate, [calibration])
            row["convert_s"] = time.perf_counter() - started
            with torch.no_grad():
                expected, actual = fp32(test), int8(test)
            row["argmax_agreement"] = (expected.argmax(1) == actual.argmax(1)).float().mean().item()
            row["relative_error"] = ((actual - expected).norm() / expected.norm()).item()
            if args.accuracy:
                row["fp32_acc"], row["int8_acc"] = test_accuracy(fp32), test_accuracy(int8)
                row["acc_drop_pt"] = 100 * (row["fp32_acc"] - row["int8_acc"])
            row["quantized_ops"] = sorted({n.kind() for n in int8.graph.nodes() if "quantized::" in n.kind()})
            for batch in map(int, args.batch.split(",")):
                row[f"fp32_p50_ms_b{batch}"] = latency_ms(fp32, batch, test)
                row[f"int8_p50_ms_b{batch}"] = latency_ms(int8, batch, test)
        except Exception as error:  # the passes refuse or break the model: record what they said
            row["error"] = str(error).splitlines()[0][:300]
        rows.append(row)
    print(json.dumps({"torch": torch.__version__, "rows": rows}))


if __name__ == "__main__":
    main()
