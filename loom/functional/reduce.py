"""Reductions and scans, built on the sum/prod/max/min primitives.

Dtypes and gradients follow PyTorch: integer and bool sums/products are int64,
`mean` of an integer tensor needs `dtype=`, `amax`/`max()` split the gradient
evenly among ties, `max(dim)` routes it to the returned index, and square roots
inside `std`/`norm` give a zero (not NaN) gradient where their input is zero.
"""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from loom import _naming, _upper
from loom import dtypes as dt
from loom import autocast as _autocast
from loom.autograd.grad_mode import is_grad_enabled
from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, arange, const, normalize_dim, normalize_dims, tensor


class ValuesIndices(NamedTuple):
    """`(values, indices)`, as PyTorch's `torch.return_types.max` and friends."""

    values: Tensor
    indices: Tensor


def _return_type_repr(self) -> str:
    return (f"{_naming.namespace()}.return_types.{type(self).__name__}(\nvalues={self.values!r},"
            f"\nindices={self.indices!r})")


def _return_type_reduce(self):
    return values_indices, (type(self).__name__, self.values, self.indices)


_RETURN_TYPES: dict[str, type] = {}


def values_indices(op: str, values: Tensor, indices: Tensor) -> ValuesIndices:
    """`(values, indices)` as the named tuple PyTorch's `op` returns: its type is named `op` and it prints
    as `torch.return_types.max(values=..., indices=...)` does."""
    cls = _RETURN_TYPES.get(op)
    if cls is None:
        cls = _RETURN_TYPES[op] = type(op, (ValuesIndices,), {
            "__slots__": (), "__repr__": _return_type_repr, "__reduce__": _return_type_reduce,
            "__module__": "loom.return_types", "__qualname__": op})
    return cls(values, indices)


class MinMax(NamedTuple):
    """`(min, max)`, as PyTorch's `torch.return_types.aminmax`."""

    min: Tensor
    max: Tensor


_HALF = (dt.float16, dt.bfloat16)


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _where(c, a, b) -> Tensor:
    from loom.functional.math import where
    return where(c, a, b)


def _isnan(x: Tensor) -> Tensor:
    from loom.functional.math import isnan
    return isnan(x)


def _fresh(out: Tensor, x: Tensor) -> Tensor:
    """A reduction that changed nothing still returns a new tensor (in-place ops on it must not touch x)."""
    return out.clone() if out is x else out


