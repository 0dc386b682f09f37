"""`tf.math`: elementwise math, comparisons and reductions with TensorFlow's names."""
from __future__ import annotations

import loom
from loom.tensor import Tensor as _Tensor
from loom.tf._core import (  # noqa: F401
    add_n, argmax, argmin, convert_to_tensor as _t, cumprod, cumsum, reduce_all, reduce_any,
    reduce_logsumexp, reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_std, reduce_sum,
    reduce_variance, segment_sum, unsorted_segment_sum,
)


def _unary(fn, doc):
    def op(x, name=None) -> _Tensor:
        return fn(_t(x))
    op.__doc__ = doc
    return op


def _binary(fn, doc):
    def op(x, y, name=None) -> _Tensor:
        a = _t(x)
        b = _t(y, a.dtype) if not isinstance(y, _Tensor) else y
        if not isinstance(x, _Tensor) and isinstance(y, _Tensor):
            a = _t(x, b.dtype)
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
divide = _binary(loom.div, "Elementwise x / y (true division).")
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
