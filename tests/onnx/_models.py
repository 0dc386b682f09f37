"""Small versions of the example models, shared by the ONNX tests."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import loom
import loom.nn as nn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_module(name: str):
    """Import an example as a module (its folder on sys.path, for `_common`)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return __import__(name)


class LSTMClassifier(nn.Module):
    """An LSTM over a sequence, then a linear layer on the last step."""

    def __init__(self, features: int = 5, hidden: int = 6, classes: int = 3) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


def images(batch: int, seed: int = 0) -> loom.Tensor:
    return loom.from_numpy(np.random.default_rng(seed).standard_normal((batch, 1, 28, 28)).astype(np.float32))


def tokens(batch: int, vocab: int = 11, context: int = 8, seed: int = 0) -> loom.Tensor:
    return loom.from_numpy(np.random.default_rng(seed).integers(0, vocab, (batch, context)).astype(np.int64))


def randn(*shape, seed: int = 0) -> loom.Tensor:
    return loom.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def cases():
    """(name, model, example-input maker by batch size, input name) for every batched model."""
    loom.manual_seed(0)
    cnn = example_module("fashion_cnn").Net()
    resnet = example_module("fashion_resnet").ResNet(blocks=1, widths=(4, 8))
    gpt = example_module("char_gpt").CharGPT(vocab=11, context=8, d_model=16, n_layers=1, n_heads=2, dropout=0.1)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 10))
    return [
        ("mlp", mlp, images, "x"),
        ("cnn", cnn, images, "x"),
        ("resnet", resnet, images, "x"),
        ("gpt", gpt, tokens, "idx"),
        ("lstm", LSTMClassifier(), lambda b, seed=0: randn(b, 4, 5, seed=seed), "x"),
    ]


def gcn_case():
    """The GCN example on a small random graph: (function of four tensors, their values, their names)."""
    gcn = example_module("gcn_cora")
    rng = np.random.default_rng(0)
    n = 12
    feats = (rng.random((n, 7)) < 0.4).astype(np.float32)
    feats[:, 0] = 1.0
    edges = rng.integers(0, n, size=(2, 20))
    loom.manual_seed(0)
    model = gcn.GCN(7, 5, 3, dropout=0.5).eval()
    x_idx, x_val = gcn.sparse_features(feats)
    a_idx, a_val = gcn.normalized_adjacency(edges, n)

    def fn(x_idx, x_val, a_idx, a_val):
        return model((x_idx, x_val), (a_idx, a_val), n)

    def adjacency(n_edges: int):
        return [loom.from_numpy(a) for a in gcn.normalized_adjacency(edges[:, :n_edges], n)]
    args = [loom.from_numpy(a) for a in (x_idx, x_val, a_idx, a_val)]
    return fn, args, ["x_indices", "x_values", "adj_indices", "adj_values"], adjacency
