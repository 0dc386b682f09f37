"""`tf.math`: elementwise math, comparisons and reductions with TensorFlow's names."""
from __future__ import annotations

import numpy as _np

import loom
from loom.tensor import Tensor as _Tensor
from loom.tf import _semantics
from loom.tf._core import (  # noqa: F401
    add_n, argmax, argmin, convert_to_tensor as _t, cumprod, cumsum, reduce_all, reduce_any,
    reduce_logsumexp, reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_std, reduce_sum,
    reduce_variance, segment_sum, unsorted_segment_sum, unique_with_counts,
)


def _unary(fn, doc):
    def op(x, name=None) -> _Tensor:
        return fn(_t(x))
    op.__doc__ = doc
    return op


def _binary(fn, doc):
    def op(x, y, name=None) -> _Tensor:
        a = _t(x)
        if isinstance(y, (float, _np.floating)) and a.dtype.category == 1:
            raise _semantics.mixed_error(fn.__name__, a.dtype, loom.float32)
        b = _t(y, a.dtype) if not isinstance(y, _Tensor) else y
        if not isinstance(x, _Tensor) and isinstance(y, _Tensor):
            if isinstance(x, (float, _np.floating)) and b.dtype.category == 1:
                raise _semantics.mixed_error(fn.__name__, loom.float32, b.dtype)
            a = _t(x, b.dtype)
        if a.dtype is not b.dtype:  # TensorFlow's ops take one dtype; it never promotes.
            raise _semantics.mixed_error(fn.__name__, a.dtype, b.dtype)
        return fn(a, b)
    op.__doc__ = doc
    return op


abs = _unary(loom.abs, "Elementwise absolute value.")  # noqa: A001
exp = _unary(loom.exp, "Elementwise e**x.")
log = _unary(loom.log, "Elementwise natural logarithm.")
log1p = _unary(loom.log1p, "Elementwise log(1 + x).")
expm1 = _unary(loom.expm1, "Elementwise exp(x) - 1.")
sqrt = _unary(loom.sqrt, "Elementwise square root.")
rsqrt = _unary(loom.rsqrt, "Elementwise 1 / sqrt(x).")
square = _unary(loom.square, "Elementwise x * x.")
negative = _unary(loom.neg, "Elementwise -x.")
sign = _unary(loom.sign, "Elementwise sign (-1, 0 or 1).")
floor = _unary(loom.floor, "Elementwise floor.")
ceil = _unary(loom.ceil, "Elementwise ceiling.")
round = _unary(loom.round, "Elementwise rounding, halves to even.")  # noqa: A001
sin = _unary(loom.sin, "Elementwise sine.")
cos = _unary(loom.cos, "Elementwise cosine.")
tan = _unary(loom.tan, "Elementwise tangent.")
asin = _unary(loom.asin, "Elementwise arcsine.")
acos = _unary(loom.acos, "Elementwise arccosine.")
atan = _unary(loom.atan, "Elementwise arctangent.")
sinh = _unary(loom.sinh, "Elementwise hyperbolic sine.")
cosh = _unary(loom.cosh, "Elementwise hyperbolic cosine.")
tanh = _unary(loom.tanh, "Elementwise hyperbolic tangent.")
sigmoid = _unary(loom.sigmoid, "Elementwise logistic sigmoid 1 / (1 + exp(-x)).")
softplus = _unary(loom.nn.functional.softplus, "Elementwise log(1 + exp(x)).")
log_sigmoid = _unary(loom.nn.functional.logsigmoid, "Elementwise log(sigmoid(x)).")
erf = _unary(loom.erf, "Elementwise error function.")
is_nan = _unary(loom.isnan, "Elementwise test for NaN.")
is_inf = _unary(loom.isinf, "Elementwise test for infinity.")
is_finite = _unary(loom.isfinite, "Elementwise test for finite values.")
logical_not = _unary(loom.logical_not, "Elementwise logical not.")


def reciprocal(x, name=None) -> _Tensor:
    """Elementwise 1 / x."""
    return 1.0 / _t(x)


