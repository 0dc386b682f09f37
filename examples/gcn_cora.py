"""Train a two-layer graph convolutional network (Kipf & Welling, 2017) on the Cora citation graph.

Semi-supervised node classification on the standard Planetoid split: 140
labelled papers for training, 500 for validation, 1,000 for testing. The
propagation matrix is the symmetrically normalised adjacency with self loops,
D^-1/2 (A + I) D^-1/2, applied as a sparse-dense product (gather the source
rows of every edge, scale, scatter-add into the target rows) rather than a
dense 2708 x 2708 matmul. The row-normalised bag-of-words features are sparse
too (1.3% non-zero): as in the paper's code, dropout acts on their non-zeros
and X W is another sparse-dense product. Settings follow the paper: 16 hidden
units, dropout 0.5, Adam with learning rate 0.01, weight decay 5e-4 on the
first layer, 200 epochs.

    python examples/gcn_cora.py                     # one run, ~81% test accuracy
    python examples/gcn_cora.py --seeds 0 1 2       # median over seeds
    python examples/gcn_cora.py --smoke             # a few epochs, for tests
"""
from __future__ import annotations

import statistics

# _common comes before NumPy: it sets the number of BLAS threads.
from _common import Timer, example_parser, fmt_seconds, locate_data, out_dir, plot_curves, progress

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.data.datasets import Cora


def spmm(indices: loom.Tensor, values: loom.Tensor, dense: loom.Tensor, n_rows: int) -> loom.Tensor:
    """The sparse-dense product S @ dense for S given in coordinate form.

    ``S[indices[0, k], indices[1, k]] = values[k]`` (duplicates add up). Row
    ``indices[1, k]`` of `dense` is gathered, scaled by ``values[k]`` and
    scatter-added into row ``indices[0, k]`` of the result, so the cost is
    O(nnz * features) and gradients flow to `values` and `dense`.

    Parameters
    ----------
    indices : int64 Tensor of shape (2, nnz)
        Row and column of each stored entry.
    values : float Tensor of shape (nnz,)
    dense : float Tensor of shape (n_cols, features)
    n_rows : int
        Rows of S (and of the result).

    Returns
    -------
    Tensor of shape (n_rows, features)

    Examples
    --------
    >>> idx = loom.tensor([[0, 0, 1], [0, 1, 1]])
    >>> spmm(idx, loom.tensor([1.0, 2.0, 3.0]), loom.tensor([[1.0], [10.0]]), 2).tolist()
    [[21.0], [30.0]]
    """
    rows, cols = indices[0], indices[1]
    messages = dense.index_select(0, cols) * values.unsqueeze(1)
    out = loom.zeros(n_rows, dense.shape[1], dtype=dense.dtype)
    return out.index_add(0, rows, messages)


