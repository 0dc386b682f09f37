"""Margin, triplet and CTC losses `torch.nn.functional` has beyond those in `loom.functional.nn`.

Each is written in loom ops over whole tensors (class masks from one-hot
tables, the CTC forward recursion as a loop over time steps with masks for the
per-sample lengths), so it stays lazy and differentiable to any order.
"""
from __future__ import annotations

import math

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.indexing import gather, one_hot
from loom.functional.math import exp, log, maximum, minimum, relu, where
from loom.functional.nn import _reduce_loss, _reduction, pairwise_distance
from loom.functional.shape import pad
from loom.tensor import Tensor, const, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _need_float(op: str, x: Tensor) -> None:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.nn.functional.{op}: expected a floating point input, got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")


def _need_int(op: str, t: Tensor, what: str = "target") -> None:
    if t.dtype.is_floating_point or t.dtype is dt.bool_:
        raise DTypeError(f"loom.nn.functional.{op}: expected an integer {what} (class indices), got "
                         f"{t.dtype.name}{fmt_shape(t.shape)}")


def _rows(op: str, x: Tensor, t: Tensor, t_ndim_same: bool) -> tuple[Tensor, Tensor, bool]:
    """(N, C) input and its targets, with whether a 1-d input was lifted to one row."""
    if x.ndim not in (1, 2):
        raise ShapeError(f"loom.nn.functional.{op}: expected a 1-d (C) or 2-d (N, C) input, got "
                         f"{fmt_shape(x.shape)}")
    want = tuple(x.shape) if t_ndim_same else tuple(x.shape[:1]) if x.ndim == 2 else ()
    if tuple(t.shape) != want and not (x.ndim == 1 and not t_ndim_same and tuple(t.shape) == (1,)):
        raise ShapeError(f"loom.nn.functional.{op}: target {fmt_shape(t.shape)} does not fit input "
                         f"{fmt_shape(x.shape)}; expected target shape {fmt_shape(want)}")
    if x.ndim == 1:
        return x.reshape(1, -1), t.reshape(1, -1) if t_ndim_same else t.reshape(1), True
    return x, t, False


