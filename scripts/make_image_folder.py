#!/usr/bin/python3
"""Writes an MNIST-format (IDX) data set as a torchvision ImageFolder of PNG (or JPEG) files, for demos and tests.

  /usr/bin/python3 scripts/make_image_folder.py --data /usr/share/datasets/fashion-mnist --out /tmp/fashion-png \
      [--limit N] [--test-limit N] [--format png|jpg] [--also-idx DIR]

Layout: OUT/train/<label>-<name>/<index>.png and OUT/test/<label>-<name>/<index>.png, index = the sample's
position in the IDX file, zero-padded (so files sort in IDX order inside a class; folder names sort in label
order). --limit/--test-limit keep the first N samples of each IDX file. --also-idx DIR writes the same samples
as IDX files in the folder's sample order (class by class), with which `ipj train` gives bit-identical results
to training on the PNG folder. Needs PIL (python3-pil, which python3-torchvision brings) and numpy.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

FASHION_NAMES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                 "ankle-boot"]


def read_idx(directory, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            opener = gzip.open if candidate.endswith(".gz") else open
            with opener(path, "rb") as handle:
                content = handle.read()
            magic, = struct.unpack(">I", content[:4])
            if magic >> 8 != 0x08:
                sys.exit("%s: not an unsigned-byte IDX file (magic %#x)" % (path, magic))
            dims = struct.unpack(">" + "I" * (magic & 0xFF), content[4:4 + 4 * (magic & 0xFF)])
            values = np.frombuffer(content, dtype=np.uint8, offset=4 + 4 * len(dims))
            return values.reshape(dims)
    sys.exit("no %s[.gz] in %s" % (name, directory))


def write_idx(path, array):
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with open(path, "wb") as handle:
        handle.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def class_folder(label, fashion):
    return "%d-%s" % (label, FASHION_NAMES[label]) if fashion else str(label)


def write_split(images, labels, out, split, image_format, fashion):
    digits = len(str(len(images)))
    for label in sorted(set(labels.tolist())):
        os.makedirs(os.path.join(out, split, class_folder(label, fashion)), exist_ok=True)
    for index, (image, label) in enumerate(zip(images, labels)):
        path = os.path.join(out, split, class_folder(int(label), fashion),
                            "%0*d.%s" % (digits, index, image_format))
        if image_format == "png":
            Image.fromarray(image, "L").save(path, compress_level=6)
        else:
            Image.fromarray(image, "L").save(path, quality=95)
    # The folder's sample order (torchvision's and ipj's): by class, then by file name (= IDX index).
    return np.argsort(labels, kind="stable")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="IDX folder")
    parser.add_argument("--out", required=True, help="image folder to create (must not exist)")
    parser.add_argument("--limit", type=int, default=0, help="first N training samples (0 = all)")
    parser.add_argument("--test-limit", type=int, default=0, help="first N test samples (0 = all)")
    parser.add_argument("--format", choices=["png", "jpg"], default="png")
    parser.add_argument("--also-idx", help="also write the samples as IDX files in the folder's order here")
    arguments = parser.parse_args()
    if os.path.exists(arguments.out):
        sys.exit("--out %s exists; choose a new folder" % arguments.out)
    fashion = "fashion" in os.path.basename(os.path.normpath(arguments.data))
    splits = {"train": ("train", arguments.limit), "test": ("t10k", arguments.test_limit)}
    for split, (prefix, limit) in splits.items():
        images = read_idx(arguments.data, prefix + "-images-idx3-ubyte")
        labels = read_idx(arguments.data, prefix + "-labels-idx1-ubyte")
        if limit > 0:
            images, labels = images[:limit], labels[:limit]
        order = write_split(images, labels, arguments.out, split, arguments.format, fashion)
        if arguments.also_idx:
            os.makedirs(arguments.also_idx, exist_ok=True)
            write_idx(os.path.join(arguments.also_idx, prefix + "-images-idx3-ubyte"), images[order])
            write_idx(os.path.join(arguments.also_idx, prefix + "-labels-idx1-ubyte"), labels[order])
        print("%s: %d images" % (split, len(images)), file=sys.stderr)


if __name__ == "__main__":
    main()
