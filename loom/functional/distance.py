"""Distances between sets of vectors: `pdist` (within one set) and `cdist` (between two sets)."""
from __future__ import annotations

import numpy as np

from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.linalg import matmul
from loom.functional.math import clamp_min
from loom.functional.nn import _pnorm
from loom.tensor import Tensor, tensor

_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _check_p(op: str, p) -> float:
    p = float(p)
    if p < 0:
        raise LoomValueError(f"loom.{op}: p must be non-negative, got {p}")
    return p


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """p-norm distances between every pair of rows i < j of an (N, M) input, as N(N-1)/2 values.

    Examples
    --------
    >>> loom.pdist(loom.tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])).tolist()
    [5.0, 10.0, 5.0]
    """
    x = _t(input)
    p = _check_p("pdist", p)
    if x.ndim != 2:
        raise ShapeError(f"loom.pdist: expected a 2-d (N, M) input, got {fmt_shape(x.shape)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.pdist: expected a floating point input, got {x.dtype.name}{fmt_shape(x.shape)}")
    i, j = np.triu_indices(x.shape[0], 1)
    a = x.index_select(0, tensor(i.astype(np.int64)))
    b = x.index_select(0, tensor(j.astype(np.int64)))
    return _pnorm(a - b, p, 1)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """p-norm distance between each row of x1 (*, P, M) and each row of x2 (*, R, M): (*, P, R).

    For p = 2 with more than 25 rows on a side (or `compute_mode="use_mm_for_euclid_dist"`),
    distances come from one matrix product, sqrt(|a|^2 + |b|^2 - 2 a.b), as PyTorch computes them.

    Examples
    --------
    >>> loom.cdist(loom.tensor([[0.0, 0.0]]), loom.tensor([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [[5.0, 1.0]]
    """
    a, b = _t(x1), _t(x2)
    p = _check_p("cdist", p)
    if compute_mode not in _CDIST_MODES:
        raise LoomValueError(f"loom.cdist: compute_mode must be one of {', '.join(_CDIST_MODES)}, got "
                             f"{compute_mode!r}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"loom.cdist: x1 {fmt_shape(a.shape)} and x2 {fmt_shape(b.shape)} must be (*, P, M) and "
                         "(*, R, M) with the same M")
    if not a.dtype.is_floating_point or a.dtype is not b.dtype:
        raise DTypeError(f"loom.cdist: x1 and x2 must be floating point tensors of one dtype, got "
                         f"{a.dtype.name} and {b.dtype.name}")
    big = a.shape[-2] > 25 or b.shape[-2] > 25
    if p == 2 and (compute_mode == "use_mm_for_euclid_dist" or
                   (compute_mode == "use_mm_for_euclid_dist_if_necessary" and big)):
        sq = (a * a).sum(-1, keepdim=True) + (b * b).sum(-1).unsqueeze(-2) - 2.0 * matmul(a, b.transpose(-1, -2))
        return clamp_min(sq, 1e-30).sqrt()
    return _pnorm(a.unsqueeze(-2) - b.unsqueeze(-3), p, -1)


NN_FUNCTIONAL = ["pdist"]
__all__ = ["pdist", "cdist"]
