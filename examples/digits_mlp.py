"""Train a two-layer MLP on scikit-learn's 8x8 handwritten digits with loom.

The data ships inside scikit-learn (1,797 real scans, 10 classes), so the demo
runs offline on a fresh machine. It trains with mini-batch SGD and momentum,
prints the loss per epoch and the held-out accuracy at the end.

    python examples/digits_mlp.py --epochs 20
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F


def load_digits_split(seed: int):
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("This demo needs scikit-learn for its bundled digits data: "
                         "pip install scikit-learn (or pip install -e '.[demo]')") from None
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    loom.manual_seed(args.seed)
    xtr, ytr, xte, yte = load_digits_split(args.seed)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = loom.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    print(f"digits: {len(xtr)} train / {len(xte)} test images, MLP 64-{args.hidden}-10")
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(xtr))
        total, batches = 0.0, 0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            logits = model(loom.from_numpy(xtr[idx]))
            loss = F.cross_entropy(logits, loom.from_numpy(ytr[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            batches += 1
        if epoch == 1 or epoch % 5 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:3d}  train loss {total / batches:.4f}")
    model.eval()
    with loom.no_grad():
        pred = model(loom.from_numpy(xte)).argmax(1).numpy()
    acc = float((pred == yte).mean())
    print(f"test accuracy {acc:.4f}  ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