def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None, size_average=None,
                      reduce=None, reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss: sum over i != y of max(0, margin - x[y] + x[i])^p, divided by C.

    Parameters
    ----------
    input : Tensor of shape (N, C) or (C,)
    target : int64 Tensor of shape (N,) or ()
    p : 1 or 2
    margin : float
    weight : Tensor of shape (C,), optional
        Scales each sample's loss by the weight of its target class.

    Examples
    --------
    >>> loom.nn.functional.multi_margin_loss(loom.tensor([[0.1, 0.2, 0.4, 0.8]]), loom.tensor([3])).item()
    0.32499998807907104
    """
    op = "multi_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    if p not in (1, 2):
        raise LoomValueError(f"loom.nn.functional.{op}: only p == 1 and p == 2 are supported, got p={p}")
    x, t = _t(input), _t(target)
    _need_float(op, x)
    _need_int(op, t)
    x2, t2, single = _rows(op, x, t, False)
    c = x2.shape[1]
    t_np = _concrete(t2)
    if t_np is not None and t_np.size and (t_np.min() < 0 or t_np.max() >= c):
        raise LoomValueError(f"loom.nn.functional.{op}: target values must lie in [0, {c}), got "
                             f"{t_np.min()}..{t_np.max()}")
    idx = t2.reshape(-1, 1)
    xy = gather(x2, 1, idx)
    z = relu(x2 - xy + margin)
    if p == 2:
        z = z * z
    if weight is not None:
        w = _t(weight)
        if w.numel() != c:
            raise ShapeError(f"loom.nn.functional.{op}: weight {fmt_shape(w.shape)} must have one element per "
                             f"class ({c})")
        z = z * gather(w.reshape(-1), 0, t2).reshape(-1, 1)
    others = one_hot(t2, c) == 0
    loss = where(others, z, const(0.0, (), z.dtype)).sum(1) / c
    if single:
        loss = loss.reshape(()) if x.ndim == 1 else loss
    return _reduce_loss(loss, reduction)


def _concrete(t: Tensor) -> np.ndarray | None:
    """The values of `t` if they are already known (a leaf holding data), else None."""
    try:
        from loom.functional.nn import _realised_values
        return _realised_values(t)
    except Exception:  # noqa: BLE001 - values are only used for early, friendlier errors.
        return None


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """Multi-label hinge loss over (N, C) scores and (N, C) target class lists padded with -1.

    For each sample, the targets are the leading entries of its row up to the
    first -1; the loss is the sum over targets j and non-targets i of
    max(0, 1 - (x[j] - x[i])), divided by C.

    Examples
    --------
    >>> x = loom.tensor([[0.1, 0.2, 0.4, 0.8]])
    >>> loom.nn.functional.multilabel_margin_loss(x, loom.tensor([[3, 0, -1, 1]])).item()
    0.8500000238418579
    """
    op = "multilabel_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    _need_float(op, x)
    _need_int(op, t)
    if x.ndim == 0:
        x, t = x.reshape(1), t.reshape(1)
    x2, t2, single = _rows(op, x, t, True)
    c = x2.shape[1]
    t2 = t2.to(dt.int64)
    # A target list ends at its first -1: valid[j] is 1 while no -1 has been seen.
    valid = ((t2 >= 0).to(dt.int64).cumprod(1) > 0)
    safe = where(valid, t2, const(0, (), dt.int64))
    hot = one_hot(safe, c) * valid.to(dt.int64).unsqueeze(-1)       # (N, J, C)
    is_target = hot.sum(1) > 0                                       # (N, C)
    xy = gather(x2, 1, safe)                                         # (N, J)
    hinge = relu(x2.unsqueeze(1) - xy.unsqueeze(2) + 1.0)            # (N, J, C)
    keep = valid.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = where(keep, hinge, const(0.0, (), hinge.dtype)).sum((1, 2)) / c
    if single:
        loss = loss.reshape(())
    return _reduce_loss(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> Tensor:
    """max(0, d(a, p) - d(a, n) + margin) for any distance function d (default: pairwise 2-distance).

    Examples
    --------
    >>> a = loom.zeros(1, 2)
    >>> loom.nn.functional.triplet_margin_with_distance_loss(a, a, a + 5.0).item()
    0.0
    """
    op = "triplet_margin_with_distance_loss"
    reduction = _reduction(op, None, None, reduction)
    if margin <= 0:
        raise LoomValueError(f"loom.nn.functional.{op}: margin must be greater than 0, got {margin}")
    a, pos, neg = _t(anchor), _t(positive), _t(negative)
    if not (a.ndim == pos.ndim == neg.ndim):
        raise ShapeError(f"loom.nn.functional.{op}: anchor {fmt_shape(a.shape)}, positive "
                         f"{fmt_shape(pos.shape)} and negative {fmt_shape(neg.shape)} must have the same rank")
    dist = distance_function if distance_function is not None else pairwise_distance
    d_pos = dist(a, pos)
    d_neg = dist(a, neg)
    if swap:
        d_neg = minimum(d_neg, dist(pos, neg))
    return _reduce_loss(relu(d_pos - d_neg + margin), reduction)


def _lengths(op: str, name: str, v, n: int) -> np.ndarray:
    """CTC lengths as a NumPy int vector of n entries (they fix the loop's shapes, so they must be known)."""
    if isinstance(v, Tensor):
        v = v.detach().numpy()
    arr = np.asarray(v, dtype=np.int64).reshape(-1)
    if arr.shape[0] != n:
        raise ShapeError(f"loom.nn.functional.{op}: {name} has {arr.shape[0]} entries, expected one per "
                         f"batch element ({n})")
    return arr


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False) -> Tensor:
    """Connectionist Temporal Classification loss, as `torch.nn.functional.ctc_loss`.

    Parameters
    ----------
    log_probs : Tensor of shape (T, N, C) or (T, C)
        Log-probabilities over C classes (blank included) per time step.
    targets : int Tensor of shape (N, S), or 1-d holding the targets concatenated
    input_lengths, target_lengths : sequences or tensors of N ints
    blank : int
        The blank class. Default: 0.
    reduction : "mean" (each loss divided by its target length, then averaged), "sum" or "none"
    zero_infinity : bool
        Replace infinite losses (impossible alignments) and their gradients by zero.

    Examples
    --------
    >>> lp = loom.randn(6, 2, 4).log_softmax(2)
    >>> loom.nn.functional.ctc_loss(lp, loom.tensor([[1, 2], [3, 3]]), [6, 5], [2, 2]).shape
    loom.Size([])
    """
    op = "ctc_loss"
    reduction = _reduction(op, None, None, reduction)
    lp, tg = _t(log_probs), _t(targets)
    _need_float(op, lp)
    _need_int(op, tg, "targets")
    unbatched = lp.ndim == 2
    if unbatched:
        lp = lp.unsqueeze(1)
    if lp.ndim != 3:
        raise ShapeError(f"loom.nn.functional.{op}: log_probs must be (T, N, C) or (T, C), got "
                         f"{fmt_shape(_t(log_probs).shape)}")
    big_t, n, c = lp.shape
    in_len = _lengths(op, "input_lengths", input_lengths, n)
    tg_len = _lengths(op, "target_lengths", target_lengths, n)
    if (in_len > big_t).any() or (in_len < 0).any():
        raise LoomValueError(f"loom.nn.functional.{op}: input_lengths {in_len.tolist()} must lie in [0, {big_t}]")
    # Targets as a padded (N, S) table.
    if unbatched:
        tg_len = tg_len[:1]
        table = tg.reshape(1, -1).to(dt.int64)
    elif tg.ndim == 2:
        if tg.shape[0] != n:
            raise ShapeError(f"loom.nn.functional.{op}: targets {fmt_shape(tg.shape)} must have one row per "
                             f"batch element ({n})")
        table = tg.to(dt.int64)
    else:
        flat = tg.reshape(-1).to(dt.int64)
        if int(tg_len.sum()) > flat.shape[0]:
            raise LoomValueError(f"loom.nn.functional.{op}: target_lengths sum to {int(tg_len.sum())} but "
                                 f"targets hold {flat.shape[0]} entries")
        s_max = int(tg_len.max()) if n else 0
        starts = np.concatenate([[0], np.cumsum(tg_len)[:-1]]).astype(np.int64)
        pos = np.minimum(starts[:, None] + np.arange(s_max)[None, :], max(flat.shape[0] - 1, 0))
        table = gather(flat, 0, tensor(pos.reshape(-1))).reshape(n, s_max)
    if (tg_len > table.shape[1]).any() or (tg_len < 0).any():
        raise LoomValueError(f"loom.nn.functional.{op}: target_lengths {tg_len.tolist()} must lie in "
                             f"[0, {table.shape[1]}]")
    s = table.shape[1]
    width = 2 * s + 1
    # Extended label sequence: blank, l1, blank, l2, ..., blank.
    is_label = np.zeros(width, bool)
    is_label[1::2] = True
    blanks = tensor(np.full((n, width), blank, np.int64))
    if s:
        label_at = tensor(np.clip((np.arange(width) - 1) // 2, 0, s - 1)).reshape(1, -1).expand(n, width)
        ext = where(tensor(is_label).reshape(1, -1), gather(table, 1, label_at), blanks)
    else:
        ext = blanks
    # Skip transitions (s-2 -> s) are allowed onto a label that differs from the label two back.
    back2 = tensor(np.maximum(np.arange(width) - 2, 0)).reshape(1, -1).expand(n, width)
    prev2 = where(tensor(np.arange(width) >= 2).reshape(1, -1), gather(ext, 1, back2),
                  const(-1, (), dt.int64))
    can_skip = tensor(is_label).reshape(1, -1) & (ext != prev2)
    neg_inf = const(-math.inf, (), lp.dtype)
    active = tensor((np.arange(width)[None, :] < 2 * tg_len[:, None] + 1))  # (N, W) states in use.

    emit = [gather(lp[t], 1, ext) for t in range(big_t)]                 # each (N, W)
    init = np.full((n, width), False)
    init[:, 0] = True
    init[:, 1] = tg_len > 0
    alpha = where(tensor(init) & active, emit[0], neg_inf) if big_t else None
    for t in range(1, big_t):
        a1 = _shift(alpha, 1)
        a2 = where(can_skip, _shift(alpha, 2), neg_inf)
        new = _logsumexp3(alpha, a1, a2) + emit[t]
        new = where(active, new, neg_inf)
        live = tensor((t < in_len).reshape(-1, 1))
        alpha = where(live, new, alpha)
    if big_t == 0:
        nll = tensor(np.where(tg_len == 0, 0.0, math.inf).astype(lp.dtype.np))
    else:
        last = tensor((2 * tg_len).reshape(-1, 1))
        before = tensor(np.maximum(2 * tg_len - 1, 0).reshape(-1, 1))
        end = gather(alpha, 1, last).reshape(-1)
        end2 = where(tensor(tg_len > 0), gather(alpha, 1, before).reshape(-1), neg_inf)
        nll = -_logsumexp3(end, end2, None)
        nll = where(tensor(in_len == 0), tensor(np.where(tg_len == 0, 0.0, math.inf).astype(lp.dtype.np)), nll)
    if zero_infinity:
        nll = where(nll == math.inf, const(0.0, (), nll.dtype), nll)
    if reduction == "mean":
        return (nll / tensor(np.maximum(tg_len, 1).astype(lp.dtype.np))).mean()
    if unbatched and reduction == "none":
        return nll.reshape(())
    return _reduce_loss(nll, reduction)


def _shift(a: Tensor, k: int) -> Tensor:
    """a moved k places right along dim 1, with -inf coming in on the left."""
    return pad(a[:, :a.shape[1] - k], (k, 0), value=-math.inf)


def _logsumexp3(a: Tensor, b: Tensor, c: Tensor | None) -> Tensor:
    """log(e^a + e^b [+ e^c]) that is -inf (with zero gradients, not NaN) when all are -inf."""
    m = maximum(a, b) if c is None else maximum(maximum(a, b), c)
    m = m.detach()
    finite = m > -math.inf
    safe = where(finite, m, const(0.0, (), m.dtype))
    total = exp(a - safe) + exp(b - safe)
    if c is not None:
        total = total + exp(c - safe)
    return where(finite, log(where(finite, total, const(1.0, (), total.dtype))) + safe, m)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction: str = "mean",
                         ignore_index: int | None = None, label_smoothing: float = 0.0, options=None) -> Tensor:
    """cross_entropy(linear(input, linear_weight), target), as `torch.nn.functional.linear_cross_entropy`.

    `linear_weight` is (C, in_features) or (C, d1, ..., dK, in_features) for a K-dimensional loss; the
    logits are then (N, C, d1, ..., dK). `ignore_index=None` ignores no target. `options` (PyTorch's
    chunking configuration) is accepted; loom always evaluates the reference formula.

    Examples
    --------
    >>> x, w = loom.randn(4, 3), loom.randn(5, 3)
    >>> loom.nn.functional.linear_cross_entropy(x, w, loom.tensor([0, 1, 4, 2])).shape
    loom.Size([])
    """
    from loom.functional.nn import cross_entropy
    x, w = _t(input), _t(linear_weight)
    if w.ndim < 2 or x.ndim < 1 or w.shape[-1] != x.shape[-1]:
        raise ShapeError(f"loom.nn.functional.linear_cross_entropy: input {fmt_shape(x.shape)} and linear_weight "
                         f"{fmt_shape(w.shape)} must share their last dim (in_features)")
    out_dims = list(w.shape[:-1])
    logits = x.matmul(w.reshape(-1, w.shape[-1]).transpose(0, 1)).reshape(list(x.shape[:-1]) + out_dims)
    if linear_bias is not None:
        logits = logits + _t(linear_bias)
    return cross_entropy(logits, target, weight=weight, ignore_index=-100 if ignore_index is None else ignore_index,
                         reduction=reduction, label_smoothing=label_smoothing)


NN_FUNCTIONAL = ["multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss", "ctc_loss",
                 "linear_cross_entropy"]
__all__ = NN_FUNCTIONAL
