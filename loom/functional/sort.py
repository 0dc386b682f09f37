"""Sorting and order statistics, built on the `argsort` library primitive.

The order comes from `argsort` (stable, NaN sorts as the largest value, as in
PyTorch) on the detached input; values are then read with `gather`, so their
gradient flows back to the positions they came from. Order statistics (topk,
kthvalue, median, quantile, mode) are gathers at computed positions of that
order, and searchsorted/bucketize count comparisons. Only `unique` and
`unique_consecutive`, whose output shape depends on the values, realise their
input.
"""
from __future__ import annotations

import numbers

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, LoomIndexError, ShapeError, fmt_shape
from loom.functional.reduce import ValuesIndices, _evenly_distribute, _nonempty, values_indices
from loom.tensor import Tensor, apply, arange, const, normalize_dim, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _where(c, a, b) -> Tensor:
    from loom.functional.math import where
    return where(c, a, b)


def _order(x: Tensor, d: int, descending: bool = False) -> Tensor:
    """Indices that sort x along axis d (stable, NaN largest); int64, no gradient."""
    return apply("argsort", (x.detach(),), {"axis": d, "descending": bool(descending)})


def _take(x: Tensor, d: int, idx: Tensor) -> Tensor:
    """x gathered at `idx` along d; the gradient goes back to the gathered positions."""
    return apply("gather", (x, idx), {"axis": d})


def _narrow(x: Tensor, d: int, start: int, stop: int) -> Tensor:
    starts, stops = [0] * x.ndim, list(x.shape)
    starts[d], stops[d] = start, stop
    return apply("slice", (x,), {"starts": starts, "stops": stops, "steps": [1] * x.ndim})


def _positions(x: Tensor, d: int) -> Tensor:
    """0..n-1 along d, broadcast to x's shape."""
    shape = [1] * x.ndim
    shape[d] = x.shape[d]
    return arange(x.shape[d]).reshape(shape).expand(x.shape)


def _squeeze(t: Tensor, d: int, keepdim: bool) -> Tensor:
    return t if keepdim else t.squeeze(d)


def _check_k(op: str, k, lo: int, n: int, dim) -> int:
    if isinstance(k, Tensor):
        k = int(k.item())
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"loom.{op}: k must be an int, got {type(k).__name__}")
    if not lo <= k <= n:
        raise LoomIndexError(f"loom.{op}: k={k} is out of range for dimension {dim} of size {n} "
                             f"(expected {lo} <= k <= {n})")
    return int(k)


# ---------------------------------------------------------------- sorting

def sort(input, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """Sort along `dim`; returns ``(values, indices)``.

    The sort is always stable (equal elements keep their order, so `stable` changes
    nothing); NaN sorts as the largest value. Gradients flow to the sorted positions.

    Parameters
    ----------
    input : Tensor
    dim : int
        The dim to sort along (default the last).
    descending : bool
        Largest first (NaN first).
    stable : bool
        Accepted for PyTorch compatibility; loom's sort is stable anyway.

    Examples
    --------
    >>> r = loom.tensor([3.0, 1.0, 2.0]).sort()
    >>> r.values.tolist(), r.indices.tolist()
    ([1.0, 2.0, 3.0], [1, 2, 0])
    """
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "sort")
    idx = _order(x, d, descending)
    return values_indices("sort", _take(x, d, idx), idx)


