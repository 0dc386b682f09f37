"""`torch.special`: special functions under SciPy-style names, over loom's ops."""
from __future__ import annotations

import math

import loom
from loom.tensor import Tensor, tensor
from loom.distributions.utils import bessel_i
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


# ---------------------------------------------------------------- SciPy's names for loom's functions

def gammaln(input) -> Tensor:
    """log |Gamma(x)|, as `torch.special.gammaln` (loom.lgamma)."""
    return loom.lgamma(input)


def psi(input) -> Tensor:
    """The digamma function, as `torch.special.psi` (loom.digamma)."""
    return loom.digamma(input)


def multigammaln(input, p: int) -> Tensor:
    """The multivariate log-gamma, as `torch.special.multigammaln` (loom.mvlgamma)."""
    return loom.mvlgamma(input, p)


def gammainc(input, other) -> Tensor:
    """The regularised lower incomplete gamma P(a, x), as `torch.special.gammainc` (loom.igamma)."""
    return loom.igamma(input, other)


def gammaincc(input, other) -> Tensor:
    """The regularised upper incomplete gamma Q(a, x), as `torch.special.gammaincc` (loom.igammac)."""
    return loom.igammac(input, other)


def ndtri(input) -> Tensor:
    """The inverse of the standard normal CDF (the probit): sqrt(2) erfinv(2p - 1)."""
    return math.sqrt(2.0) * loom.erfinv(2.0 * _float(input) - 1.0)


def erfcx(input) -> Tensor:
    """The scaled complementary error function exp(x^2) erfc(x), without overflow for large x."""
    x = _float(input)
    big = x > 8.0
    xd = loom.where(big, 0.0, x).to(loom.float64)  # exp(x^2) erfc(x) is exact enough in float64 below 8.
    direct = ((xd * xd).exp() * loom.erfc(xd)).to(x.dtype)
    xb = loom.where(big, x, 8.0)
    inv2 = 1.0 / (2.0 * xb * xb)
    series, term = 1.0, 1.0
    for k in range(1, 13):  # 1/(x sqrt(pi)) * sum_k (-1)^k (2k-1)!! / (2x^2)^k
        term = term * -(2 * k - 1) * inv2
        series = series + term
    return loom.where(big, series / (xb * math.sqrt(math.pi)), direct)


def i0e(input) -> Tensor:
    """The exponentially scaled modified Bessel function exp(-|x|) I_0(x), as `torch.special.i0e`."""
    return bessel_i(0, input, True)


def i1(input) -> Tensor:
    """The modified Bessel function of the first kind of order 1, as `torch.special.i1`."""
    return bessel_i(1, input, False)


def i1e(input) -> Tensor:
    """The exponentially scaled modified Bessel function exp(-|x|) I_1(x), as `torch.special.i1e`."""
    return bessel_i(1, input, True)


def modified_bessel_i0(input) -> Tensor:
    """I_0(x), as `torch.special.modified_bessel_i0`."""
    return loom.i0(input)


def modified_bessel_i1(input) -> Tensor:
    """I_1(x), as `torch.special.modified_bessel_i1`."""
    return bessel_i(1, input, False)
