"""Golden files for ipj's image-folder reader, written at test time with Debian's PIL and torchvision.

make_image_cases.py decoder OUT: one file per mode (PNG gray/RGB/palette/16-bit/RGBA/LA, JPEG gray/RGB/CMYK)
  and, for each, the pixels PIL's convert('L') and convert('RGB') give, as raw [C, H, W] uint8 files.
make_image_cases.py resize OUT: random L and RGB images and PIL's BILINEAR resize of them to several sizes
  (torchvision.transforms.Resize on a PIL image calls exactly that).
make_image_cases.py folder OUT: an ImageFolder (mixed formats and sizes) and torchvision's view of it:
  classes, samples (path, target) and pixels after Resize((20, 24)) + convert('RGB'), for comparison.
"""
import json
import os
import sys

import numpy as np
from PIL import Image


def planar(image):
    array = np.asarray(image, dtype=np.uint8)
    if array.ndim == 2:
        array = array[None, :, :]
    else:
        array = array.transpose(2, 0, 1)
    return np.ascontiguousarray(array)


def save_expected(out, name, image_l, image_rgb, manifest):
    planar(image_l).tofile(os.path.join(out, name + ".L.bin"))
    planar(image_rgb).tofile(os.path.join(out, name + ".RGB.bin"))
    manifest[name]["height"] = image_l.size[1]
    manifest[name]["width"] = image_l.size[0]


def decoder_cases(out):
    rng = np.random.RandomState(7)
    height, width = 13, 17
    gray = rng.randint(0, 256, (height, width), dtype=np.uint8)
    rgb = rng.randint(0, 256, (height, width, 3), dtype=np.uint8)
    rgba = np.concatenate([rgb, rng.randint(0, 256, (height, width, 1), dtype=np.uint8)], axis=2)
    # Smooth content for JPEG (noise is legal but makes every coefficient matter).
    y, x = np.mgrid[0:height, 0:width]
    smooth = np.stack([(x * 15) % 256, (y * 19) % 256, ((x + y) * 7) % 256], axis=2).astype(np.uint8)
    manifest = {}

    def add(name, image, save_kwargs=None, expected=None):
        path = os.path.join(out, name)
        image.save(path, **(save_kwargs or {}))
        manifest[name] = {"mode": image.mode}
        opened = Image.open(path)
        if expected is None:
            expected_l, expected_rgb = opened.convert("L"), opened.convert("RGB")
        else:
            expected_l, expected_rgb = expected
        save_expected(out, name, expected_l, expected_rgb, manifest)

    add("gray.png", Image.fromarray(gray, "L"))
    add("rgb.png", Image.fromarray(rgb, "RGB"))
    add("palette.png", Image.fromarray(rgb, "RGB").quantize(colors=37))
    palette_transparent = Image.fromarray(rgb, "RGB").quantize(colors=16)
    palette_transparent.info["transparency"] = 3
    add("palette_trns.png", palette_transparent, {"transparency": 3})
    add("gray_trns.png", Image.fromarray(gray, "L"), {"transparency": int(gray[0, 0])})
    add("rgba.png", Image.fromarray(rgba, "RGBA"))
    add("gray_alpha.png", Image.fromarray(rgba[:, :, ::3].copy(), "LA"))
    # 16-bit grey: PIL's convert clips values above 255; ipj rounds v / 257 (documented): the reference is
    # numpy's rounding.
    wide = (rng.randint(0, 65536, (height, width))).astype(np.uint16)
    Image.fromarray(wide.astype(np.int32), "I").save(os.path.join(out, "gray16.png"))
    assert Image.open(os.path.join(out, "gray16.png")).mode.startswith("I")
    manifest["gray16.png"] = {"mode": "I;16"}
    rounded = Image.fromarray(((wide.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8), "L")
    save_expected(out, "gray16.png", rounded, rounded.convert("RGB"), manifest)
    add("gray.jpg", Image.fromarray(gray, "L"), {"quality": 90})
    add("rgb.jpg", Image.fromarray(smooth, "RGB"), {"quality": 90})
    add("rgb444.jpeg", Image.fromarray(smooth, "RGB"), {"quality": 80, "subsampling": 0})
    add("progressive.JPG", Image.fromarray(smooth, "RGB"), {"quality": 85, "progressive": True})
    cmyk = Image.fromarray(np.concatenate([smooth, (x[:, :, None] * 5).astype(np.uint8)], axis=2), "CMYK")
    add("cmyk.jpg", cmyk, {"quality": 95})
    with open(os.path.join(out, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)


def resize_cases(out):
    rng = np.random.RandomState(11)
    cases = []
    sources = {"L": rng.randint(0, 256, (37, 29), dtype=np.uint8),
               "RGB": rng.randint(0, 256, (23, 41, 3), dtype=np.uint8)}
    targets = [(28, 28), (7, 5), (60, 90), (37, 11), (16, 29), (1, 1), (100, 3)]
    for mode, array in sources.items():
        image = Image.fromarray(array, mode)
        source_name = "source_%s.bin" % mode
        planar(image).tofile(os.path.join(out, source_name))
        for height, width in targets:
            name = "resized_%s_%dx%d.bin" % (mode, height, width)
            planar(image.resize((width, height), Image.BILINEAR)).tofile(os.path.join(out, name))
            cases.append({"mode": mode, "channels": len(mode), "source": source_name,
                          "height": array.shape[0], "width": array.shape[1],
                          "target_height": height, "target_width": width, "expected": name})
    with open(os.path.join(out, "manifest.json"), "w") as handle:
        json.dump(cases, handle)


def folder_case(out):
    import torch
    from torchvision import datasets, transforms
    rng = np.random.RandomState(5)
    root = os.path.join(out, "images")
    # Class names whose byte order differs from case-insensitive order; a nested subfolder; mixed formats.
    layout = {"train": {"b": 3, "a": 2, "B": 2, "a_b": 2}, "test": {"a": 1, "B": 1, "b": 2, "a_b": 1}}
    for split, classes in layout.items():
        for name, count in classes.items():
            for index in reversed(range(count)):  # written in reverse: order must not depend on listing
                folder = os.path.join(root, split, name, "nested" if index == 2 else "")
                os.makedirs(folder, exist_ok=True)
                height, width = int(rng.randint(18, 40)), int(rng.randint(18, 40))
                array = rng.randint(0, 256, (height, width, 3), dtype=np.uint8)
                kind = index % 3
                if kind == 0:
                    Image.fromarray(array[:, :, 0], "L").save(os.path.join(folder, "img%d.png" % index))
                elif kind == 1:
                    Image.fromarray(array, "RGB").save(os.path.join(folder, "img%d.PNG" % index))
                else:
                    Image.fromarray(array, "RGB").save(os.path.join(folder, "img%d.jpg" % index), quality=92)
    transform = transforms.Compose([transforms.Resize((20, 24)), transforms.PILToTensor()])
    report = {}
    for split in ("train", "test"):
        dataset = datasets.ImageFolder(os.path.join(root, split), transform=transform)
        report[split] = {"classes": dataset.classes,
                         "samples": [[os.path.relpath(path, root), target] for path, target in dataset.samples]}
        pixels = torch.stack([dataset[index][0] for index in range(len(dataset))]).numpy().astype(np.uint8)
        pixels.tofile(os.path.join(out, split + ".RGB.bin"))
    with open(os.path.join(out, "manifest.json"), "w") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    kind, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    {"decoder": decoder_cases, "resize": resize_cases, "folder": folder_case}[kind](out)