def argsort(input, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """Indices that sort `input` along `dim` (stable; NaN largest), as int64.

    Examples
    --------
    >>> loom.tensor([3.0, 1.0, 2.0]).argsort(descending=True).tolist()
    [0, 2, 1]
    """
    x = _t(input)
    return _order(x, normalize_dim(dim, x.ndim, "argsort"), descending)


def msort(input) -> Tensor:
    """Values sorted along dim 0.

    Examples
    --------
    >>> loom.tensor([[3, 1], [2, 4]]).msort().tolist()
    [[2, 1], [3, 4]]
    """
    return sort(input, 0).values


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """The `k` largest (or smallest) elements along `dim`; returns ``(values, indices)``.

    Results are always in sorted order (largest first, or smallest first when
    ``largest=False``); ties keep their original order and NaN counts as largest.

    Parameters
    ----------
    input : Tensor
    k : int
        How many elements, 0 <= k <= input.size(dim).
    dim : int
    largest : bool
        Largest elements when True, smallest when False.
    sorted : bool
        Accepted for PyTorch compatibility; the result is sorted either way.

    Examples
    --------
    >>> r = loom.tensor([1.0, 5.0, 3.0, 4.0]).topk(2)
    >>> r.values.tolist(), r.indices.tolist()
    ([5.0, 4.0], [1, 3])
    """
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "topk")
    n = x.shape[d] if x.ndim else 1
    k = _check_k("topk", k, 0, n, dim)
    if x.ndim == 0:  # PyTorch returns the element itself for k of 0 or 1.
        return values_indices("topk", x.clone(), const(0, (), dt.int64))
    idx = _narrow(_order(x, d, largest), d, 0, k)
    return values_indices("topk", _take(x, d, idx), idx)


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The `k`-th smallest element (1-based) along `dim`; returns ``(values, indices)``.

    Examples
    --------
    >>> r = loom.tensor([3.0, 1.0, 4.0, 2.0]).kthvalue(2)
    >>> r.values.item(), r.indices.item()
    (2.0, 3)
    """
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "kthvalue")
    n = x.shape[d] if x.ndim else 1
    k = _check_k("kthvalue", k, 1, n, dim)
    if x.ndim == 0:
        return values_indices("kthvalue", x.clone(), const(0, (), dt.int64))
    idx = _narrow(_order(x, d), d, k - 1, k)
    return values_indices("kthvalue", _squeeze(_take(x, d, idx), d, keepdim), _squeeze(idx, d, keepdim))


# ---------------------------------------------------------------- medians

def _median_position(x: Tensor, d: int, ignore_nan: bool) -> Tensor:
    """Per slice along d, the position in ascending order of the (nan)median (keepdim shape)."""
    n = x.shape[d]
    if not x.dtype.is_floating_point:
        return const((n - 1) // 2, tuple(1 if i == d else s for i, s in enumerate(x.shape)), dt.int64)
    from loom.functional.math import isnan
    nans = isnan(x.detach()).sum(d, keepdim=True)
    if ignore_nan:  # Lower median of the non-NaN values; all NaN gives the first NaN.
        return ((n - nans - 1) // 2).clamp(min=0)
    return _where(nans > 0, n - nans, (n - 1) // 2)  # Any NaN: the first NaN (NaNs sort last, in order).


def _median(op: str, input, dim, keepdim: bool, ignore_nan: bool):
    x = _t(input)
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            return flat.sum() * float("nan")
        order = _order(flat, 0)
        pos = _take(order, 0, _median_position(flat, 0, ignore_nan))
        return _evenly_distribute(x, _take(flat, 0, pos).reshape(()))
    d = normalize_dim(dim, x.ndim, op)
    _nonempty(op, x, d)
    if x.ndim == 0:
        return values_indices(op, x.clone(), const(0, (), dt.int64))
    idx = _take(_order(x, d), d, _median_position(x, d, ignore_nan))
    return values_indices(op, _squeeze(_take(x, d, idx), d, keepdim), _squeeze(idx, d, keepdim))


def median(input, dim=None, keepdim: bool = False):
    """The lower median: of all elements, or per slice along `dim` as ``(values, indices)``.

    For an even count the lower of the two middle values is returned, as in PyTorch;
    a NaN anywhere in a slice makes its median NaN. Without `dim` the gradient is
    split among the elements equal to the median; with `dim` it goes to the index.

    Examples
    --------
    >>> loom.tensor([4.0, 1.0, 3.0, 2.0]).median().item()
    2.0
    >>> loom.tensor([[4.0, 1.0, 3.0]]).median(1).indices.tolist()
    [2]
    """
    return _median("median", input, dim, keepdim, False)


def nanmedian(input, dim=None, keepdim: bool = False):
    """:func:`median` ignoring NaN (NaN only where a slice is all NaN).

    Examples
    --------
    >>> loom.tensor([4.0, float("nan"), 1.0]).nanmedian().item()
    1.0
    """
    return _median("nanmedian", input, dim, keepdim, True)


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(op: str, input, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool) -> Tensor:
    x = _t(input)
    if x.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.{op}: input must be float32 or float64, got {x.dtype.name}")
    if interpolation not in _INTERPOLATIONS:
        raise LoomError(f"loom.{op}: interpolation must be one of {list(_INTERPOLATIONS)}, "
                        f"got {interpolation!r}")
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise ShapeError(f"loom.{op}: q must be a scalar or 1-d tensor, got shape {fmt_shape(q.shape)}")
        if q.dtype is not x.dtype:
            raise DTypeError(f"loom.{op}: q ({q.dtype.name}) must have the input's dtype ({x.dtype.name})")
        scalar_q, qt = q.ndim == 0, q.detach().reshape(-1)
    else:
        qs = [q] if isinstance(q, numbers.Real) else list(q)
        for v in qs:
            if not 0 <= v <= 1:
                raise LoomError(f"loom.{op}: q must be in the range [0, 1], got {v}")
        scalar_q, qt = isinstance(q, numbers.Real), tensor(qs, dtype=x.dtype)
    if x.numel() == 0:
        raise ShapeError(f"loom.{op}: the input must be non-empty, got shape {fmt_shape(x.shape)}")

    # Sort along the reduced dim, moved last: rows of n values.
    if dim is None:
        rows, out_shape = x.reshape(-1), [1] * x.ndim if keepdim else []
    else:
        d = normalize_dim(dim, x.ndim, op)
        if x.ndim:
            perm = [i for i in range(x.ndim) if i != d] + [d]
            rows = x.permute(*perm)
        else:
            rows = x.reshape(1)
        out_shape = [1 if i == d else s for i, s in enumerate(x.shape)] if keepdim else \
            [s for i, s in enumerate(x.shape) if i != d]
    n = rows.shape[-1]
    last = rows.ndim - 1
    ordered = sort(rows, last).values
    from loom.functional.math import isnan
    nq = qt.shape[0]
    if ignore_nan:
        valid = (~isnan(rows.detach())).sum(-1, keepdim=True).to(x.dtype)
        ranks = qt * (valid - 1)
        ranks = _where(ranks < 0, 0.0, ranks)
    else:
        has_nan = isnan(rows.detach()).any(-1, keepdim=True)
        ranks = _where(has_nan, float(n - 1), qt * (n - 1))  # A NaN row reads its last value: NaN.
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.to(dt.int64)
    out = _take(ordered, last, below)
    if interpolation in ("linear", "midpoint"):
        above = _take(ordered, last, ranks.ceil().to(dt.int64))
        w = ranks - below.to(x.dtype) if interpolation == "linear" else const(0.5, tuple(ranks.shape), x.dtype)
        diff = above - out
        out = _where(w < 0.5, out + diff * w, above - diff * (1.0 - w))  # PyTorch's lerp: exact at both ends.
    # Rows (..., Q) -> (Q, *out_shape), or out_shape for a scalar q.
    out = out.permute(last, *range(last)) if last else out
    out = out.reshape([nq] + list(out_shape))
    return out.reshape(out_shape) if scalar_q else out


def quantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:
    """The `q`-th quantiles of `input` along `dim` (of all elements when None).

    Parameters
    ----------
    input : Tensor
        float32 or float64.
    q : float, sequence of floats or Tensor
        Quantile(s) in [0, 1]; a 1-d `q` adds a leading output dim of its length.
    dim : int, optional
    keepdim : bool
    interpolation : str
        Between the two nearest values: 'linear', 'lower', 'higher', 'midpoint' or 'nearest'.

    A NaN in a slice makes its quantiles NaN (see :func:`nanquantile`). The range
    of a tensor `q` is not checked (that would need its values).

    Examples
    --------
    >>> loom.tensor([1.0, 2.0, 3.0, 4.0]).quantile(0.5).item()
    2.5
    >>> loom.tensor([1.0, 2.0, 3.0, 4.0]).quantile(loom.tensor([0.0, 1.0])).tolist()
    [1.0, 4.0]
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


def nanquantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:
    """:func:`quantile` ignoring NaN (NaN only where a slice is all NaN).

    Examples
    --------
    >>> loom.tensor([1.0, float("nan"), 3.0]).nanquantile(0.5).item()
    2.0
    """
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


def mode(input, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The most frequent value along `dim` (the smallest among equally frequent ones)
    and the index of its last occurrence; returns ``(values, indices)``.

    Examples
    --------
    >>> r = loom.tensor([1, 2, 2, 3, 3, 1, 5]).mode()
    >>> r.values.item(), r.indices.item()
    (1, 5)
    """
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "mode")
    _nonempty("mode", x, d)
    if x.ndim == 0:
        return values_indices("mode", x.clone(), const(0, (), dt.int64))
    n = x.shape[d]
    order = _order(x, d)
    s = _take(x.detach(), d, order)
    # Runs of equal values in sorted order: run id per position, then each run's length.
    starts = s != apply("pad", (_narrow(s, d, 0, n - 1),), {"pads": [(1, 0) if i == d else (0, 0)
                                                                      for i in range(x.ndim)],
                                                          "value": 0})
    starts = starts | (_positions(x, d) == 0)
    run = starts.cumsum(d) - 1
    lengths = apply("scatter_add", (const(0, tuple(x.shape), dt.int64), run, const(1, tuple(x.shape), dt.int64)),
                    {"axis": d})
    count = _take(lengths, d, run)
    best = count.amax(d, keepdim=True)
    first = _where(count == best, _positions(x, d), n).amin(d, keepdim=True)  # Smallest value wins ties.
    idx = _take(order, d, first + best - 1)  # Stable order: the run's end is the last occurrence.
    return values_indices("mode", _squeeze(_take(x, d, idx), d, keepdim), _squeeze(idx, d, keepdim))


# ---------------------------------------------------------------- unique

def _unique_outputs(x: Tensor, values, inverse, counts, return_inverse: bool, return_counts: bool):
    out = tensor(values, dtype=x.dtype)
    if not (return_inverse or return_counts):
        return out
    res = [out]
    if return_inverse:
        res.append(tensor(np.asarray(inverse, np.int64)))
    if return_counts:
        res.append(tensor(np.asarray(counts, np.int64)))
    return tuple(res)


def unique(input, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim=None):
    """The distinct elements (or slices along `dim`), sorted.

    This op realises `input`: its output shape depends on the values. The result
    has no gradient. NaNs are all distinct, as in PyTorch.

    Parameters
    ----------
    input : Tensor
    sorted : bool
        Accepted for PyTorch compatibility; the output is sorted either way.
    return_inverse : bool
        Also return, for each input element (or slice), its index in the output.
    return_counts : bool
        Also return how often each output element occurs.
    dim : int, optional
        Find distinct slices along this dim instead of distinct elements.

    Examples
    --------
    >>> v, inv = loom.tensor([3, 1, 3, 2]).unique(return_inverse=True)
    >>> v.tolist(), inv.tolist()
    ([1, 2, 3], [2, 0, 2, 1])
    """
    x = _t(input)
    a = x.detach().numpy()
    if dim is None:
        values, inverse, counts = np.unique(a.reshape(-1), return_inverse=True, return_counts=True,
                                            equal_nan=False)
        inverse = np.asarray(inverse).reshape(a.shape)
    else:
        d = normalize_dim(dim, x.ndim, "unique")
        if a.ndim == 0:
            values, inverse, counts = a, np.zeros((), np.int64), np.ones((), np.int64)
        else:
            values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True, axis=d,
                                                equal_nan=False)
            inverse = np.asarray(inverse).reshape(-1)
    return _unique_outputs(x, values, inverse, counts, return_inverse, return_counts)


def unique_consecutive(input, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """Collapse runs of equal consecutive elements (or slices along `dim`).

    This op realises `input` (its output shape depends on the values); no gradient.

    Examples
    --------
    >>> loom.tensor([1, 1, 2, 2, 1]).unique_consecutive().tolist()
    [1, 2, 1]
    """
    x = _t(input)
    a = x.detach().numpy()
    d = 0 if dim is None else normalize_dim(dim, x.ndim, "unique_consecutive")
    flat = a.reshape(-1) if dim is None else (a if a.ndim else a.reshape(1))
    n = flat.shape[d]
    if n <= 1:
        starts = np.ones(n, bool)
    else:
        cur, prev = np.moveaxis(flat, d, 0)[1:], np.moveaxis(flat, d, 0)[:-1]
        differs = (cur != prev).reshape(n - 1, -1).any(axis=1)
        starts = np.concatenate([[True], differs])
    run = np.cumsum(starts) - 1
    values = np.take(flat, np.flatnonzero(starts), axis=d)
    counts = np.diff(np.append(np.flatnonzero(starts), n))
    inverse = run.reshape(a.shape) if dim is None else run
    return _unique_outputs(x, values, inverse, counts, return_inverse, return_counts)


# ---------------------------------------------------------------- searching

def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False, side=None,
                 sorter=None) -> Tensor:
    """Insertion points of `input` into `sorted_sequence` along its last dim.

    ``left`` (default): the first index i with ``seq[i] >= v``; ``right``: the first with
    ``seq[i] > v``. A NaN value goes to the end. Computed by counting comparisons,
    with loom ops (O(len(seq)) work per value).

    Parameters
    ----------
    sorted_sequence : Tensor
        1-d, or N-d sorted along the last dim with leading dims matching `input`'s.
    input : Tensor or scalar
    out_int32 : bool
        int32 result instead of int64.
    right : bool
    side : {'left', 'right'}, optional
        Same as `right`; must agree with it when both are given.
    sorter : Tensor, optional
        Indices that sort `sorted_sequence` along its last dim.

    Examples
    --------
    >>> loom.searchsorted(loom.tensor([1, 3, 5]), loom.tensor([3, 6])).tolist()
    [1, 3]
    >>> loom.searchsorted(loom.tensor([1, 3, 5]), loom.tensor([3, 6]), right=True).tolist()
    [2, 3]
    """
    seq = _t(sorted_sequence)
    if side is not None:
        if side not in ("left", "right"):
            raise LoomError(f"loom.searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise LoomError("loom.searchsorted: side='left' and right=True contradict each other")
        right = side == "right"
    if seq.ndim == 0:
        raise ShapeError("loom.searchsorted: sorted_sequence must have at least one dim, got a 0-d tensor")
    if sorter is not None:
        sorter = _t(sorter)
        if tuple(sorter.shape) != tuple(seq.shape):
            raise ShapeError(f"loom.searchsorted: sorter {fmt_shape(sorter.shape)} must have the shape of "
                             f"sorted_sequence {fmt_shape(seq.shape)}")
        seq = _take(seq, seq.ndim - 1, sorter)
    seq = seq.detach()
    scalar = not isinstance(input, Tensor)
    v = (tensor(input) if scalar else input).detach()
    if scalar and seq.ndim != 1:
        raise ShapeError(f"loom.searchsorted: a scalar value needs a 1-d sorted_sequence, got "
                         f"{fmt_shape(seq.shape)}")
    if seq.ndim == 1:
        lhs, rhs = seq, v.unsqueeze(-1)  # (..., 1) against (M,).
    else:
        if v.ndim != seq.ndim or tuple(v.shape[:-1]) != tuple(seq.shape[:-1]):
            raise ShapeError(f"loom.searchsorted: sorted_sequence {fmt_shape(seq.shape)} and input "
                             f"{fmt_shape(v.shape)} must agree in all but the last dim")
        lhs, rhs = seq.unsqueeze(-2), v.unsqueeze(-1)  # (..., 1, M) against (..., K, 1).
    # Counting "not (seq >= v)" rather than "seq < v" sends NaN values to the end, as PyTorch's search.
    before = ~(lhs > rhs) if right else ~(lhs >= rhs)
    out = before.sum(-1)
    return out.to(dt.int32) if out_int32 else out


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """Index of the bucket of each value, for 1-d increasing `boundaries`.

    With ``right=False`` value v goes to i where ``boundaries[i-1] < v <= boundaries[i]``;
    with ``right=True`` where ``boundaries[i-1] <= v < boundaries[i]``.

    Examples
    --------
    >>> loom.bucketize(loom.tensor([0.5, 1.0, 2.5]), loom.tensor([1.0, 2.0])).tolist()
    [0, 0, 2]
    """
    b = _t(boundaries)
    if b.ndim != 1:
        raise ShapeError(f"loom.bucketize: boundaries must be 1-d, got {fmt_shape(b.shape)}")
    return searchsorted(b, input, out_int32=out_int32, right=right)


METHODS = ["sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "quantile", "nanquantile",
           "mode", "unique", "unique_consecutive"]
INPLACE: list[str] = []
