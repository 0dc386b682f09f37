"""Reductions and scans, built on the sum/prod/max/min primitives."""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, arange, const, normalize_dim, normalize_dims, tensor


class ValuesIndices(NamedTuple):
    values: Tensor
    indices: Tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _reduce(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    axes = normalize_dims(dim, x.ndim, op)
    if x.ndim == 0:
        return x
    if not axes:
        return x
    return apply(op, (x,), {"axes": axes, "keepdim": bool(keepdim)})


def sum(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum over `dim` (all dims when None); bool and integer inputs sum in int64."""
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype.category < 2:
        x = x.to(dt.int64)
    return _reduce("sum", x, dim, keepdim)


def nansum(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    from loom.functional.math import isnan, where
    x = _t(x)
    return sum(where(isnan(x), 0.0, x) if x.dtype.is_floating_point else x, dim, keepdim, dtype)


def prod(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype.category < 2:
        x = x.to(dt.int64)
    return _reduce("prod", x, dim, keepdim)


def _count(x: Tensor, dim) -> int:
    return math.prod(x.shape[a] for a in normalize_dims(dim, x.ndim, "mean")) if x.ndim else 1


def mean(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.mean: could not infer output dtype; input dtype must be floating point, "
                         f"got {x.dtype.name} (pass dtype=loom.float32)")
    n = _count(x, dim)
    s = _reduce("sum", x, dim, keepdim)
    return s / n if n else s * float("nan")


def nanmean(x, dim=None, keepdim: bool = False) -> Tensor:
    from loom.functional.math import isnan
    x = _t(x)
    valid = (~isnan(x)).to(x.dtype)
    return nansum(x, dim, keepdim) / sum(valid, dim, keepdim)


def var(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance; `correction` (default 1, Bessel) as in PyTorch, `unbiased` is its old spelling."""
    x = _t(x)
    if isinstance(unbiased, (int, tuple, list)) and not isinstance(unbiased, bool):
        dim, unbiased = unbiased, None  # Positional dim after x, as var(x, 1).
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.var: expected a floating point tensor, got {x.dtype.name}")
    n = _count(x, dim)
    mu = mean(x, dim, keepdim=True)
    d = x - mu
    s = _reduce("sum", d * d, dim, keepdim)
    return s / builtins.max(n - correction, 0) if n - correction > 0 else s / 0.0


def std(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    return var(x, dim, unbiased, keepdim, correction=correction).sqrt()


def var_mean(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return var(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return std(x, dim, unbiased, keepdim, correction=correction), mean(x, dim, keepdim)


def _nonempty(op: str, x: Tensor, dim) -> None:
    axes = normalize_dims(dim, x.ndim, op)
    if x.ndim and builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"loom.{op}: cannot reduce over a zero-size dimension of a tensor of shape "
                         f"{fmt_shape(x.shape)}; the operation has no identity")


def amax(x, dim=None, keepdim: bool = False) -> Tensor:
    x = _t(x)
    _nonempty("amax", x, dim)
    return _reduce("max", x, dim, keepdim)


def amin(x, dim=None, keepdim: bool = False) -> Tensor:
    x = _t(x)
    _nonempty("amin", x, dim)
    return _reduce("min", x, dim, keepdim)


def _arg_extreme(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    """Index of the first max/min along dim (the first NaN, where there is one)."""
    x = _t(x)
    if dim is None:
        flat = x.reshape(-1)
        out = _arg_extreme(op, flat, 0, False)
        return out.reshape([1] * x.ndim) if keepdim else out
    d = normalize_dim(dim, x.ndim, op)
    _nonempty(op, x, d)
    if x.ndim == 0:
        return const(0, (), dt.int64)
    ext = (amax if op == "argmax" else amin)(x.detach(), d, keepdim=True)
    hit = x.detach() == ext
    if x.dtype.is_floating_point:
        from loom.functional.math import isnan
        nan = isnan(x.detach())
        hit = hit | nan
        hit = hit & ~(nan.any(d, keepdim=True) & ~nan)
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    pos = arange(n).reshape(shape).expand(x.shape)
    from loom.functional.math import where
    cand = where(hit, pos, n)
    return _reduce("min", cand, d, keepdim)


def argmax(x, dim=None, keepdim: bool = False) -> Tensor:
    return _arg_extreme("argmax", x, dim, keepdim)


def argmin(x, dim=None, keepdim: bool = False) -> Tensor:
    return _arg_extreme("argmin", x, dim, keepdim)


def _values_indices(op: str, x, dim, keepdim):
    from loom.functional.indexing import gather
    idx = _arg_extreme("arg" + op, x, dim, True)
    values = gather(x, normalize_dim(dim, x.ndim, op), idx) if x.ndim else x
    if not keepdim and x.ndim:
        d = normalize_dim(dim, x.ndim, op)
        values, idx = values.squeeze(d), idx.squeeze(d)
    return ValuesIndices(values, idx)


def max(x, dim=None, keepdim: bool = False):
    """max(x) -> value; max(x, dim) -> (values, indices); max(x, other) -> elementwise maximum."""
    x = _t(x)
    if isinstance(dim, Tensor):
        from loom.functional.math import maximum
        return maximum(x, dim)
    if dim is None:
        return amax(x)
    return _values_indices("max", x, dim, keepdim)


def min(x, dim=None, keepdim: bool = False):
    x = _t(x)
    if isinstance(dim, Tensor):
        from loom.functional.math import minimum
        return minimum(x, dim)
    if dim is None:
        return amin(x)
    return _values_indices("min", x, dim, keepdim)


def aminmax(x, *, dim=None, keepdim: bool = False):
    return amin(x, dim, keepdim), amax(x, dim, keepdim)


def logsumexp(x, dim=None, keepdim: bool = False) -> Tensor:
    x = _t(x)
    if not x.dtype.is_floating_point:
        x = x.to(dt.get_default_dtype())
    m = amax(x.detach(), dim, keepdim=True)
    from loom.functional.math import isinf, where
    m = where(isinf(m), 0.0, m)  # All -inf (or an inf) must not turn into NaN through x - m.
    out = ((x - m).exp().sum(dim, keepdim=True)).log() + m
    if not keepdim:
        axes = normalize_dims(dim, x.ndim, "logsumexp")
        out = out.reshape([s for i, s in enumerate(out.shape) if i not in axes])
    return out


def all(x, dim=None, keepdim: bool = False) -> Tensor:
    x = _t(x)
    b = x.to(dt.bool_) if x.dtype is not dt.bool_ else x
    if b.numel() == 0 and dim is None:
        return const(True, (), dt.bool_)
    return _reduce("min", b.to(dt.uint8), dim, keepdim).to(dt.bool_) if b.numel() else \
        _empty_logical(b, dim, keepdim, True)


def any(x, dim=None, keepdim: bool = False) -> Tensor:
    x = _t(x)
    b = x.to(dt.bool_) if x.dtype is not dt.bool_ else x
    if b.numel() == 0 and dim is None:
        return const(False, (), dt.bool_)
    return _reduce("max", b.to(dt.uint8), dim, keepdim).to(dt.bool_) if b.numel() else \
        _empty_logical(b, dim, keepdim, False)


def _empty_logical(b, dim, keepdim, value):
    from loom.functional.math import where
    s = _reduce("sum", b.to(dt.int64), dim, keepdim)
    return where(s == 0, value, value)


def count_nonzero(x, dim=None) -> Tensor:
    return sum(_t(x) != 0, dim)


def norm(x, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Vector p-norm over `dim` (all elements when None); 'fro' is the 2-norm, 'nuc' unsupported."""
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.norm: expected a floating point tensor, got {x.dtype.name}")
    if p in ("fro", 2, 2.0, None):
        return ((x * x).sum(dim, keepdim)).sqrt()
    if p == "nuc":
        raise LoomError("loom.norm: the nuclear norm needs an SVD, which loom does not have yet")
    if p in (float("inf"), "inf"):
        return amax(x.abs(), dim, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(x.abs(), dim, keepdim)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    if p == 1:
        return x.abs().sum(dim, keepdim)
    return (x.abs() ** p).sum(dim, keepdim) ** (1.0 / p)


def _scan(x: Tensor, dim: int, combine, identity) -> Tensor:
    """Inclusive scan along `dim` in log2(n) shifted combines (Hillis-Steele), all primitives."""
    n = x.shape[dim]
    shift = 1
    while shift < n:
        pads = [(0, 0)] * x.ndim
        pads[dim] = (shift, 0)
        starts = [0] * x.ndim
        stops = list(x.shape)
        stops[dim] = n
        shifted = apply("slice", (apply("pad", (x,), {"pads": pads, "value": identity}),),
                        {"starts": starts, "stops": stops, "steps": [1] * x.ndim})
        x = combine(x, shifted)
        shift *= 2
    return x


def cumsum(x, dim: int, dtype=None) -> Tensor:
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype.category < 2:
        x = x.to(dt.int64)
    if x.ndim == 0:
        return x
    return _scan(x, normalize_dim(dim, x.ndim, "cumsum"), lambda a, b: a + b, 0)


def cumprod(x, dim: int, dtype=None) -> Tensor:
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype.category < 2:
        x = x.to(dt.int64)
    if x.ndim == 0:
        return x
    return _scan(x, normalize_dim(dim, x.ndim, "cumprod"), lambda a, b: a * b, 1)


def _cum_extreme(op, x, dim):
    from loom.functional.math import maximum, minimum
    x = _t(x)
    if x.ndim == 0:
        return ValuesIndices(x, const(0, (), dt.int64))
    d = normalize_dim(dim, x.ndim, op)
    fn = maximum if op == "cummax" else minimum
    if x.dtype.is_floating_point:
        ident = float("-inf") if op == "cummax" else float("inf")
    else:
        import numpy as np
        info = np.iinfo(x.dtype.np) if x.dtype is not dt.bool_ else None
        ident = (info.min if op == "cummax" else info.max) if info else (op != "cummax")
    values = _scan(x, d, fn, ident)
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    pos = arange(n).reshape(shape).expand(x.shape)
    from loom.functional.math import where
    idx = _scan(where(x == values, pos, -1), d, maximum, -1)
    return ValuesIndices(values, idx)


def cummax(x, dim: int):
    return _cum_extreme("cummax", x, dim)


def cummin(x, dim: int):
    return _cum_extreme("cummin", x, dim)


def logcumsumexp(x, dim: int) -> Tensor:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "logcumsumexp")
    m = amax(x.detach(), d, keepdim=True)
    from loom.functional.math import isinf, where
    m = where(isinf(m), 0.0, m)
    return cumsum((x - m).exp(), d).log() + m


METHODS = ["sum", "nansum", "prod", "mean", "nanmean", "var", "std", "amax", "amin", "argmax", "argmin",
           "max", "min", "aminmax", "logsumexp", "all", "any", "count_nonzero", "norm", "cumsum", "cumprod",
           "cummax", "cummin", "logcumsumexp"]
INPLACE = ["cumsum", "cumprod"]
