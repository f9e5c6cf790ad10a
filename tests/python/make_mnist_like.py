"""Writes a small MNIST-shaped data set (the four IDX files, gzipped) to a
directory, so CI can run `train --data-dir` on the 28x28 seed CNN without
downloading MNIST. Class c is a bright 6x6 square at one of 10 fixed places,
plus noise: learnable, so the smoke run's accuracy means something.

usage: make_mnist_like.py DIR [N_TRAIN] [N_TEST]
"""
import gzip
import struct
import sys
from pathlib import Path

import numpy as np


def idx(path: Path, arr: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + b"".join(
        struct.pack(">I", d) for d in arr.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def make(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, 10, size=n)
    images = rng.integers(0, 60, size=(n, 28, 28))
    for i, c in enumerate(labels):
        r, col = 2 + 8 * (c // 4), 2 + 6 * (c % 4)
        images[i, r : r + 6, col : col + 6] = 255
    return images, labels


out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 640
n_test = int(sys.argv[3]) if len(sys.argv) > 3 else 200
for split, n in (("train", n_train), ("t10k", n_test)):
    images, labels = make(n, rng)
    idx(out / f"{split}-images-idx3-ubyte.gz", images)
    idx(out / f"{split}-labels-idx1-ubyte.gz", labels)
print(f"wrote {n_train} train and {n_test} test images to {out}")