add = _binary(loom.add, "Elementwise x + y (broadcasting).")
subtract = _binary(loom.sub, "Elementwise x - y (broadcasting).")
multiply = _binary(loom.mul, "Elementwise x * y (broadcasting).")
def _true_div(a, b):
    # TensorFlow divides 32- and 64-bit integers in float64 (8- and 16-bit ones in float32).
    if not a.dtype.is_floating_point and a.dtype is not loom.bool and a.dtype is b.dtype:
        ft = loom.float64 if a.dtype in (loom.int32, loom.int64) else loom.float32
        return loom.div(a.to(ft), b.to(ft))
    return loom.div(a, b)


divide = _binary(_true_div, "Elementwise x / y (true division; integers divide in float64 as in TensorFlow).")
truediv = divide
floordiv = _binary(loom.floor_divide, "Elementwise floor(x / y).")
floormod = _binary(loom.remainder, "Elementwise remainder with the sign of y.")
mod = floormod
pow = _binary(loom.pow, "Elementwise x ** y.")  # noqa: A001
maximum = _binary(loom.maximum, "Elementwise larger of x and y.")
minimum = _binary(loom.minimum, "Elementwise smaller of x and y.")
atan2 = _binary(loom.atan2, "Elementwise arctangent of y / x (arguments y, x).")
equal = _binary(loom.eq, "Elementwise x == y.")
not_equal = _binary(loom.ne, "Elementwise x != y.")
less = _binary(loom.lt, "Elementwise x < y.")
less_equal = _binary(loom.le, "Elementwise x <= y.")
greater = _binary(loom.gt, "Elementwise x > y.")
greater_equal = _binary(loom.ge, "Elementwise x >= y.")
logical_and = _binary(loom.logical_and, "Elementwise logical and.")
logical_or = _binary(loom.logical_or, "Elementwise logical or.")
logical_xor = _binary(loom.logical_xor, "Elementwise logical exclusive or.")
xlogy = _binary(loom.xlogy, "Elementwise x * log(y), 0 where x is 0.")


def squared_difference(x, y, name=None) -> _Tensor:
    """Elementwise (x - y) ** 2."""
    d = _t(x) - _t(y)
    return d * d


def divide_no_nan(x, y, name=None) -> _Tensor:
    """Elementwise x / y, 0 where y is 0."""
    a, b = _t(x), _t(y)
    zero = b == 0
    return loom.where(zero, loom.zeros_like(a * b), a / loom.where(zero, loom.ones_like(b), b))


def count_nonzero(input, axis=None, keepdims=False, dtype=loom.int64, name=None) -> _Tensor:
    """Number of non-zero elements over `axis`."""
    return reduce_sum((_t(input) != 0).to(dtype), axis, keepdims)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None) -> _Tensor:
    """`x` divided by its L2 norm over `axis` (at least sqrt(epsilon))."""
    v = _t(x)
    sq = reduce_sum(v * v, axis, keepdims=True)
    return v * loom.rsqrt(loom.maximum(sq, _t(epsilon, sq.dtype)))


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002
    """The `k` largest values along the last axis and their int32 indices, as (values, indices)."""
    r = loom.topk(_t(input), int(k), dim=-1, largest=True, sorted=True)
    return TopKV2(r.values, r.indices.to(loom.int32))


class TopKV2(tuple):
    """The (values, indices) pair `top_k` returns."""

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def in_top_k(targets, predictions, k, name=None) -> _Tensor:
    """Whether each target's prediction is among the `k` largest of its row."""
    p = _t(predictions)
    tgt = _t(targets).to(loom.int64)
    score = loom.take_along_dim(p, tgt.unsqueeze(-1), dim=-1)
    return ((p > score).sum(-1) < int(k))


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=loom.int32, name=None) -> _Tensor:
    """Counts of each value of the int array `arr`."""
    import numpy as np
    a = _t(arr).numpy().reshape(-1)
    w = None if weights is None else _t(weights).numpy().reshape(-1)
    out = np.bincount(a, weights=w, minlength=minlength or 0)
    return loom.tensor(out.astype(loom.float32.np if w is not None else dtype.np))


def softmax(logits, axis=None, name=None) -> _Tensor:
    """exp(x) / sum(exp(x)) along `axis` (the last by default)."""
    return loom.softmax(_t(logits), dim=-1 if axis is None else int(axis))


