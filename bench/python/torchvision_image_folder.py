"""One shuffled epoch of torchvision's ImageFolder + DataLoader over DIR/train (Grayscale, ToTensor, Normalize,
batch 128): the Python reference for bench/image_folder.sh. Prints one JSON object.
Usage: /usr/bin/python3 torchvision_image_folder.py DIR NUM_WORKERS
"""
import json
import sys
import time

import torch
from torchvision import datasets, transforms


def main():
    root, workers = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(1)
    start = time.perf_counter()
    transform = transforms.Compose([transforms.Grayscale(), transforms.ToTensor(),
                                    transforms.Normalize((0.286,), (0.353,))])
    dataset = datasets.ImageFolder(root + "/train", transform=transform)
    list_s = time.perf_counter() - start
    loader = torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True, num_workers=workers)
    start = time.perf_counter()
    count = 0
    for images, labels in loader:
        count += images.shape[0]
    epoch_s = time.perf_counter() - start
    print(json.dumps({"num_workers": workers, "images": count, "list_s": round(list_s, 4),
                      "epoch_s": round(epoch_s, 4), "epoch_images_per_s": round(count / epoch_s)}))


if __name__ == "__main__":
    main()
