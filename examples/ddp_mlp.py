"""Data-parallel training of an MLP on scikit-learn's digits with loom.distributed, as a PyTorch DDP script.

Launch it on 2 processes (Open MPI underneath):

    python -m loom.distributed.run --nproc 2 examples/ddp_mlp.py --epochs 10

or with ``mpirun -n 2 python examples/ddp_mlp.py``. Each rank reads its own
shard of every epoch (``DistributedSampler``), computes the gradient of its
shard's loss, and ``DistributedDataParallel`` averages the gradients across
ranks after ``loss.backward()``, so every replica takes the same step: the run
equals one process training on the whole batch of ``--batch-size`` x ranks.
Rank 0 prints the mean loss over ranks per epoch and the held-out accuracy.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import loom
import loom.distributed as dist
import loom.nn as nn
import loom.nn.functional as F
from loom.nn.parallel import DistributedDataParallel as DDP


def load_digits_split(seed: int):
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("This demo needs scikit-learn for its bundled digits data: pip install scikit-learn") from None
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = len(x) // 5
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loom.manual_seed(args.seed + rank)  # Different initial weights: DDP broadcasts rank 0's.
    xtr, ytr, xte, yte = load_digits_split(args.seed)
    train = loom.data.TensorDataset(loom.tensor(xtr), loom.tensor(ytr))
    sampler = loom.data.DistributedSampler(train, shuffle=True, seed=args.seed, drop_last=True)
    loader = loom.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = DDP(nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    opt = loom.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"ddp digits: {world} ranks x batch {args.batch_size}, {len(sampler)} samples per rank per epoch")

    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # A new shuffle each epoch, the same on every rank.
        total, batches = loom.zeros(()), 0
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()  # DDP all-reduces the gradients here.
            opt.step()
            total += loss.detach()
            batches += 1
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch + 1:2d}  loss {float(total) / batches:.4f}", flush=True)
    with loom.no_grad():
        acc = float((model(loom.tensor(xte)).argmax(1) == loom.tensor(yte)).float().mean())
    if rank == 0:
        print(f"test accuracy {acc:.3f}  ({time.perf_counter() - start:.1f} s)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
