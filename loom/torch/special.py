"""`torch.special`: special functions under SciPy-style names, over loom's ops."""
from __future__ import annotations

import math

import loom
from loom.tensor import Tensor, tensor
from loom.torch._forward import install as _install

_install(globals(), "loom")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _float(x) -> Tensor:
    x = _t(x)
    return x if x.dtype.is_floating_point else x.to(loom.get_default_dtype())


def expit(input) -> Tensor:
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    return loom.sigmoid(input)


def ndtr(input) -> Tensor:
    """The standard normal CDF."""
    x = _float(input)
    return 0.5 * (1.0 + loom.erf(x * (1.0 / math.sqrt(2.0))))


def log_ndtr(input) -> Tensor:
    """log of the standard normal CDF, accurate in the lower tail (through erfc)."""
    x = _float(input)
    return loom.log(0.5 * loom.erfc(x * (-1.0 / math.sqrt(2.0))))


def entr(input) -> Tensor:
    """-x * log(x) elementwise (0 at 0, -inf for negative x)."""
    x = _float(input)
    return loom.where(x < 0, -math.inf, loom.where(x == 0, 0.0 * x, -x * loom.log(x)))


def xlog1py(input, other) -> Tensor:
    """x * log1p(y), 0 where x is 0."""
    x, y = _float(input), _float(other)
    return loom.where(x == 0, 0.0 * y, x * loom.log1p(y))


def exp2(input) -> Tensor:
    return loom.exp2(input)


def expm1(input) -> Tensor:
    return loom.expm1(input)


def log1p(input) -> Tensor:
    return loom.log1p(input)


def logit(input, eps=None) -> Tensor:
    return loom.logit(input, eps)


def logsumexp(input, dim, keepdim: bool = False) -> Tensor:
    return loom.logsumexp(input, dim, keepdim)


def softmax(input, dim: int, *, dtype=None) -> Tensor:
    return loom.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim: int, *, dtype=None) -> Tensor:
    return loom.log_softmax(input, dim, dtype=dtype)


def round(input, decimals: int = 0) -> Tensor:  # noqa: A001
    return loom.round(input, decimals=decimals)
