"""PyTorch's remaining op names: aliases, in-place twins and small composites over the other modules.

PyTorch spells many ops twice (`arccos` and `acos`, `multiply` and `mul`) and
gives most an in-place twin; the ones loom's other modules do not define live
here, each one line over the op that computes it, so `loom.torch` programs
find every name on `Tensor` and at the top level.
"""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np

from loom import _upper
from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional import indexing as _indexing
from loom.functional import math as _math
from loom.functional import reduce as _reduce
from loom.functional import shape as _shape
from loom.tensor import Tensor, apply, arange, full, normalize_dim, tensor, zeros


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _alias(target, name: str):
    """A function named `name` that is `target` (its own object, so loom exports it under the new name)."""
    def fn(*args, **kwargs):
        return target(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = f"Alias of :func:`loom.{target.__name__}` (PyTorch's second spelling)."
    return fn


_ALIASES = {
    "arccos": _math.acos, "arcsin": _math.asin, "arctan": _math.atan, "arccosh": _math.acosh,
    "arcsinh": _math.asinh, "arctanh": _math.atanh, "arctan2": _math.atan2, "absolute": _math.abs,
    "negative": _math.neg, "multiply": _math.mul, "subtract": _math.sub, "divide": _math.div,
    "true_divide": _math.div, "clip": _math.clamp, "unsafe_chunk": _shape.chunk, "unsafe_split": _shape.split,
    "unsafe_split_with_sizes": getattr(_shape, "split_with_sizes", None),
}
_ALIASES = {k: v for k, v in _ALIASES.items() if v is not None}
for _name, _fn in _ALIASES.items():
    globals()[_name] = _alias(_fn, _name)


def isclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (and equal infinities), as `torch.isclose`.

    Examples
    --------
    >>> loom.isclose(loom.tensor([1.0, 2.0]), loom.tensor([1.0 + 1e-7, 2.1])).tolist()
    [True, False]
    """
    a, b = _t(input), _t(other)
    if a.dtype is not b.dtype:
        raise DTypeError(f"loom.isclose: expected both inputs to have the same dtype, got {a.dtype.name} and "
                         f"{b.dtype.name}")
    if rtol < 0 or atol < 0:
        raise LoomValueError(f"loom.isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    close = a == b
    if a.dtype is dt.bool_:
        return close
    if a.dtype.is_floating_point and equal_nan:
        close = close | (_math.isnan(a) & _math.isnan(b))
    if a.dtype.category == 1:  # Integers: the error in the default float, as PyTorch computes it.
        a, b = a.to(dt.get_default_dtype()), b.to(dt.get_default_dtype())
    if rtol == 0 and atol == 0:
        return close
    err = (a - b).abs()
    return close | (_math.isfinite(err) & (err <= atol + (b * rtol).abs()))


def allclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every element is close (see `isclose`), as `torch.allclose`.

    Examples
    --------
    >>> loom.allclose(loom.ones(3), loom.ones(3) + 1e-9)
    True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())



# ---------------------------------------------------------------- differences, statistics, counting

def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:
    """The n-th forward difference along `dim`, as `torch.diff`.

    Examples
    --------
    >>> loom.diff(loom.tensor([1, 4, 9, 16])).tolist()
    [3, 5, 7]
    """
    x = _t(input)
    if x.ndim == 0:
        raise ShapeError("loom.diff: expected a tensor with at least one dimension, got a 0-d tensor")
    d = normalize_dim(dim, x.ndim, "diff")
    parts = [p if p.ndim else p.expand(*x.shape[:d], 1, *x.shape[d + 1:])
             for p in (_t(v) for v in (prepend, x, append) if v is not None)]
    x = _shape.cat(parts, d) if len(parts) > 1 else x
    for _ in range(n):
        if x.shape[d] == 0:
            break
        a, b = _shape.narrow(x, d, 1, x.shape[d] - 1), _shape.narrow(x, d, 0, x.shape[d] - 1)
        x = a ^ b if x.dtype is dt.bool_ else a - b
    return x


def cov(input, *, correction: int = 1, fweights=None, aweights=None) -> Tensor:
    """Covariance of the rows of `input` (variables) over its columns (observations), as `torch.cov`.

    Examples
    --------
    >>> loom.cov(loom.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    x = _t(input)
    if x.ndim > 2:
        raise ShapeError(f"loom.cov: expected a tensor with at most 2 dimensions, got {fmt_shape(x.shape)}")
    x = x.reshape(1, -1) if x.ndim < 2 else x
    if x.dtype.category < 2:
        x = x.to(dt.get_default_dtype())
    n = x.shape[1]
    xt = (lambda t: t.t().conj()) if x.dtype.is_complex else (lambda t: t.t())  # Complex: xm @ xm^H.
    w = None
    if fweights is not None:
        w = _t(fweights).to(x.dtype)
    if aweights is not None:
        w = _t(aweights).to(x.dtype) if w is None else w * _t(aweights).to(x.dtype)
    if w is None:
        avg = x.mean(1)
        wsum = float(n)
        norm = wsum - correction
        xm = x - avg.unsqueeze(1)
        c = xm @ xt(xm)
    else:
        wsum_t = w.sum()
        avg = (x * w).sum(1) / wsum_t
        xm = x - avg.unsqueeze(1)
        c = (xm * w) @ xt(xm)
        if correction == 0:
            norm = wsum_t
        elif aweights is None:
            norm = wsum_t - correction
        else:
            norm = wsum_t - correction * (w * _t(aweights).to(x.dtype)).sum() / wsum_t
    c = c / _math.clamp(norm, min=0) if isinstance(norm, Tensor) else c / max(norm, 0)
    return c.squeeze() if c.numel() == 1 else c


def corrcoef(input) -> Tensor:
    """Pearson correlation coefficients of the rows of `input`, as `torch.corrcoef` (clipped to [-1, 1]).

    Examples
    --------
    >>> loom.corrcoef(loom.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    c = cov(input)
    if c.ndim == 0:
        return c / c
    diag = _shape.diagonal(c)
    d = (diag.real if c.dtype.is_complex else diag).sqrt()
    c = c / d.unsqueeze(1) / d.unsqueeze(0)
    if c.dtype.is_complex:  # Each part clipped, as PyTorch.
        return apply("complex", (_math.clamp(c.real, -1.0, 1.0), _math.clamp(c.imag, -1.0, 1.0)), {})
    return _math.clamp(c, -1.0, 1.0)


def trace(input) -> Tensor:
    """Sum of the main diagonal of a 2-d tensor, as `torch.trace`."""
    x = _t(input)
    if x.ndim != 2:
        raise ShapeError(f"loom.trace: expected a matrix, got {fmt_shape(x.shape)}")
    return _shape.diagonal(x).sum()


def diagflat(input, offset: int = 0) -> Tensor:
    """A 2-d tensor with the flattened `input` on diagonal `offset`, as `torch.diagflat`."""
    return _shape.diag(_t(input).reshape(-1), offset)


def dist(input, other, p: float = 2) -> Tensor:
    """The p-norm of `input - other`, as `torch.dist`."""
    return _reduce.norm(_t(input) - _t(other), p)


def cross(input, other, dim=None) -> Tensor:
    """Cross product of 3-vectors along `dim` (default: the first dim of size 3), as `torch.cross`."""
    a, b = _t(input), _t(other)
    if dim is None:
        sizes = [k for k, n in enumerate(a.shape) if n == 3]
        if not sizes:
            raise ShapeError(f"loom.cross: no dimension of size 3 in input {fmt_shape(a.shape)}")
        dim = sizes[0]
        warnings.warn(f"loom.cross: without dim, the first dimension of size 3 ({dim}) is used, as PyTorch does; "
                      "pass dim explicitly or use loom.linalg.cross", UserWarning, stacklevel=2)
    return _upper.cross(a, b, dim=dim)


def _bin_indices(x: Tensor, bins: int, lo: float, hi: float):
    """Bin of each element of `x` among `bins` equal bins over [lo, hi], and whether it falls in them."""
    xf = x.to(dt.float64)
    idx = ((xf - lo) * (bins / (hi - lo))).floor().to(dt.int64)
    idx = _math.clamp(idx, 0, bins - 1)  # The upper edge belongs to the last bin.
    inside = (xf >= lo) & (xf <= hi)
    return idx, inside


def histc(input, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """Histogram of `input` with `bins` equal-width bins over [min, max], as `torch.histc`.

    When min and max are both 0 the data's own minimum and maximum are used.
    Elements outside the range are ignored.

    Examples
    --------
    >>> loom.histc(loom.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3).tolist()
    [0.0, 2.0, 1.0, 0.0]
    """
    x = _t(input).detach()
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.histc: expected a floating point tensor, got {x.dtype.name}")
    if bins <= 0:
        raise LoomValueError(f"loom.histc: bins must be > 0, got {bins}")
    lo, hi = float(min), float(max)
    if lo == hi and x.numel():
        lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise LoomValueError(f"loom.histc: max must be larger than min, got min={min}, max={max}")
    idx, inside = _bin_indices(x.reshape(-1), bins, lo, hi)
    return zeros(bins, dtype=x.dtype).scatter_add(0, idx, inside.to(x.dtype))


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """Count of each value of a 1-d non-negative integer tensor, as `torch.bincount`.

    Examples
    --------
    >>> loom.bincount(loom.tensor([0, 2, 2, 5])).tolist()
    [1, 0, 2, 0, 0, 1]
    """
    x = _t(input)
    if x.ndim != 1 or x.dtype.category != 1:
        raise LoomValueError(f"loom.bincount: expected a 1-d integer tensor, got {x.dtype.name}{fmt_shape(x.shape)}")
    if x.numel() and int(x.min()) < 0:
        raise LoomValueError(f"loom.bincount: input values must be non-negative, got {int(x.min())}")
    n = builtins_max(int(x.max()) + 1 if x.numel() else 0, minlength)
    if weights is None:
        return zeros(n, dtype=dt.int64).scatter_add(0, x.to(dt.int64), full(x.shape, 1, dtype=dt.int64))
    w = _t(weights)
    d = w.dtype if w.dtype.is_floating_point else dt.float64
    return zeros(n, dtype=d).scatter_add(0, x.to(dt.int64), w.to(d))


builtins_max = max


def _tri_indices(op: str, row: int, col: int, offset: int, lower: bool, dtype) -> Tensor:
    if row < 0 or col < 0:
        raise LoomValueError(f"loom.{op}: row and col must be non-negative, got row={row}, col={col}")
    r, c = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    return tensor(np.stack([r, c]).astype(np.int64), dtype=dtype or dt.int64)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """Indices (2, N) of the lower triangle of a row x col matrix, as `torch.tril_indices`.

    Examples
    --------
    >>> loom.tril_indices(2, 2).tolist()
    [[0, 1, 1], [0, 0, 1]]
    """
    return _tri_indices("tril_indices", row, col, offset, True, dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """Indices (2, N) of the upper triangle of a row x col matrix, as `torch.triu_indices`."""
    return _tri_indices("triu_indices", row, col, offset, False, dtype)


def block_diag(*tensors) -> Tensor:
    """A block-diagonal matrix of the given 0-, 1- and 2-d tensors, as `torch.block_diag`.

    Examples
    --------
    >>> loom.block_diag(loom.ones(1, 1), loom.ones(1, 2) * 2).tolist()
    [[1.0, 0.0, 0.0], [0.0, 2.0, 2.0]]
    """
    mats = []
    for t in (_t(v) for v in tensors):
        if t.ndim > 2:
            raise ShapeError(f"loom.block_diag: expected tensors of at most 2 dims, got {fmt_shape(t.shape)}")
        mats.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not mats:
        return zeros(0, 0)
    d = mats[0].dtype
    for m in mats[1:]:
        d = dt.promote_pair(d, m.dtype)
    width = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        rows.append(_shape.pad(m.to(d), (left, width - left - m.shape[1])))
        left += m.shape[1]
    return _shape.cat(rows, 0)


def cartesian_prod(*tensors) -> Tensor:
    """All combinations of one element from each 1-d tensor, as `torch.cartesian_prod`.

    Examples
    --------
    >>> loom.cartesian_prod(loom.tensor([1, 2]), loom.tensor([3, 4])).tolist()
    [[1, 3], [1, 4], [2, 3], [2, 4]]
    """
    ts = [_t(v) for v in tensors]
    if len(ts) == 1:
        return ts[0]
    grids = _shape.meshgrid(*ts, indexing="ij")
    return _shape.stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r: int = 2, with_replacement: bool = False) -> Tensor:
    """Length-`r` combinations of the elements of a 1-d tensor, as `torch.combinations`.

    Examples
    --------
    >>> loom.combinations(loom.tensor([1, 2, 3])).tolist()
    [[1, 2], [1, 3], [2, 3]]
    """
    x = _t(input)
    if x.ndim != 1:
        raise ShapeError(f"loom.combinations: expected a 1-d tensor, got {fmt_shape(x.shape)}")
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = list(pick(range(x.shape[0]), r))
    if not idx:
        return zeros(0, r, dtype=x.dtype) if r else zeros(0, dtype=x.dtype)
    return x[tensor(np.array(idx, dtype=np.int64))]


def cdist(x1, x2, p: float = 2.0, compute_mode=None) -> Tensor:
    """p-norm distances between the rows of `x1` (..., P, M) and `x2` (..., R, M), as `torch.cdist`.

    Examples
    --------
    >>> loom.cdist(loom.tensor([[0.0, 0.0]]), loom.tensor([[3.0, 4.0]])).tolist()
    [[5.0]]
    """
    a, b = _t(x1), _t(x2)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"loom.cdist: expected (..., P, M) and (..., R, M) inputs, got {fmt_shape(a.shape)} and "
                         f"{fmt_shape(b.shape)}")
    diffs = a.unsqueeze(-2) - b.unsqueeze(-3)
    if p == 0:
        return (diffs != 0).to(a.dtype).sum(-1)
    return _reduce.norm(diffs, p, dim=-1)


def rsub(input, other, alpha=1) -> Tensor:
    """`other - alpha * input`, as `torch.rsub`."""
    return _math.sub(other if isinstance(other, Tensor) else _t(other).to(_t(input).dtype), input, alpha=alpha)


def vander(x, N: int | None = None, increasing: bool = False) -> Tensor:
    """The Vandermonde matrix of a 1-d tensor, as `torch.vander`.

    Examples
    --------
    >>> loom.vander(loom.tensor([1, 2, 3]), N=3).tolist()
    [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    """
    v = _t(x)
    if v.ndim != 1:
        raise ShapeError(f"loom.vander: expected a 1-d tensor, got {fmt_shape(v.shape)}")
    n = v.shape[0] if N is None else N
    if n < 0:
        raise LoomValueError(f"loom.vander: N must be non-negative, got {n}")
    d = v.dtype if v.dtype is not dt.bool_ else dt.int64
    cols = [_math.pow(v.to(d), k) if k else full(v.shape, 1, dtype=d) for k in range(n)]
    if not increasing:
        cols = cols[::-1]
    return _shape.stack(cols, 1) if cols else zeros(v.shape[0], 0, dtype=d)


def unravel_index(indices, shape) -> tuple[Tensor, ...]:
    """The coordinates in `shape` of flat `indices`, as `torch.unravel_index`.

    Examples
    --------
    >>> [t.tolist() for t in loom.unravel_index(loom.tensor([4, 1]), (2, 3))]
    [[1, 0], [1, 1]]
    """
    idx = _t(indices)
    if idx.dtype.category != 1:
        raise DTypeError(f"loom.unravel_index: expected an integer tensor, got {idx.dtype.name}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    total = math.prod(shape)
    out = []
    for k, size in enumerate(shape):
        stride = math.prod(shape[k + 1:])
        out.append(_math.remainder(_math.floor_divide(idx, stride), size) if total else idx)
    return tuple(out)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """Whether each element is among `test_elements`, as `torch.isin`.

    Examples
    --------
    >>> loom.isin(loom.tensor([1, 2, 3]), loom.tensor([2, 5])).tolist()
    [False, True, False]
    """
    e = _t(elements)
    t = _t(test_elements).reshape(-1)
    hit = (e.unsqueeze(-1) == t).any(-1) if t.numel() else full(e.shape, False, dtype=dt.bool_)
    return ~hit if invert else hit


def chain_matmul(*matrices) -> Tensor:
    """The product of the given matrices, as `torch.chain_matmul`."""
    if len(matrices) == 1:
        return _t(matrices[0])
    return _upper.multi_dot(list(matrices))


def _split_along(op: str, input, sections, dim: int, min_ndim: int) -> tuple[Tensor, ...]:
    x = _t(input)
    if x.ndim < min_ndim:
        raise ShapeError(f"loom.{op}: expected a tensor with at least {min_ndim} dims, got {fmt_shape(x.shape)}")
    if isinstance(sections, int) and x.shape[dim] % sections:
        raise LoomValueError(f"loom.{op}: dim {dim} of size {x.shape[dim]} is not divisible by {sections}")
    return _shape.tensor_split(x, sections, dim)


def hsplit(input, sections) -> tuple[Tensor, ...]:
    """Split along dim 1 (dim 0 for 1-d input), as `torch.hsplit`."""
    x = _t(input)
    return _split_along("hsplit", x, sections, 1 if x.ndim > 1 else 0, 1)


def vsplit(input, sections) -> tuple[Tensor, ...]:
    """Split along dim 0 of a tensor with at least 2 dims, as `torch.vsplit`."""
    return _split_along("vsplit", input, sections, 0, 2)


def dsplit(input, sections) -> tuple[Tensor, ...]:
    """Split along dim 2 of a tensor with at least 3 dims, as `torch.dsplit`."""
    return _split_along("dsplit", input, sections, 2, 3)


def _scatter_into(input, src, index) -> Tensor:
    y = _t(input).clone()
    y[index] = _t(src)
    return y


def select_scatter(input, src, dim: int, index: int) -> Tensor:
    """`input` with `src` written at `index` along `dim` (out of place), as `torch.select_scatter`."""
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "select_scatter")
    return _scatter_into(x, src, (slice(None),) * d + (index,))


def slice_scatter(input, src, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    """`input` with `src` written into the slice start:end:step along `dim`, as `torch.slice_scatter`."""
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "slice_scatter")
    return _scatter_into(x, src, (slice(None),) * d + (slice(start, end, step),))


def diagonal_scatter(input, src, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """`input` with `src` written onto its diagonal, as `torch.diagonal_scatter`."""
    x = _t(input)
    d1, d2 = normalize_dim(dim1, x.ndim, "diagonal_scatter"), normalize_dim(dim2, x.ndim, "diagonal_scatter")
    n1, n2 = x.shape[d1], x.shape[d2]
    size = builtins_max(0, min(n1 + builtins_min(offset, 0), n2 - builtins_max(offset, 0)))
    k = arange(size)
    rows, cols = k - builtins_min(offset, 0), k + builtins_max(offset, 0)
    perm = [d for d in range(x.ndim) if d not in (d1, d2)] + [d1, d2]
    moved = x.permute(*perm)
    # The diagonal is the last dim of `src` (as torch.diagonal returns it).
    updated = moved.clone()
    updated[(Ellipsis, rows, cols)] = _t(src)
    inv = [0] * x.ndim
    for pos, d in enumerate(perm):
        inv[d] = pos
    return updated.permute(*inv)


builtins_min = min


def trapezoid(y, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """Integral of `y` along `dim` by the trapezoid rule, with sample points `x` or spacing `dx`.

    Examples
    --------
    >>> loom.trapezoid(loom.tensor([1.0, 2.0, 3.0])).item()
    4.0
    """
    yt = _t(y)
    d = normalize_dim(dim, yt.ndim, "trapezoid")
    n = yt.shape[d]
    if n == 0:
        return yt.sum(d)
    avg = (_shape.narrow(yt, d, 1, n - 1) + _shape.narrow(yt, d, 0, n - 1)) / 2
    if x is not None:
        xt = _t(x)
        dxs = diff(xt, dim=-1 if xt.ndim == 1 else d)
        if xt.ndim == 1:
            dxs = dxs.reshape((n - 1,) + (1,) * (yt.ndim - d - 1))
        return (avg * dxs).sum(d)
    return avg.sum(d) * (1.0 if dx is None else dx)


trapz = _alias(trapezoid, "trapz")


def cumulative_trapezoid(y, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """Running trapezoid-rule integral of `y` along `dim`, as `torch.cumulative_trapezoid`."""
    yt = _t(y)
    d = normalize_dim(dim, yt.ndim, "cumulative_trapezoid")
    n = yt.shape[d]
    avg = (_shape.narrow(yt, d, 1, n - 1) + _shape.narrow(yt, d, 0, n - 1)) / 2
    if x is not None:
        xt = _t(x)
        dxs = diff(xt, dim=-1 if xt.ndim == 1 else d)
        if xt.ndim == 1:
            dxs = dxs.reshape((n - 1,) + (1,) * (yt.ndim - d - 1))
        avg = avg * dxs
    elif dx is not None:
        avg = avg * dx
    return _reduce.cumsum(avg, d)


def renorm(input, p: float, dim: int, maxnorm: float) -> Tensor:
    """Each slice along `dim` rescaled to p-norm at most `maxnorm`, as `torch.renorm`.

    Examples
    --------
    >>> loom.renorm(loom.tensor([[3.0, 4.0], [0.3, 0.4]]), 2, 0, 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    x = _t(input)
    d = normalize_dim(dim, x.ndim, "renorm")
    others = [k for k in range(x.ndim) if k != d]
    norms = _reduce.norm(x, p, dim=others, keepdim=True) if others else x.abs()
    scale = _math.where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)
    return x * scale.to(x.dtype)


def bitwise_left_shift(input, other) -> Tensor:
    """`input << other` for integer tensors, as `torch.bitwise_left_shift`."""
    a = _t(input)
    if a.dtype.is_floating_point:
        raise DTypeError(f"loom.bitwise_left_shift: expected integer operands, got {a.dtype.name}")
    b = other if isinstance(other, Tensor) else tensor(other, dtype=a.dtype)
    return a * _math.pow(full((), 2, dtype=b.dtype), b).to(a.dtype)


def bitwise_right_shift(input, other) -> Tensor:
    """`input >> other` (arithmetic: rounds toward minus infinity), as `torch.bitwise_right_shift`."""
    a = _t(input)
    if a.dtype.is_floating_point:
        raise DTypeError(f"loom.bitwise_right_shift: expected integer operands, got {a.dtype.name}")
    b = other if isinstance(other, Tensor) else tensor(other, dtype=a.dtype)
    return _math.floor_divide(a, _math.pow(full((), 2, dtype=b.dtype), b).to(a.dtype))


def resolve_neg(input) -> Tensor:
    """`input` itself (loom has no lazy negation bit)."""
    return _t(input)


def nonzero_static(input, *, size: int, fill_value: int = -1) -> Tensor:
    """`nonzero(input)` cut or padded with `fill_value` to exactly `size` rows."""
    idx = _indexing.nonzero(_t(input))
    n = idx.shape[0]
    if n >= size:
        return idx[:size]
    return _shape.cat([idx, full((size - n, idx.shape[1]), fill_value, dtype=idx.dtype)], 0)


def put(input, index, source, accumulate: bool = False) -> Tensor:
    """`input` with `source` written at flat positions `index` (out of place), as `torch.put`."""
    x = _t(input)
    flat = x.reshape(-1)
    n = flat.shape[0]
    idx = _t(index).reshape(-1).to(dt.int64)
    idx = _math.where(idx < 0, idx + n, idx)
    return _indexing.index_put(flat, (idx,), _t(source).reshape(-1).to(x.dtype), accumulate).reshape(x.shape)


def fill(input, value) -> Tensor:
    """A tensor shaped like `input` filled with `value` (out of place), as `torch.fill`."""
    x = _t(input)
    return full(x.shape, value.item() if isinstance(value, Tensor) else value, dtype=x.dtype)


def matrix_power(input, n: int) -> Tensor:
    """`input` (a square matrix or a batch of them) to the integer power `n`, as `torch.matrix_power`."""
    return _upper.matrix_power(_t(input), n)


def constant_pad_nd(input, pad, value: float = 0) -> Tensor:
    """`nn.functional.pad(input, pad, value=value)`, as `torch.constant_pad_nd`."""
    return _shape.pad(_t(input), tuple(pad), value=value)


# ---------------------------------------------------------------- integers and floats

# Euclid's algorithm needs at most this many steps for operands of each width (Fibonacci worst case).
_EUCLID_STEPS = {dt.uint8: 13, dt.int8: 12, dt.int16: 24, dt.int32: 47, dt.int64: 93}


def gcd(input, other) -> Tensor:
    """Greatest common divisor of integer tensors (non-negative; gcd(0, 0) = 0), as `torch.gcd`.

    Examples
    --------
    >>> loom.gcd(loom.tensor([12, -18, 0]), loom.tensor([8, 12, 5])).tolist()
    [4, 6, 5]
    """
    a, b = _t(input), _t(other)
    d = dt.promote_pair(a.dtype, b.dtype)
    if d.is_floating_point or d is dt.bool_:
        raise DTypeError(f"loom.gcd: expected integer tensors, got {a.dtype.name} and {b.dtype.name}")
    a, b = _shape.broadcast_tensors(a.to(d).abs(), b.to(d).abs())
    for _ in range(_EUCLID_STEPS[d]):  # A fixed count keeps the graph static; finished pairs stay put.
        nz = b != 0
        a, b = _math.where(nz, b, a), _math.where(nz, _math.remainder(a, _math.where(nz, b, 1)), 0)
    return a


def lcm(input, other) -> Tensor:
    """Least common multiple of integer tensors (non-negative; 0 if either is 0), as `torch.lcm`.

    Examples
    --------
    >>> loom.lcm(loom.tensor([4, 6, 0]), loom.tensor([6, 4, 3])).tolist()
    [12, 12, 0]
    """
    a, b = _t(input), _t(other)
    g = gcd(a, b)
    return _math.where(g == 0, 0, (_math.floor_divide(a, _math.where(g == 0, 1, g)) * b).abs()).to(g.dtype)


def frexp(input):
    """Mantissa in [0.5, 1) (signed) and integer exponent with input = mantissa * 2**exponent, as `torch.frexp`.

    Examples
    --------
    >>> m, e = loom.frexp(loom.tensor([8.0, -3.0, 0.0]))
    >>> m.tolist(), e.tolist()
    ([0.5, -0.75, 0.0], [4, 2, 0])
    """
    x = _t(input)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.frexp: expected a floating point tensor, got {x.dtype.name}")
    xf = x.to(dt.float64)
    finite_nz = _math.isfinite(xf) & (xf != 0)
    ax = _math.where(finite_nz, xf.abs(), 1.0)
    e = ax.log2().floor() + 1
    m = ax / _math.pow(2.0, e)
    e = _math.where(m >= 1, e + 1, _math.where(m < 0.5, e - 1, e))  # Repair log2's rounding at the edges.
    m = ax / _math.pow(2.0, e)
    mant = _math.where(finite_nz, m * xf.sign(), xf)
    return mant.to(x.dtype), _math.where(finite_nz, e, 0.0).to(dt.int32)


def histogram(input, bins=100, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """Histogram of `input` (flattened) with `bins` equal bins or given edges, as `torch.histogram`.

    Returns (hist, bin_edges); the last bin includes its upper edge.

    Examples
    --------
    >>> h, edges = loom.histogram(loom.tensor([1.0, 2.0, 1.0]), bins=4, range=(0.0, 3.0))
    >>> h.tolist(), edges.tolist()
    ([0.0, 2.0, 1.0, 0.0], [0.0, 0.75, 1.5, 2.25, 3.0])
    """
    x = _t(input).detach()
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.histogram: expected a floating point tensor, got {x.dtype.name}")
    flat = x.reshape(-1)
    if isinstance(bins, Tensor):
        edges = bins.to(x.dtype)
        from loom.functional.sort import searchsorted
        n = edges.shape[0] - 1
        idx = _math.clamp(searchsorted(edges, flat, right=True) - 1, 0, n - 1)
        inside = (flat >= edges[0]) & (flat <= edges[-1])
    else:
        if range is not None:
            lo, hi = float(range[0]), float(range[1])
        else:
            lo, hi = (float(flat.min()), float(flat.max())) if flat.numel() else (0.0, 0.0)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        if lo > hi:
            raise LoomValueError(f"loom.histogram: range must satisfy min <= max, got {range}")
        n = int(bins)
        edges = tensor(np.linspace(lo, hi, n + 1), dtype=x.dtype)
        idx, inside = _bin_indices(flat, n, lo, hi)
    w = inside.to(x.dtype) if weight is None else inside.to(x.dtype) * _t(weight).reshape(-1).to(x.dtype)
    hist = zeros(n, dtype=x.dtype).scatter_add(0, idx, w)
    if density:
        hist = hist / (hist.sum() * diff(edges))
    return hist, edges


def _polygamma(self, n: int) -> Tensor:
    """`loom.polygamma(n, self)`: the method takes the order first, as `Tensor.polygamma`."""
    return polygamma(n, self)


def _polygamma_(self, n: int) -> Tensor:
    """In-place `polygamma(n, self)`."""
    return self._inplace("polygamma_", lambda s: polygamma(n, s))


def _float_power_(self, exponent) -> Tensor:
    """In-place `float_power`: the result is float64, so only a float64 tensor can hold it (as PyTorch)."""
    if self.dtype is not dt.float64:
        raise DTypeError(f"loom.float_power_: the base has dtype {self.dtype.name} but the operation's result "
                         "requires dtype float64")
    return self._inplace("float_power_", _math.float_power, exponent)


# ---------------------------------------------------------------- small dense linear algebra
# LU with partial pivoting and Cholesky written as n vectorised steps over the ops above: batched,
# differentiable to any order, and meant for the small matrices models invert (n up to a few hundred).

def _square(op: str, A) -> Tensor:
    a = _t(A)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"loom.{op}: expected a square matrix or a batch of them, got {fmt_shape(a.shape)}")
    if not a.dtype.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point matrix, got {a.dtype.name}")
    return a


def _lu(a: Tensor):
    """(L, U, perm, sign, pivots) with a[..., perm, :] = L @ U: L (m, k) unit lower and U (k, n) upper triangular,
    k = min(m, n); sign is the permutation's and pivots LAPACK's (1-based row swaps, int32).

    A zero pivot column is left as it is (its multipliers are 0), as LAPACK's getrf does.
    """
    rows, n = a.shape[-2:]
    kk = min(rows, n)
    batch = tuple(a.shape[:-2])
    idx = arange(rows).expand(*batch, rows)
    u, m = a, zeros(*batch, rows, kk, dtype=a.dtype)
    perm, sign, piv = idx, full(batch, 1.0, dtype=a.dtype), []
    for k in range(kk):
        col = _math.where(idx >= k, u[..., :, k].abs(), -1.0)
        p = col.argmax(-1, keepdim=True)
        piv.append(p)
        swap = _math.where(idx == k, p, _math.where(idx == p, k, idx)).unsqueeze(-1)
        u, m = u.gather(-2, swap.expand(*batch, rows, n)), m.gather(-2, swap.expand(*batch, rows, kk))
        perm = perm.gather(-1, swap.squeeze(-1))
        sign = sign * _math.where(p.squeeze(-1) == k, 1.0, -1.0)
        pivot = u[..., k:k + 1, k]
        f = _math.where(idx > k, u[..., :, k] / _math.where(pivot == 0, 1.0, pivot), 0.0)
        u = u - f.unsqueeze(-1) * u[..., k:k + 1, :]
        m = m + f.unsqueeze(-1) * (arange(kk) == k).to(a.dtype)
    eye = (arange(rows).unsqueeze(1) == arange(kk)).to(a.dtype)
    pivots = (_shape.cat(piv, -1) + 1).to(dt.int32) if piv else zeros(*batch, 0, dtype=dt.int32)
    return m + eye, _shape.triu(u[..., :kk, :]), perm, sign, pivots


def _diag(u: Tensor) -> Tensor:
    return _shape.diagonal(u, 0, -2, -1)


def det(input) -> Tensor:
    """Determinant of a square matrix (or batch), by LU with partial pivoting, as `torch.det`.

    Examples
    --------
    >>> loom.det(loom.tensor([[2.0, 1.0], [1.0, 3.0]])).item()
    5.0
    """
    a = _square("det", input)
    _, u, _, sign, _ = _lu(a)
    return sign * _reduce.prod(_diag(u), -1)


def slogdet(input):
    """(sign, log|det|) of a square matrix (or batch), as `torch.slogdet`."""
    a = _square("slogdet", input)
    _, u, _, sign, _ = _lu(a)
    d = _diag(u)
    return sign * _reduce.prod(d.sign(), -1), d.abs().log().sum(-1)


def logdet(input) -> Tensor:
    """log det of a square matrix (NaN for a negative determinant, -inf for zero), as `torch.logdet`."""
    s, logabs = slogdet(input)
    return _math.where(s < 0, math.nan, logabs)


def _tiny(t: Tensor) -> float:
    """The smallest normal number of the precision `t` computes in: a check bound that every backend
    compares alike (a float64 bound reads as 0 where a float32 comparison rounds it)."""
    return float(np.finfo(np.float64 if t.dtype.name == "float64" else np.float32).tiny)


def _pivots_nonzero(op: str, u: Tensor) -> Tensor:
    """U's diagonal, checked (where it is read) to hold no zero pivot."""
    from loom.functional.checks import check
    d = _diag(u)
    checked = check(d.abs(), op, f"loom.{op}: the matrix is singular (an LU pivot is {{value}})",
                    low=_tiny(d), high=math.inf, error="linalg")
    return d.sign() * checked


def _tri_solve(t: Tensor, b: Tensor, lower: bool, diag: Tensor | None = None) -> Tensor:
    """X with T X = B for triangular T (..., n, n) and B (..., n, k); `diag` overrides T's diagonal."""
    n = t.shape[-1]
    d = _diag(t) if diag is None else diag
    xs: list = [None] * n
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        acc = b[..., i, :]
        for j in (range(i) if lower else range(i + 1, n)):
            acc = acc - t[..., i, j:j + 1] * xs[j]
        xs[i] = acc / d[..., i:i + 1]
    return _shape.stack(xs, -2)


def _solve_lu(l: Tensor, u: Tensor, perm: Tensor, b: Tensor, pivots: Tensor) -> Tensor:
    """X with L U X = B[perm] (B of shape (..., n, k)); `pivots` is U's (checked) diagonal."""
    pb = b.gather(-2, perm.unsqueeze(-1).expand(*perm.shape, b.shape[-1]))
    return _tri_solve(u, _tri_solve(l, pb, True), False, pivots)


def inverse(input) -> Tensor:
    """The inverse of a square matrix (or batch); a singular one raises, as `torch.inverse`.

    Examples
    --------
    >>> loom.inverse(loom.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    a = _square("inverse", input)
    n = a.shape[-1]
    eye = (arange(n).unsqueeze(1) == arange(n)).to(a.dtype).expand(*a.shape)
    return _solve(a, eye, "inverse")


def cholesky(input, upper: bool = False) -> Tensor:
    """The Cholesky factor of a symmetric positive-definite matrix (or batch), as `torch.cholesky`.

    Examples
    --------
    >>> loom.cholesky(loom.tensor([[4.0, 2.0], [2.0, 5.0]])).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    """
    from loom.functional.checks import check
    a = _square("cholesky", input)
    a = (a + a.transpose(-2, -1)) * 0.5  # Read as symmetric: the gradient is symmetric, as PyTorch's.
    n = a.shape[-1]
    idx = arange(n)
    lm = zeros(*a.shape, dtype=a.dtype)
    for j in range(n):
        s = a[..., :, j] - (lm @ lm[..., j, :].unsqueeze(-1)).squeeze(-1)
        pivot = check(s[..., j], "cholesky", "loom.cholesky: the input is not positive-definite (a pivot is "
                      "{value})", low=_tiny(s), high=math.inf, error="linalg")
        d = pivot.sqrt().unsqueeze(-1)
        col = _math.where(idx > j, s / d, _math.where(idx == j, d.expand(s.shape), 0.0))
        lm = lm + col.unsqueeze(-1) * (idx == j).to(a.dtype)
    return lm.transpose(-2, -1) if upper else lm


def _solve(a: Tensor, b: Tensor, op: str) -> Tensor:
    l, u, perm, _, _ = _lu(a)
    return _solve_lu(l, u, perm, b, _pivots_nonzero(op, u))


def cholesky_solve(input, input2, upper: bool = False) -> Tensor:
    """X with A X = B given B (`input`) and A's Cholesky factor (`input2`), as `torch.cholesky_solve`.

    A is rebuilt from the whole factor (L @ L.T, or U.T @ U), so gradients reach every entry of it as
    in PyTorch.
    """
    b, f = _t(input), _t(input2)
    a = f.transpose(-2, -1) @ f if upper else f @ f.transpose(-2, -1)
    return _solve(a, b, "cholesky_solve")


def cholesky_inverse(input, upper: bool = False) -> Tensor:
    """The inverse of A from its Cholesky factor, as `torch.cholesky_inverse`."""
    f = _t(input)
    n = f.shape[-1]
    eye = (arange(n).unsqueeze(1) == arange(n)).to(f.dtype).expand(*f.shape)
    return cholesky_solve(eye, f, upper)


# ---------------------------------------------------------------- special functions
# Computed in float64 from the ops above and cast back, so each is differentiable (to any order) and
# accurate to float32 rounding; each branch of a `where` gets an input that is safe for it, so the
# branch not taken cannot put a NaN into the gradient.

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _special_input(op: str, x) -> tuple[Tensor, dt.DType]:
    x = _t(x)
    out = x.dtype if x.dtype.is_floating_point else dt.get_default_dtype()
    return x.to(dt.float64), out


def _lanczos_lgamma(x: Tensor) -> Tensor:
    """log|Gamma(x)| for x >= 0.5 (Lanczos, g = 7)."""
    z = x - 1.0
    a = _LANCZOS[0] + sum(c / (z + k) for k, c in enumerate(_LANCZOS[1:], 1))
    t = z + 7.5
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + a.log()


def lgamma(input) -> Tensor:
    """log |Gamma(x)| elementwise, as `torch.lgamma` (inf at 0 and the negative integers).

    Examples
    --------
    >>> round(loom.lgamma(loom.tensor([5.0])).item(), 4)
    3.1781
    """
    x, out = _special_input("lgamma", input)
    right = x >= 0.5
    pos = _math.where(right, x, 1.0 - x)  # >= 0.5 on both branches.
    refl_x = _math.where(right, 0.25, x)   # Never an integer on the branch not taken.
    lg = _lanczos_lgamma(pos)
    refl = (math.pi / (refl_x * math.pi).sin().abs()).log() - lg
    pole = (x <= 0) & (x == x.floor())
    return _math.where(pole, math.inf, _math.where(right, lg, refl)).to(out)


def _digamma_positive(x: Tensor) -> Tensor:
    """psi(x) for x >= 0.5: recurrence up by 6, then the asymptotic series."""
    shift = sum(1.0 / (x + k) for k in range(6))
    y = x + 6.0
    inv2 = 1.0 / (y * y)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return y.log() - 0.5 / y - series - shift


def digamma(input) -> Tensor:
    """The digamma function psi = d/dx log Gamma, as `torch.digamma` (-inf at 0, NaN at negative integers).

    Examples
    --------
    >>> round(loom.digamma(loom.tensor([1.0])).item(), 6)
    -0.577216
    """
    x, out = _special_input("digamma", input)
    right = x >= 0.5
    pos = _math.where(right, x, 1.0 - x)
    refl_x = _math.where(right, 0.25, x)
    psi = _digamma_positive(pos)
    value = _math.where(right, psi, psi - math.pi / (refl_x * math.pi).tan())
    pole = (x <= 0) & (x == x.floor())
    value = _math.where(pole, _math.where(x == 0, -math.inf, math.nan), value)
    return value.to(out)


def polygamma(n: int, input) -> Tensor:
    """The n-th derivative of digamma (n = 0 is digamma itself), as `torch.polygamma`."""
    if not isinstance(n, int) or n < 0:
        raise LoomValueError(f"loom.polygamma: n must be a non-negative int, got {n!r}")
    if n == 0:
        return digamma(input)
    from loom.autograd import grad
    from loom.functional.checks import check
    x, out = _special_input("polygamma", input)
    # Derivatives of the series written in primitives: exact to the series' accuracy, for x > 0.
    x = check(x, "polygamma", f"loom.polygamma: n={n} is computed for x > 0 only, got {{value}}", low=1e-300,
              high=math.inf, error="value")
    xs = x.detach().requires_grad_(True)
    y = _digamma_positive(xs)
    g = y
    for _ in range(n):
        (g,) = grad([g.sum()], [xs], create_graph=True)
    return g.detach().to(out)


def mvlgamma(input, p: int) -> Tensor:
    """The multivariate log-gamma of dimension `p`, as `torch.mvlgamma` (needs input > (p - 1) / 2)."""
    x, out = _special_input("mvlgamma", input)
    if p < 1:
        raise LoomValueError(f"loom.mvlgamma: p must be >= 1, got {p}")
    total = sum(lgamma(x - 0.5 * j).to(dt.float64) for j in range(p))
    return (total + p * (p - 1) / 4 * math.log(math.pi)).to(out)


def erfinv(input) -> Tensor:
    """The inverse error function on (-1, 1) (+-inf at +-1, NaN outside), as `torch.erfinv`.

    Giles' approximation refined by two Newton steps on erf.

    Examples
    --------
    >>> round(loom.erfinv(loom.tensor([0.5])).item(), 6)
    0.476936
    """
    x, out = _special_input("erfinv", input)
    inside = x.abs() < 1
    xs = _math.where(inside, x, 0.0)
    w = -((1.0 - xs) * (1.0 + xs)).log()
    central = w < 5.0
    wc = _math.where(central, w, 5.0) - 2.5
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p = c + p * wc
    wt = _math.where(central, 9.0, w).sqrt() - 3.0
    q = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        q = c + q * wt
    y = _math.where(central, p, q) * xs
    for _ in range(2):
        y = y - (_math.erf(y) - xs) / ((2.0 / math.sqrt(math.pi)) * (-(y * y)).exp())
    edge = _math.where(x.abs() == 1, x.detach() * math.inf, math.nan)  # Constant: no 0 * inf in the gradient.
    return _math.where(inside, y, edge).to(out)


def i0(input) -> Tensor:
    """The modified Bessel function of the first kind, order 0, as `torch.i0`.

    Examples
    --------
    >>> round(loom.i0(loom.tensor([1.0])).item(), 6)
    1.266066
    """
    x, out = _special_input("i0", input)
    ax = x.abs()
    small = ax <= 15.0
    xs = _math.where(small, ax, 0.0)
    q = xs * xs * 0.25
    term, total = None, None
    for k in range(40, 0, -1):  # sum_k (x^2/4)^k / (k!)^2, by Horner from the top term.
        term = q / (k * k) if term is None else q / (k * k) * (1.0 + term)
    total = 1.0 + term
    xl = _math.where(small, 20.0, ax)
    inv = 1.0 / (8.0 * xl)
    series, coef = 1.0, 1.0
    for k in range(1, 12):
        coef = coef * (2 * k - 1) ** 2 / k
        series = series + coef * inv ** k
    large = xl.exp() / (2 * math.pi * xl).sqrt() * series
    return _math.where(small, total, large).to(out)


# ---------------------------------------------------------------- Tensor-only methods

def _sum_to_size(self, *size) -> Tensor:
    """Sum this tensor down to `size`, which it must broadcast from, as `Tensor.sum_to_size`."""
    shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
    lead = self.ndim - len(shape)
    if lead < 0 or any(s != 1 and s != n for s, n in zip(shape, self.shape[lead:])):
        raise ShapeError(f"loom.sum_to_size: size {list(shape)} is not expandable to size {list(self.shape)}")
    x = self.sum(tuple(range(lead))) if lead else self
    dims = tuple(k for k, (s, n) in enumerate(zip(shape, x.shape)) if s == 1 and n != 1)
    return x.sum(dims, keepdim=True) if dims else x


def _unfold(self, dimension: int, size: int, step: int) -> Tensor:
    """Windows of `size` elements every `step` along `dimension`, as a new last dim (a view, as PyTorch's).

    Examples
    --------
    >>> loom.arange(5).unfold(0, 2, 2).tolist()
    [[0, 1], [2, 3]]
    """
    d = normalize_dim(dimension, self.ndim, "unfold")
    n = self.shape[d] if self.ndim else 1
    if size > n or size < 0:
        raise ShapeError(f"loom.unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise LoomValueError(f"loom.unfold: step is {step} but must be > 0")
    strides = self.stride()
    count = (n - size) // step + 1
    shape = list(self.shape) + [size]
    new_strides = list(strides) + [strides[d] if self.ndim else 1]
    if self.ndim:
        shape[d] = count
        new_strides[d] = strides[d] * step
    else:
        shape, new_strides = [size], [1]
    return self.as_strided(shape, new_strides, self.storage_offset())


def _fill_diagonal_(self, fill_value, wrap: bool = False) -> Tensor:
    """Fill the main diagonal in place (all dims equal, or a tall matrix with `wrap`), as PyTorch's."""
    if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
        raise ShapeError(f"loom.fill_diagonal_: expected a 2-d tensor or one with all dims equal, got "
                         f"{fmt_shape(self.shape)}")
    rows, cols = self.shape[0], self.shape[1]
    if self.ndim == 2:
        r = arange(rows).unsqueeze(1)
        c = arange(cols).unsqueeze(0)
        if wrap and rows > cols:
            mask = (r % (cols + 1) == c) & (r - r % (cols + 1) + c < rows)
        else:
            mask = r == c
    else:
        coords = [arange(n).reshape([n if k == j else 1 for k in range(self.ndim)]) for j, n in enumerate(self.shape)]
        mask = coords[0] == coords[1]
        for c in coords[2:]:
            mask = mask & (coords[0] == c)
    return self.masked_fill_(mask, fill_value)


def _where(self, condition, other) -> Tensor:
    """`loom.where(condition, self, other)`, as `Tensor.where`."""
    return _math.where(condition, self, other)


def _multinomial(self, num_samples: int, replacement: bool = False, *, generator=None) -> Tensor:
    """Samples from each row of `self` (unnormalised probabilities), as `Tensor.multinomial`."""
    from loom.tensor import multinomial as _multinomial
    return _multinomial(self, num_samples, replacement, generator)


def _apply_(self, callable) -> Tensor:  # noqa: A002
    """Replace each element by `callable(element)` in place (Python on the cpu, no autograd), as PyTorch's."""
    if self.requires_grad:
        raise LoomError("loom.apply_: can't call apply_() on a tensor that requires grad")
    values = np.vectorize(callable, otypes=[self.numpy().dtype])(self.numpy()) if self.numel() else self.numpy()
    return self.copy_(tensor(values, dtype=self.dtype))


def _map_(self, other, callable) -> Tensor:  # noqa: A002
    """Replace each element by `callable(self_element, other_element)` in place, as `Tensor.map_`."""
    if self.requires_grad:
        raise LoomError("loom.map_: can't call map_() on a tensor that requires grad")
    b = np.broadcast_to(_t(other).numpy(force=True), tuple(self.shape))
    values = np.vectorize(callable, otypes=[self.numpy().dtype])(self.numpy(), b) if self.numel() else self.numpy()
    return self.copy_(tensor(values, dtype=self.dtype))


def _as_subclass(self, cls) -> Tensor:
    """This tensor as an instance of the Tensor subclass `cls`, sharing its storage."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise LoomTypeError(f"loom.as_subclass: expected a subclass of loom.Tensor, got {cls!r}")
    t = self.view_as(self)
    t.__class__ = cls
    return t


# Ops whose in-place twin (`x.acos_()`) the other modules do not define: they get one here.
_INPLACE_OF = ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "erfc", "exp2", "log10", "log2",
               "deg2rad", "rad2deg", "sinc", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor",
               "logical_and", "logical_or", "logical_xor", "eq", "ge", "gt", "le", "lt", "ne", "greater",
               "greater_equal", "less", "less_equal", "not_equal", "heaviside", "xlogy",
               "logit", "nan_to_num", "fix", "ldexp", "hypot", "copysign", "fmod", "remainder", "lerp",
               "clamp_min", "clamp_max", "sgn", "square", "frac", "trunc", "digamma", "lgamma", "erfinv", "i0"]


def _taken() -> set[str]:
    """Tensor attribute names the other functional modules (and Tensor itself) already define."""
    from loom.functional import _modules
    names = set(Tensor.__dict__)
    for mod in _modules():
        if mod.__name__ == __name__:
            continue
        names.update(getattr(mod, "METHODS", []))
        names.update(n + "_" for n in getattr(mod, "INPLACE", []))
        names.update(getattr(mod, "PROPERTIES", {}))
    return names


def _sources():
    from loom.functional import _modules
    return [m for m in _modules() if m.__name__ != __name__]


_TAKEN = _taken()
for _name in _INPLACE_OF:
    if _name + "_" in _TAKEN:
        continue
    for _mod in [None] + _sources():
        _fn = globals().get(_name) if _mod is None else getattr(_mod, _name, None)
        if _fn is not None:
            globals()[_name] = _fn
            break
_NEW = ["diff", "cov", "corrcoef", "trace", "diagflat", "dist", "cross", "histc", "bincount", "renorm",
        "bitwise_left_shift", "bitwise_right_shift", "resolve_neg",
        "nonzero_static", "put", "fill", "matrix_power", "gcd", "lcm", "frexp", "histogram",
        "det", "slogdet", "logdet", "inverse", "cholesky", "cholesky_solve", "cholesky_inverse", "lgamma",
        "digamma", "polygamma", "mvlgamma",
        "erfinv", "i0", "unsafe_chunk", "unsafe_split", "hsplit", "vsplit", "dsplit",
        "select_scatter", "slice_scatter", "diagonal_scatter"]

METHODS = [n for n in sorted(_ALIASES) + ["isclose", "allclose"] + _NEW
           if n not in _TAKEN and n not in ("fill", "polygamma")]
# Methods with no top-level function of the same name in PyTorch.
TENSOR_METHODS = {n: globals()["_" + n] for n in ("sum_to_size", "unfold", "fill_diagonal_", "where", "multinomial",
                                                  "apply_", "map_", "as_subclass", "float_power_", "polygamma",
                                                  "polygamma_") if n not in _TAKEN}
INPLACE = [n for n in list(_ALIASES) + _INPLACE_OF + ["mvlgamma", "gcd", "lcm", "renorm", "bitwise_left_shift",
                                                       "bitwise_right_shift", "put"]
           if n != "clip" and not n.startswith("unsafe_") and n + "_" not in _TAKEN and n in globals()]
