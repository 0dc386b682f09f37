"""Write a loom dump and an input for the C example: a small CNN on a random 1x1x28x28 image.

    python examples/c_runtime/make_dump.py build/cnn.dump
    python -m loom.jit --out build/loomrt --example examples/c_runtime/main.c
    build/loomrt/loomrt_run build/cnn.dump build/cnn.dump/x.npy

The script also prints loom's own output, which the C program's must match.
"""
from __future__ import annotations

import os
import sys

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        return F.log_softmax(self.fc(F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)), -1)


def main(folder: str) -> None:
    loom.manual_seed(0)
    model = CNN().eval()
    x = loom.randn(1, 1, 28, 28)
    loom.jit.save(model, x, folder)
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    with loom.no_grad():
        print("loom:", np.array2string(model(x).numpy()[0, :8], precision=5))
    print(f"dump written to {folder}; input in {os.path.join(folder, 'x.npy')}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cnn.dump")