def log_softmax(logits, axis=None, name=None) -> _Tensor:
    """log(softmax(x)) along `axis` (the last by default)."""
    return loom.log_softmax(_t(logits), dim=-1 if axis is None else int(axis))


acosh = _unary(loom.acosh, "Elementwise inverse hyperbolic cosine.")
asinh = _unary(loom.asinh, "Elementwise inverse hyperbolic sine.")
atanh = _unary(loom.atanh, "Elementwise inverse hyperbolic tangent.")
lgamma = _unary(loom.lgamma, "Elementwise log of the absolute value of the gamma function.")
digamma = _unary(loom.digamma, "Elementwise derivative of lgamma.")
erfc = _unary(loom.erfc, "Elementwise complementary error function 1 - erf(x).")
erfinv = _unary(loom.erfinv, "Elementwise inverse error function.")
softsign = _unary(loom.nn.functional.softsign, "Elementwise x / (1 + |x|).")
conj = _unary(loom.conj, "Elementwise complex conjugate (identity for reals).")
real = _unary(loom.real, "Real part of a complex tensor (identity for reals).")
imag = _unary(loom.imag, "Imaginary part of a complex tensor.")
rint = _unary(loom.round, "Elementwise rounding to the nearest integer, halves to even.")
truncatediv = _binary(lambda a, b: loom.div(a, b, rounding_mode="trunc"), "Elementwise x / y rounded toward zero.")
truncatemod = _binary(loom.fmod, "Elementwise remainder with the sign of x.")
realdiv = divide


def multiply_no_nan(x, y, name=None) -> _Tensor:
    """x * y, and 0 where y is 0 (even if x is inf or nan)."""
    a = _t(x)
    b = _t(y, a.dtype)
    return loom.where(b == 0, loom.zeros((), dtype=a.dtype), a * b)


def reciprocal_no_nan(x, name=None) -> _Tensor:
    """1 / x, and 0 where x is 0."""
    a = _t(x)
    return divide_no_nan(loom.ones((), dtype=a.dtype), a)


def scalar_mul(scalar, x, name=None) -> _Tensor:
    """scalar * x."""
    return _t(x) * scalar


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None) -> _Tensor:
    """sqrt(sum(x ** 2)) over `axis` (all elements by default)."""
    x = _t(input_tensor)
    return sqrt(reduce_sum(x * x, axis=axis, keepdims=keepdims))


def _segment_reduce(data, segment_ids, num_segments, reduce: str, op: str, empty_zero: bool = False) -> _Tensor:
    d, ids = _t(data), _t(segment_ids).to(loom.int64)
    if ids.ndim != 1 or ids.shape[0] != d.shape[0]:
        from loom.errors import ShapeError
        raise ShapeError(f"loom.tf.math.{op}: segment_ids must be a vector as long as data's first dimension "
                         f"({d.shape[0]}), got shape {list(ids.shape)}")
    n = int(num_segments) if num_segments is not None else (int(ids.max()) + 1 if ids.numel() else 0)
    tail = list(d.shape[1:])
    index = ids.reshape([-1] + [1] * len(tail)).expand(*d.shape)
    if reduce == "mean":
        s = unsorted_segment_sum(d, ids, n)
        c = unsorted_segment_sum(loom.ones((d.shape[0],), dtype=d.dtype), ids, n).reshape([n] + [1] * len(tail))
        return divide_no_nan(s, c)
    init = loom.zeros([n] + tail, dtype=d.dtype)
    # TensorFlow fills empty segments with 0 (sorted segment ops) or the dtype's lowest (max) or highest (min)
    # value (unsorted ones).
    out = loom.scatter_reduce(init, 0, index, d, reduce=reduce, include_self=False)
    hit = unsorted_segment_sum(loom.ones((d.shape[0],), dtype=loom.int32), ids, n).reshape([n] + [1] * len(tail))
    info = _np.finfo(d.dtype.as_numpy_dtype) if d.dtype.is_floating_point else _np.iinfo(d.dtype.as_numpy_dtype)
    fill = 0 if empty_zero else info.min if reduce == "amax" else info.max
    return loom.where(hit > 0, out, loom.full((), fill, dtype=d.dtype))