def _reduced_shape(shape, axes, keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce(op: str, x: Tensor, dim, keepdim: bool, name: str | None = None) -> Tensor:
    axes = normalize_dims(dim, x.ndim, name or op)
    if not axes:  # A 0-d tensor: nothing to reduce.
        return x.clone()
    return apply(op, (x,), {"axes": axes, "keepdim": bool(keepdim)})


def _accumulate_dtype(x: Tensor, dtype) -> Tensor:
    """Cast for sum/prod/cumsum/cumprod: to `dtype` when given, else bool and integers to int64."""
    if dtype is not None:
        return x.to(dtype)
    if x.dtype.category < 2:
        return x.to(dt.int64)
    return x


def _count(x: Tensor, dim, op: str) -> int:
    return math.prod(x.shape[a] for a in normalize_dims(dim, x.ndim, op))


def _safe_sqrt(v: Tensor) -> Tensor:
    """sqrt(v) whose gradient is zero (PyTorch's convention for norms and std) where v == 0."""
    zero = v == 0
    return _where(zero, 0.0, _where(zero, 1.0, v).sqrt())


# ---------------------------------------------------------------- sums and means

def sum(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum over `dim` (all dims when None or empty).

    Parameters
    ----------
    x : Tensor
    dim : int or tuple of ints, optional
        Dims to reduce; negative dims count from the end.
    keepdim : bool
        Keep reduced dims with size 1.
    dtype : loom.dtype, optional
        Cast the input to this dtype first. Without it bool and integer inputs sum in int64.

    Examples
    --------
    >>> loom.tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    x = _t(x)
    return _reduce("sum", _accumulate_dtype(x, dtype), dim, keepdim)


def nansum(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum treating NaN as zero.

    Examples
    --------
    >>> loom.tensor([1.0, float("nan"), 2.0]).nansum().item()
    3.0
    """
    x = _t(x)
    if x.dtype.is_floating_point:
        x = _where(_isnan(x), 0.0, x)
    return sum(x, dim, keepdim, dtype)


def prod(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Product over `dim` (all dims when None); bool and integer inputs multiply in int64.

    The gradient is exact when the input holds zeros (one or several), to any order.

    Examples
    --------
    >>> loom.tensor([[1.0, 2.0], [3.0, 4.0]]).prod(1).tolist()
    [2.0, 12.0]
    """
    x, = _autocast.full(x)
    x = _t(x)
    return _reduce("prod", _accumulate_dtype(x, dtype), dim, keepdim)


def _float_input(op: str, x: Tensor, dtype) -> Tensor:
    if dtype is not None:
        x = x.to(dtype)
    if x.dtype.category < 2:
        raise DTypeError(f"loom.{op}: could not infer output dtype; input dtype must be floating point or complex, "
                         f"got {x.dtype.name} (pass dtype=loom.float32)")
    return x


def mean(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Arithmetic mean over `dim`; the mean of no elements is NaN.

    Integer and bool tensors need `dtype=` (a floating point dtype), as in PyTorch.

    Examples
    --------
    >>> loom.tensor([[1.0, 2.0], [3.0, 5.0]]).mean(1).tolist()
    [1.5, 4.0]
    """
    x = _float_input("mean", _t(x), dtype)
    if x.dtype in _HALF:  # Accumulate in float32, as PyTorch: the mean of 1000 halves of 100 is not inf.
        return mean(x.to(dt.float32), dim, keepdim).to(x.dtype)
    n = _count(x, dim, "mean")
    s = _reduce("sum", x, dim, keepdim, "mean")
    return s / n if n else s * float("nan")


def nanmean(x, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Mean of the non-NaN elements (NaN where there are none).

    Examples
    --------
    >>> loom.tensor([1.0, float("nan"), 3.0]).nanmean().item()
    2.0
    """
    x = _float_input("nanmean", _t(x), dtype)
    valid = (~_isnan(x)).to(x.dtype)
    return nansum(x, dim, keepdim) / _reduce("sum", valid, dim, keepdim, "nanmean")


def _var_args(dim, unbiased, correction):
    if isinstance(dim, bool):  # var(x, False): the old positional `unbiased`.
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    elif unbiased is not None:
        raise LoomError("loom.var: pass either unbiased or correction, not both")
    return dim, correction


def var(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance over `dim`, dividing by ``N - correction``.

    Parameters
    ----------
    x : Tensor
        A floating point tensor.
    dim : int or tuple of ints, optional
    unbiased : bool, optional
        Old spelling: True is ``correction=1`` (the default), False is ``correction=0``.
    keepdim : bool
    correction : int or float, optional
        Bessel's correction; 1 by default.

    Examples
    --------
    >>> loom.tensor([1.0, 2.0, 3.0, 4.0]).var(correction=0).item()
    1.25
    """
    x = _t(x)
    dim, correction = _var_args(dim, unbiased, correction)
    if x.dtype.is_complex:  # The mean squared distance |x - mean|^2: the parts' variances add up.
        return var(x.real, dim, keepdim=keepdim, correction=correction) + \
            var(x.imag, dim, keepdim=keepdim, correction=correction)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.var: std and var need a floating point tensor, got {x.dtype.name}")
    if x.dtype in _HALF:  # As mean: half-precision squares summed in float32.
        return var(x.to(dt.float32), dim, keepdim=keepdim, correction=correction).to(x.dtype)
    n = _count(x, dim, "var")
    d, _ = centre(x, dim)
    s = _reduce("sum", d * d, dim, keepdim, "var")
    return s / builtins.max(n - correction, 0)


def centre(x: Tensor, dim) -> tuple[Tensor, Tensor]:
    """`(x - mean, mean)` over `dim` (the mean with kept dims), accurate far from zero.

    The data are first shifted by the first element of each slice (detached):
    shifted data sit near zero, so their mean is accurate to their spread,
    where the mean of 1e4 + noise of 0.01 in float32 can only be had to half an
    ulp of 1e4, a twentieth of the spread. var, std and the normalisation
    layers centre through this one function.
    """
    axes = normalize_dims(dim, x.ndim, "centre")
    if _count(x, dim, "centre") > 1:
        shift = x.detach()[tuple(slice(0, 1) if k in axes else slice(None) for k in range(x.ndim))]
        y = x - shift
    else:
        shift, y = None, x
    m = mean(y, dim, keepdim=True)
    return y - m, (m if shift is None else m + shift)


def std(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Standard deviation: the square root of :func:`var` (zero gradient where it is 0).

    Examples
    --------
    >>> loom.tensor([1.0, 3.0]).std(correction=0).item()
    1.0
    """
    x = _t(x)
    if not x.dtype.is_differentiable:
        raise DTypeError(f"loom.std: std and var need a floating point or complex tensor, got {x.dtype.name}")
    return _safe_sqrt(var(x, dim, unbiased, keepdim, correction=correction))


def var_mean(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """`(var, mean)` over `dim`.

    Examples
    --------
    >>> v, m = loom.var_mean(loom.tensor([1.0, 3.0]))
    >>> (v.item(), m.item())
    (2.0, 2.0)
    """
    x = _t(x)
    d, _ = _var_args(dim, unbiased, correction)
    return var(x, dim, unbiased, keepdim, correction=correction), mean(x, d, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """`(std, mean)` over `dim`.

    Examples
    --------
    >>> s, m = loom.std_mean(loom.tensor([1.0, 3.0]), correction=0)
    >>> (s.item(), m.item())
    (1.0, 2.0)
    """
    x = _t(x)
    d, _ = _var_args(dim, unbiased, correction)
    return std(x, dim, unbiased, keepdim, correction=correction), mean(x, d, keepdim)


# ---------------------------------------------------------------- extremes

def _nonempty(op: str, x: Tensor, dim) -> None:
    axes = normalize_dims(dim, x.ndim, op)
    if builtins.any(x.shape[a] == 0 for a in axes):
        what = "dims" if dim is None else f"dim {dim}"
        raise ShapeError(f"loom.{op}: cannot reduce over a zero-size dimension ({what} of a tensor of "
                         f"shape {fmt_shape(x.shape)}); the operation has no identity, pass a dim "
                         f"whose size is not zero")


def amax(x, dim=None, keepdim: bool = False) -> Tensor:
    """Largest value over `dim`; NaN propagates, ties share the gradient evenly.

    Examples
    --------
    >>> loom.tensor([[1.0, 5.0], [4.0, 2.0]]).amax(1).tolist()
    [5.0, 4.0]
    """
    x = _t(x)
    _nonempty("amax", x, dim)
    return _reduce("max", x, dim, keepdim, "amax")


def amin(x, dim=None, keepdim: bool = False) -> Tensor:
    """Smallest value over `dim`; NaN propagates, ties share the gradient evenly.

    Examples
    --------
    >>> loom.tensor([[1.0, 5.0], [4.0, 2.0]]).amin(0).tolist()
    [1.0, 2.0]
    """
    x = _t(x)
    _nonempty("amin", x, dim)
    return _reduce("min", x, dim, keepdim, "amin")


def _evenly_distribute(x: Tensor, value: Tensor) -> Tensor:
    """`value` (one element of x) whose gradient is split evenly among the elements equal to it.

    Where the value is NaN the NaNs share it, as PyTorch's full max/min/median do.
    """
    if not (x.requires_grad and is_grad_enabled() and x.dtype.is_floating_point):
        return value
    xd, v = x.detach(), value.detach()
    mask = (xd == v) | (_isnan(xd) & _isnan(v))
    count = _reduce("sum", mask.to(x.dtype), None, False)
    share = _reduce("sum", _where(mask, x, 0.0), None, False) / count  # Exact for inf and NaN values.
    delta = _reduce("sum", _where(mask, x - xd, 0.0), None, False) / count  # Zero, carrying the gradient.
    from loom.functional.math import isfinite
    return _where(isfinite(v), v + delta, share)


def _arg_extreme(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    """Index of the first max/min along dim (of the first NaN, where there is one)."""
    x = _t(x)
    if dim is None:
        _nonempty(op, x, None)
        out = _arg_extreme(op, x.reshape(-1), 0, False)
        return out.reshape([1] * x.ndim) if keepdim else out
    d = normalize_dim(dim, x.ndim, op)
    _nonempty(op, x, d)
    if x.ndim == 0:
        return const(0, (), dt.int64)
    xd = x.detach()
    ext = _reduce("max" if op == "argmax" else "min", xd, d, True)
    hit = xd == ext
    if x.dtype.is_floating_point:
        hit = hit | _isnan(xd)  # A NaN extreme means the slice has NaNs: only they match.
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    pos = arange(n).reshape(shape).expand(x.shape)
    return _reduce("min", _where(hit, pos, n), d, keepdim)


def argmax(x, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the largest value (the first one among ties; the first NaN if any), as int64.

    Examples
    --------
    >>> loom.tensor([[1.0, 5.0, 5.0], [4.0, 2.0, 0.0]]).argmax(1).tolist()
    [1, 0]
    """
    return _arg_extreme("argmax", x, dim, keepdim)


def argmin(x, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the smallest value (the first one among ties; the first NaN if any), as int64.

    Examples
    --------
    >>> loom.tensor([3.0, 1.0, 1.0]).argmin().item()
    1
    """
    return _arg_extreme("argmin", x, dim, keepdim)


def _values_indices(op: str, x: Tensor, dim, keepdim: bool) -> ValuesIndices:
    d = normalize_dim(dim, x.ndim, op)
    if x.ndim == 0:
        _nonempty(op, x, d)
        return values_indices(op, x.clone(), const(0, (), dt.int64))
    idx = _arg_extreme("arg" + op, x, d, True)
    values = apply("gather", (x, idx), {"axis": d})  # The gradient goes to the returned index.
    if not keepdim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    return values_indices(op, values, idx)


def _max_min(op: str, x, dim, keepdim: bool):
    x = _t(x)
    if isinstance(dim, Tensor):
        from loom.functional.math import maximum, minimum
        return (maximum if op == "max" else minimum)(x, dim)
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"loom.{op}: dim must be an int, got {dim!r}; to reduce several dims use "
                        f"a{op}(x, dim)")
    if dim is None:
        if keepdim:
            raise LoomError(f"loom.{op}: keepdim needs a dim; use amax/amin with keepdim=True")
        _nonempty(op, x, None)
        return _evenly_distribute(x, _reduce(op, x, None, False))
    return _values_indices(op, x, dim, keepdim)


def max(x, dim=None, keepdim: bool = False):
    """Largest element, largest per slice, or elementwise maximum.

    ``max(x)`` is the largest element (NaN if any; ties share the gradient);
    ``max(x, dim, keepdim=False)`` is a ``(values, indices)`` pair whose gradient goes to
    the returned index; ``max(x, other)`` is :func:`maximum`.

    Examples
    --------
    >>> x = loom.tensor([[1.0, 5.0], [4.0, 2.0]])
    >>> x.max().item(), x.max(1).indices.tolist()
    (5.0, [1, 0])
    """
    return _max_min("max", x, dim, keepdim)


def min(x, dim=None, keepdim: bool = False):
    """Smallest element, smallest per slice, or elementwise minimum (see :func:`max`).

    Examples
    --------
    >>> loom.tensor([[1.0, 5.0], [4.0, 2.0]]).min(0).values.tolist()
    [1.0, 2.0]
    """
    return _max_min("min", x, dim, keepdim)


def aminmax(x, *, dim=None, keepdim: bool = False) -> MinMax:
    """`(min, max)` over `dim` (all elements when None).

    Examples
    --------
    >>> r = loom.tensor([3.0, 1.0, 2.0]).aminmax()
    >>> (r.min.item(), r.max.item())
    (1.0, 3.0)
    """
    x = _t(x)
    _nonempty("aminmax", x, dim)
    return MinMax(amin(x, dim, keepdim), amax(x, dim, keepdim))


def logsumexp(x, dim=None, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over `dim`, computed without overflow; integer inputs become float.

    Examples
    --------
    >>> round(loom.tensor([1000.0, 1000.0]).logsumexp(0).item(), 2)
    1000.69
    """
    x = _t(x)
    if x.dtype.is_complex:  # The shift by the maximum needs an order; the plain formula, as PyTorch's.
        return _reduce("sum", x.exp(), dim, keepdim, "logsumexp").log()
    if not x.dtype.is_floating_point:
        x = x.to(dt.get_default_dtype())
    if x.dtype in _HALF:  # Accumulate in float32, as PyTorch (and as mean).
        return logsumexp(x.to(dt.float32), dim, keepdim).to(x.dtype)
    axes = normalize_dims(dim, x.ndim, "logsumexp")
    if builtins.any(x.shape[a] == 0 for a in axes):
        return _reduce("sum", x.exp(), dim, keepdim, "logsumexp").log()  # log(0) = -inf.
    m = _reduce("max", x.detach(), dim, True, "logsumexp")
    from loom.functional.math import isinf
    m = _where(isinf(m), 0.0, m)  # All -inf (or an inf) must not turn into NaN through x - m.
    out = _reduce("sum", (x - m).exp(), dim, True, "logsumexp").log() + m
    if not keepdim and axes:
        out = out.reshape(_reduced_shape(tuple(x.shape), axes, False))
    return out


# ---------------------------------------------------------------- logical

def _logical(op: str, x, dim, keepdim: bool) -> Tensor:
    x = _t(x)
    b = x if x.dtype is dt.bool_ else x != 0
    axes = normalize_dims(dim, x.ndim, op)
    if builtins.any(x.shape[a] == 0 for a in axes):
        out = const(op == "all", _reduced_shape(tuple(x.shape), axes, keepdim), dt.bool_)
    else:
        out = _reduce("min" if op == "all" else "max", b, dim, keepdim, op)
    return out.to(dt.uint8) if x.dtype is dt.uint8 else out  # PyTorch keeps uint8 for uint8 inputs.


def all(x, dim=None, keepdim: bool = False) -> Tensor:
    """Whether every element over `dim` is nonzero (True over no elements).

    Examples
    --------
    >>> loom.tensor([[True, False], [True, True]]).all(1).tolist()
    [False, True]
    """
    return _logical("all", x, dim, keepdim)


def any(x, dim=None, keepdim: bool = False) -> Tensor:
    """Whether some element over `dim` is nonzero (False over no elements).

    Examples
    --------
    >>> loom.tensor([0.0, 0.0, 2.0]).any().item()
    True
    """
    return _logical("any", x, dim, keepdim)


def count_nonzero(x, dim=None) -> Tensor:
    """Number of nonzero elements over `dim`, as int64.

    Examples
    --------
    >>> loom.tensor([[0, 1], [2, 3]]).count_nonzero(0).tolist()
    [1, 2]
    """
    x = _t(x)
    return sum(x != 0, dim)


# ---------------------------------------------------------------- norms

def norm(x, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Vector p-norm over `dim` (all elements when None).

    Parameters
    ----------
    x : Tensor
        A floating point tensor.
    p : float or str
        'fro' or 2 (Euclidean), 1, inf, -inf, 0 (count of nonzeros) or any other number;
        'nuc': the nuclear norm of the matrices in the last two dims (or a 2-tuple `dim`).
    dim : int or tuple of ints, optional
    keepdim : bool
    dtype : loom.dtype, optional
        Compute in this dtype.

    Examples
    --------
    >>> loom.tensor([3.0, -4.0]).norm().item()
    5.0
    """
    x = _t(x)
    if dtype is not None:
        x = x.to(dtype)
    if x.dtype.is_complex:  # The norm of the magnitudes, as PyTorch.
        x = x.abs()
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.norm: expected a floating point tensor, got {x.dtype.name}")
    if p in ("fro", None):
        p = 2
    if p == "nuc":  # The sum of singular values of the (dim[0], dim[1]) planes, the last two by default.
        return _upper.matrix_norm(x, "nuc", (-2, -1) if dim is None else dim, keepdim)
    if isinstance(p, str):
        raise LoomError(f"loom.norm: unknown norm {p!r}; expected 'fro', 'nuc' or a number")
    if p == math.inf:
        return amax(x.abs(), dim, keepdim)
    if p == -math.inf:
        return amin(x.abs(), dim, keepdim)
    if p == 0:
        nonzero = _where(_isnan(x), 1.0, x.abs().sign())  # 0 or 1 with a zero gradient, as PyTorch's.
        return nonzero.sum(dim, keepdim)
    if p == 1:
        return x.abs().sum(dim, keepdim)
    if p < 0:
        return (x.abs() ** p).sum(dim, keepdim) ** (1.0 / p)
    return scaled_pnorm(x, float(p), dim, keepdim)


def scaled_pnorm(x: Tensor, p: float, dim, keepdim: bool) -> Tensor:
    """(sum |x|^p)^(1/p) for p > 0, scaled so the powers neither overflow nor underflow.

    The sum runs over x / s with s the detached max |x| of each slice:
    s * ||x / s||_p is exact for any constant s, so value and gradient are
    those of the norm, while ||(3e20, 4e20)|| and ||(3e-30, 4e-30)|| stay
    finite and nonzero in float32. Slices holding inf or NaN scale by 1 (see
    `scale_of`). The gradient at an all-zero slice is zero (PyTorch's
    subgradient). One helper serves every p-norm in loom (norm,
    linalg.vector_norm, normalize, cosine_similarity, pairwise_distance).
    """
    if x.dtype in _HALF:  # Accumulate in float32, as PyTorch: 1e5 scaled squares of 1 overflow float16.
        return scaled_pnorm(x.to(dt.float32), p, dim, keepdim).to(x.dtype)
    axes = normalize_dims(dim, x.ndim, "norm")
    # p = 2 squares x itself, not |x|: the second derivative at a zero entry is then 2, not abs's 0.
    a = x if p == 2 else x.abs()
    if builtins.any(x.shape[k] == 0 for k in axes):
        s = None  # Nothing to scale: the norm of no elements is 0.
    else:
        from loom.functional.math import scale_of
        s = scale_of(_reduce("max", x.abs(), axes, True, "norm"))
        a = a / s
    t = _reduce("sum", a * a if p == 2 else a ** p, axes, True, "norm")
    zero = t == 0
    safe = _where(zero, 1.0, t)
    r = _where(zero, 0.0, safe.sqrt() if p == 2 else safe ** (1.0 / p))
    if s is not None:
        r = r * s
    if not keepdim and axes:
        r = r.reshape(_reduced_shape(tuple(x.shape), axes, False))
    return r


# ---------------------------------------------------------------- scans

def _scan(x: Tensor, dim: int, combine, identity) -> Tensor:
    """Inclusive scan along `dim` in log2(n) shifted combines (Hillis-Steele), all primitives."""
    n = x.shape[dim]
    shift = 1
    pads = [(0, 0)] * x.ndim
    while shift < n:
        pads[dim] = (shift, 0)
        padded = apply("pad", (x,), {"pads": list(pads), "value": identity})
        shifted = apply("slice", (padded,), {"starts": [0] * x.ndim, "stops": list(x.shape),
                                             "steps": [1] * x.ndim})
        x = combine(x, shifted)
        shift *= 2
    return x


def _scan_op(op: str, x: Tensor, dim: int, combine, identity) -> Tensor:
    d = normalize_dim(dim, x.ndim, op)
    if x.ndim == 0:
        return x.clone()
    return _fresh(_scan(x, d, combine, identity), x)


def cumsum(x, dim: int, dtype=None) -> Tensor:
    """Running sum along `dim`; bool and integer inputs accumulate in int64.

    Examples
    --------
    >>> loom.tensor([1, 2, 3]).cumsum(0).tolist()
    [1, 3, 6]
    """
    x = _accumulate_dtype(_t(x), dtype)
    return _scan_op("cumsum", x, dim, lambda a, b: a + b, 0)


def cumprod(x, dim: int, dtype=None) -> Tensor:
    """Running product along `dim`; exact gradients with zeros in the input.

    Examples
    --------
    >>> loom.tensor([1.0, 2.0, 3.0]).cumprod(0).tolist()
    [1.0, 2.0, 6.0]
    """
    x = _accumulate_dtype(_t(x), dtype)
    return _scan_op("cumprod", x, dim, lambda a, b: a * b, 1)


def _extreme_identity(op: str, d: dt.DType):
    """The identity of a running max (`cummax`) or min along a tensor of dtype d."""
    if d.is_floating_point:
        return -math.inf if op == "cummax" else math.inf
    if d is dt.bool_:
        return op != "cummax"
    info = np.iinfo(d.np)
    return int(info.min if op == "cummax" else info.max)


def _cum_extreme(op: str, x, dim) -> ValuesIndices:
    from loom.functional.math import maximum, minimum
    x = _t(x)
    d = normalize_dim(dim, x.ndim, op)
    if x.ndim == 0:
        return values_indices(op, x.clone(), const(0, (), dt.int64))
    xd = x.detach()
    running = _scan(xd, d, maximum if op == "cummax" else minimum, _extreme_identity(op, x.dtype))
    hit = xd == running  # Ties take the latest index; after a NaN only NaNs match.
    if x.dtype.is_floating_point:
        hit = hit | _isnan(xd)
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    pos = arange(n).reshape(shape).expand(x.shape)
    idx = _scan(_where(hit, pos, -1), d, maximum, -1)
    return values_indices(op, apply("gather", (x, idx), {"axis": d}), idx)


def cummax(x, dim: int) -> ValuesIndices:
    """Running maximum along `dim` and the index where it was (last) reached.

    Examples
    --------
    >>> r = loom.tensor([1.0, 3.0, 2.0, 3.0]).cummax(0)
    >>> r.values.tolist(), r.indices.tolist()
    ([1.0, 3.0, 3.0, 3.0], [0, 1, 1, 3])
    """
    return _cum_extreme("cummax", x, dim)


def cummin(x, dim: int) -> ValuesIndices:
    """Running minimum along `dim` and the index where it was (last) reached.

    Examples
    --------
    >>> loom.tensor([2.0, 1.0, 3.0]).cummin(0).indices.tolist()
    [0, 1, 1]
    """
    return _cum_extreme("cummin", x, dim)


def logcumsumexp(x, dim: int) -> Tensor:
    """Running ``log(sum(exp(x)))`` along `dim`, stable for any spread of values.

    Examples
    --------
    >>> [round(v, 4) for v in loom.tensor([0.0, 0.0, -1000.0]).logcumsumexp(0).tolist()]
    [0.0, 0.6931, 0.6931]
    """
    x = _t(x)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.logcumsumexp: expected a floating point tensor, got {x.dtype.name}")
    from loom.functional.math import logaddexp
    return _scan_op("logcumsumexp", x, dim, logaddexp, -math.inf)


METHODS = ["sum", "nansum", "prod", "mean", "nanmean", "var", "std", "amax", "amin", "argmax", "argmin",
           "max", "min", "aminmax", "logsumexp", "all", "any", "count_nonzero", "norm", "cumsum", "cumprod",
           "cummax", "cummin", "logcumsumexp"]
INPLACE = ["cumsum", "cumprod"]