def normalized_adjacency(edges: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates and values of D^-1/2 (A + I) D^-1/2 for undirected `edges` listed once each."""
    loops = np.arange(n, dtype=np.int64)
    rows = np.concatenate([edges[0], edges[1], loops])
    cols = np.concatenate([edges[1], edges[0], loops])
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    values = (1.0 / np.sqrt(deg[rows] * deg[cols])).astype(np.float32)
    return np.stack([rows, cols]), values


def sparse_features(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates and values of the row-normalised (each row sums to 1) feature matrix."""
    rows, cols = np.nonzero(features)
    rowsum = features.sum(1)
    values = features[rows, cols] / rowsum[rows]
    return np.stack([rows, cols]).astype(np.int64), values.astype(np.float32)


def load_cora(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in ("features", "labels", "edges", "train_idx", "val_idx", "test_idx")}


class GCN(nn.Module):
    """logits = S relu(S (X W1)) W2, with dropout on X's non-zeros and on the hidden layer.

    X is sparse, given as (indices, values); S is the normalised adjacency, also
    as (indices, values). Both products with them are `spmm` calls.
    """

    def __init__(self, in_features: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.layer1 = nn.Linear(in_features, hidden, bias=False)
        self.layer2 = nn.Linear(hidden, classes, bias=False)
        for layer in (self.layer1, self.layer2):
            nn.init.xavier_uniform_(layer.weight)  # Glorot, as in the paper.
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: tuple, adj: tuple, n: int):
        (x_idx, x_val), (a_idx, a_val) = x, adj
        xw = spmm(x_idx, self.dropout(x_val), self.layer1.weight.t(), n)
        h = self.dropout(F.relu(spmm(a_idx, a_val, xw, n)))
        return spmm(a_idx, a_val, self.layer2(h), n)


def accuracy(logits, labels: np.ndarray, idx: np.ndarray) -> float:
    pred = logits.argmax(1).numpy()
    return float((pred[idx] == labels[idx]).mean())


def train(data: dict[str, np.ndarray], args, seed: int) -> dict:
    """One training run; returns its curves and final accuracies."""
    loom.manual_seed(seed)
    n, n_feat = data["features"].shape
    n_class = int(data["labels"].max()) + 1
    x = tuple(loom.from_numpy(a) for a in sparse_features(data["features"]))
    adj = tuple(loom.from_numpy(a) for a in normalized_adjacency(data["edges"], n))
    labels = loom.from_numpy(data["labels"])
    tr, va, te = (loom.from_numpy(data[k]) for k in ("train_idx", "val_idx", "test_idx"))

    model = GCN(n_feat, args.hidden, n_class, args.dropout)
    opt = loom.optim.Adam([
        {"params": model.layer1.parameters(), "weight_decay": args.weight_decay},
        {"params": model.layer2.parameters(), "weight_decay": 0.0},
    ], lr=args.lr)

    hist: dict[str, list] = {"epoch": [], "train": [], "val": []}
    bar = progress(range(1, args.epochs + 1), desc=f"gcn seed {seed}", disable=args.no_progress)
    for epoch in bar:
        model.train()
        opt.zero_grad()
        logits = model(x, adj, n)
        loss = F.cross_entropy(logits[tr], labels[tr])
        loss.backward()
        opt.step()
        model.eval()
        with loom.no_grad():
            val_loss = F.cross_entropy(model(x, adj, n)[va], labels[va])
        hist["epoch"].append(epoch)
        hist["train"].append(loss.item())
        hist["val"].append(val_loss.item())
        bar.set_postfix(loss=f"{hist['train'][-1]:.3f}", val=f"{hist['val'][-1]:.3f}")
    model.eval()
    with loom.no_grad():
        logits = model(x, adj, n)
        hist["val_acc"] = accuracy(logits, data["labels"], data["val_idx"])
        hist["test_acc"] = accuracy(logits, data["labels"], data["test_idx"])
        hist["test_loss"] = F.cross_entropy(logits[te], labels[te]).item()
    return hist


def main(argv: list[str] | None = None) -> dict:
    p = example_parser("gcn_cora", __doc__, None,
                       "cora.npz (default: $LOOM_DATA_DIR/cora, then the loom cache, downloading and converting the "
                       "Planetoid files there if missing; docs/data.md)")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4, help="on the first layer only")
    p.add_argument("--seeds", type=int, nargs="+", help="several runs; reports the median (default: --seed)")
    args = p.parse_args(argv)
    path = locate_data(lambda download: Cora.locate(args.data, download), args.data, args.download,
                       "the Cora graph (cora.npz: the Planetoid split as NumPy arrays; docs/data.md)")
    if args.smoke:
        args.epochs = min(args.epochs, 10)
        args.seeds = args.seeds or [args.seed]
    seeds = args.seeds or [args.seed]
    out = out_dir(args.out)

    data = load_cora(path)
    n, n_feat = data["features"].shape
    print(f"cora: {n} nodes, {data['edges'].shape[1]} edges, {n_feat} features, "
          f"{len(data['train_idx'])}/{len(data['val_idx'])}/{len(data['test_idx'])} train/val/test")
    runs, times = [], []
    for seed in seeds:
        timer = Timer()
        hist = train(data, args, seed)
        times.append(timer.elapsed())
        runs.append(hist)
        print(f"seed {seed}: train loss {hist['train'][0]:.4f} -> {hist['train'][-1]:.4f}  "
              f"val acc {hist['val_acc']:.4f}  test acc {hist['test_acc']:.4f}  "
              f"({fmt_seconds(times[-1])}, {args.epochs / times[-1]:.1f} epochs/s)")

    curves = {}
    for seed, h in zip(seeds, runs):
        curves[f"train (seed {seed})"] = (h["epoch"], h["train"])
        curves[f"val (seed {seed})"] = (h["epoch"], h["val"])
    png = plot_curves(out / "loss.png", curves, xlabel="epoch", ylabel="cross-entropy",
                      title="GCN on Cora")
    accs = [h["test_acc"] for h in runs]
    result = {"test_acc": accs, "median_test_acc": statistics.median(accs),
              "seconds": times, "png": str(png)}
    print(f"final: test accuracy median {result['median_test_acc']:.4f} over seeds {seeds} "
          f"({', '.join(f'{a:.4f}' for a in accs)}); mean time per run {fmt_seconds(sum(times) / len(times))}")
    print(f"loss curve: {png}")
    return result


if __name__ == "__main__":
    main()
