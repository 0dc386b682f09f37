"""Bags of embeddings: `embedding_bag` sums, averages or maxes the embedding rows of each bag.

Bags are a membership mask built in the graph from the offsets (or the rows of
a 2-d input), so the op stays lazy: sums and means are one matmul of the mask
with the selected rows, maxima a masked `amax`.
"""
from __future__ import annotations

import math

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.linalg import matmul
from loom.functional.math import clamp_min, where
from loom.functional.nn import embedding
from loom.functional.reduce import amax
from loom.functional.shape import cat
from loom.tensor import Tensor, arange, const, tensor

_MODES = ("sum", "mean", "max")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights: Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int | None = None) -> Tensor:
    """Sum, mean or max of the embedding rows in each bag, as `torch.nn.functional.embedding_bag`.

    Parameters
    ----------
    input : int Tensor
        (B, L): B bags of L indices each; or 1-d, with `offsets` giving where each bag starts.
    weight : Tensor of shape (num_embeddings, embedding_dim)
    offsets : 1-d int Tensor, optional
        Bag starts in a 1-d `input` (with `include_last_offset`, the last entry is the end).
    mode : "sum", "mean" or "max"
    per_sample_weights : Tensor shaped like input, optional
        Weights of each index's row (mode "sum" only).
    padding_idx : int, optional
        Indices equal to it are left out of their bag (and of its count).

    Empty bags give zero rows. `sparse` is accepted; the gradient is always dense.

    Examples
    --------
    >>> w = loom.arange(6, dtype=loom.float32).reshape(3, 2)
    >>> loom.nn.functional.embedding_bag(loom.tensor([0, 2, 1]), w, loom.tensor([0, 2]), mode="sum").tolist()
    [[4.0, 6.0], [2.0, 3.0]]
    """
    op = "loom.nn.functional.embedding_bag"
    idx, w = _t(input), _t(weight)
    if mode not in _MODES:
        raise LoomValueError(f"{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if idx.dtype.is_floating_point or idx.dtype is dt.bool_:
        raise DTypeError(f"{op}: expected integer indices, got {idx.dtype.name}{fmt_shape(idx.shape)}")
    if w.ndim != 2:
        raise ShapeError(f"{op}: weight must be 2-d (num_embeddings, embedding_dim), got {fmt_shape(w.shape)}")
    psw = None
    if per_sample_weights is not None:
        psw = _t(per_sample_weights)
        if mode != "sum":
            raise LoomValueError(f"{op}: per_sample_weights are only supported with mode='sum', got {mode!r}")
        if tuple(psw.shape) != tuple(idx.shape):
            raise ShapeError(f"{op}: per_sample_weights {fmt_shape(psw.shape)} must have the input's shape "
                             f"{fmt_shape(idx.shape)}")
    if padding_idx is not None:
        padding_idx = padding_idx % w.shape[0] if -w.shape[0] <= padding_idx < w.shape[0] else padding_idx
    d = w.shape[1]
    if idx.ndim == 2:
        if offsets is not None:
            raise LoomValueError(f"{op}: offsets must be None for a 2-d input {fmt_shape(idx.shape)}")
        b, length = idx.shape
        flat = idx.reshape(-1)
        rows = embedding(flat, w, padding_idx, max_norm, norm_type, scale_grad_by_freq)
        mask = _block(b, length, w.dtype)
        if padding_idx is not None:
            mask = mask * (flat != padding_idx).reshape(1, -1).to(w.dtype)
    elif idx.ndim == 1:
        if offsets is None:
            raise LoomValueError(f"{op}: a 1-d input needs offsets (where each bag starts)")
        off = _t(offsets)
        if off.ndim != 1 or off.dtype.is_floating_point:
            raise ShapeError(f"{op}: offsets must be a 1-d integer tensor, got {off.dtype.name}"
                             f"{fmt_shape(off.shape)}")
        n = idx.shape[0]
        off = off.to(dt.int64)
        if include_last_offset:
            starts, ends = off[:-1], off[1:]
        else:
            starts, ends = off, cat([off[1:], const(n, (1,), dt.int64)])
        b = starts.shape[0]
        rows = embedding(idx, w, padding_idx, max_norm, norm_type, scale_grad_by_freq)
        pos = arange(n).reshape(1, n)
        inside = (pos >= starts.reshape(b, 1)) & (pos < ends.reshape(b, 1))
        if padding_idx is not None:
            inside = inside & (idx != padding_idx).reshape(1, n)
        mask = inside.to(w.dtype)
    else:
        raise ShapeError(f"{op}: expected a 1-d or 2-d input, got {fmt_shape(idx.shape)}")
    # mask: (B, n) weights of each selected row in each bag.
    if mode == "max":
        sel = mask.unsqueeze(-1) > 0
        big = where(sel, rows.unsqueeze(0), const(-math.inf, (), w.dtype))
        best = amax(big, 1)
        return where(mask.sum(1, keepdim=True) > 0, best, const(0.0, (), w.dtype))
    if psw is not None:
        mask = mask * psw.reshape(1, -1).to(w.dtype)
    out = matmul(mask, rows)
    if mode == "mean":
        out = out / clamp_min(mask.sum(1, keepdim=True), 1.0)
    return out.reshape(-1, d)


def _block(b: int, length: int, dtype) -> Tensor:
    """(B, B * L) 0/1 mask putting row i of the flattened (B, L) input into bag i // L."""
    bag = (arange(b * length) // length).reshape(1, -1)
    return (bag == arange(b).reshape(-1, 1)).to(dtype)


NN_FUNCTIONAL = ["embedding_bag"]
__all__ = NN_FUNCTIONAL