def segment_mean(data, segment_ids, name=None) -> _Tensor:
    """Means of the rows of `data` grouped by sorted `segment_ids`."""
    return _segment_reduce(data, segment_ids, None, "mean", "segment_mean")


def segment_max(data, segment_ids, name=None) -> _Tensor:
    """Maxima of the rows of `data` grouped by sorted `segment_ids`."""
    return _segment_reduce(data, segment_ids, None, "amax", "segment_max", empty_zero=True)


def segment_min(data, segment_ids, name=None) -> _Tensor:
    """Minima of the rows of `data` grouped by sorted `segment_ids`."""
    return _segment_reduce(data, segment_ids, None, "amin", "segment_min", empty_zero=True)


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> _Tensor:
    """Means of the rows of `data` grouped by `segment_ids` into `num_segments` rows (0 for empty ones)."""
    return _segment_reduce(data, segment_ids, num_segments, "mean", "unsorted_segment_mean")


def unsorted_segment_max(data, segment_ids, num_segments, name=None) -> _Tensor:
    """Maxima of the rows of `data` grouped by `segment_ids` into `num_segments` rows."""
    return _segment_reduce(data, segment_ids, num_segments, "amax", "unsorted_segment_max")


def unsorted_segment_min(data, segment_ids, num_segments, name=None) -> _Tensor:
    """Minima of the rows of `data` grouped by `segment_ids` into `num_segments` rows."""
    return _segment_reduce(data, segment_ids, num_segments, "amin", "unsorted_segment_min")


def confusion_matrix(labels, predictions, num_classes=None, weights=None, dtype=loom.int32, name=None) -> _Tensor:
    """The `[num_classes, num_classes]` matrix counting (label, prediction) pairs (rows are labels)."""
    from loom.errors import LoomValueError
    from loom.tf._core import as_dtype
    lab = _np.asarray(_t(labels).numpy()).astype(_np.int64).reshape(-1)
    pred = _np.asarray(_t(predictions).numpy()).astype(_np.int64).reshape(-1)
    if lab.shape != pred.shape:
        raise LoomValueError(f"loom.tf.math.confusion_matrix: labels have {lab.size} elements, predictions "
                             f"{pred.size}; they must match")
    if (lab < 0).any() or (pred < 0).any():
        raise LoomValueError("loom.tf.math.confusion_matrix: labels and predictions must be non-negative")
    n = int(num_classes) if num_classes is not None else int(max(lab.max(initial=-1), pred.max(initial=-1)) + 1)
    if lab.size and max(lab.max(), pred.max()) >= n:
        raise LoomValueError(f"loom.tf.math.confusion_matrix: a label or prediction is >= num_classes={n}")
    d = as_dtype(dtype)
    w = _np.ones(lab.size) if weights is None else _np.asarray(_t(weights).numpy(), dtype=_np.float64).reshape(-1)
    out = _np.zeros((n, n), dtype=_np.float64)
    _np.add.at(out, (lab, pred), w)
    return loom.tensor(out.astype(d.np))


def cumulative_logsumexp(x, axis=0, exclusive=False, reverse=False, name=None) -> _Tensor:
    """log(cumsum(exp(x))) along `axis`, computed stably (optionally exclusive and/or from the end)."""
    v = _t(x)
    a = int(axis)
    if reverse:
        v = v.flip(a)
    out = loom.logcumsumexp(v, dim=a)
    if exclusive:
        n = v.shape[a]
        first = loom.full_like(v.narrow(a, 0, 1), float("-inf"))
        out = loom.cat([first, out.narrow(a, 0, n - 1)], dim=a)
    return out.flip(a) if reverse else out


def polyval(coeffs, x, name=None) -> _Tensor:
    """The polynomial coeffs[0] * x**(n-1) + ... + coeffs[n-1] at `x` (Horner's rule)."""
    xv = _t(x)
    out = _t(0.0, xv.dtype) * xv
    for c in coeffs:
        out = out * xv + _t(c, xv.dtype)
    return out


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.math", "tf.math")
