"""gcn: a 2-layer graph convolutional network on Cora, full graph per step, Adam.

Kipf & Welling's model on the Planetoid split of Cora
(``$LOOM_DATA_DIR/cora/cora.npz``, default under /work/shared/data): H1 =
ReLU(S X W1), logits = S H1 W2 with S = D^-1/2 (A + I) D^-1/2, 16 hidden
units, cross-entropy on the 140 training nodes, Adam (lr 0.01, weight decay
5e-4). S is applied as a sparse-dense product: gather the source rows of
every edge (``index_select``), scale them, and scatter-add them into the
target rows (``index_add``). Dropout is left out so that every framework
computes exactly the same step. Throughput counts the graph's nodes.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from loom.bench.workloads import Workload

HIDDEN = 16
LR, WEIGHT_DECAY = 0.01, 5e-4
NODES = 2708


def data_path() -> Path:
    return Path(os.environ.get("LOOM_DATA_DIR", "/work/shared/data")) / "cora" / "cora.npz"


def unavailable() -> str | None:
    path = data_path()
    return None if path.exists() else f"Cora data not found at {path} (set LOOM_DATA_DIR)"


def batches(rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
    """One batch, the whole graph: features, edge rows, edge columns, edge weights, train nodes, labels."""
    with np.load(data_path(), allow_pickle=False) as z:
        feats = z["features"].astype(np.float32)
        edges, labels, train = z["edges"], z["labels"], z["train_idx"]
    n = feats.shape[0]
    feats /= np.where(feats.sum(1, keepdims=True) == 0, 1, feats.sum(1, keepdims=True))
    loops = np.arange(n, dtype=np.int64)
    rows = np.concatenate([edges[0], edges[1], loops])
    cols = np.concatenate([edges[1], edges[0], loops])
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    values = (1.0 / np.sqrt(deg[rows] * deg[cols])).astype(np.float32)
    train = train.astype(np.int64)
    return [(feats, rows, cols, values, train, labels[train].astype(np.int64))]


def model(a):
    """The GCN as loom or torch modules; `spmm` is the gather/scatter-add propagation."""
    nn, F, lib = a.nn, a.F, a.lib

    def spmm(rows, cols, values, dense):
        messages = dense.index_select(0, cols) * values.unsqueeze(1)
        return lib.zeros(dense.shape[0], dense.shape[1], dtype=dense.dtype).index_add(0, rows, messages)

    class GCN(nn.Module):
        def __init__(self, in_features: int, classes: int):
            super().__init__()
            self.layer1 = nn.Linear(in_features, HIDDEN, bias=False)
            self.layer2 = nn.Linear(HIDDEN, classes, bias=False)

        def forward(self, x, rows, cols, values):
            h = F.relu(spmm(rows, cols, values, self.layer1(x)))
            return spmm(rows, cols, values, self.layer2(h))
    return GCN(1433, 7)


def optimizer(a, params):
    return a.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def loss(a, m, x, rows, cols, values, train, labels):
    return a.F.cross_entropy(m(x, rows, cols, values).index_select(0, train), labels)


WORKLOAD = Workload(
    name="gcn", description="GCN 1433-16-7 on Cora (gather/scatter-add), full graph, Adam (training step)",
    samples_per_step=NODES, unit="nodes", steps=10, quick_steps=1,
    batches=batches, model=model, optimizer=optimizer, loss=loss, unavailable=unavailable)
