"""The gamma distribution, its sampler and the reparameterised gradient of its samples.

Samples come from Marsaglia and Tsang's method, vectorised: each element draws a fixed number of
proposals and keeps the first accepted (each is accepted with probability above 0.95), with Stuart's
boost u^(1/alpha) for alpha < 1. Gradients of samples with respect to the concentration are implicit
(d x / d alpha = -(d F / d alpha) / f at the sample, F the CDF), computed from the series of the lower
incomplete gamma function (x < alpha + 1) or the continued fraction of the upper one, carried with
their derivative in alpha; the same functions give the CDF.
"""
from __future__ import annotations

from loom import _api as loom
from loom import dtypes as dt
from loom.autograd.function import Function, once_differentiable
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import _first_accepted, _tiny, broadcast_all
from loom.tensor import Size, Tensor

__all__ = ["Gamma"]

_PROPOSALS = 12
_TERMS = 256


def _standard_gamma(alpha: Tensor) -> Tensor:
    """Gamma(alpha, 1) samples of alpha's shape (not differentiable)."""
    alpha = alpha.detach()
    d = alpha.dtype
    shape = tuple(alpha.shape)
    boost = alpha < 1
    a = loom.where(boost, alpha + 1, alpha)
    dd = a - 1.0 / 3.0
    c = (9.0 * dd).rsqrt()
    z = loom.randn(_PROPOSALS, *shape, dtype=d)
    u = loom.rand(_PROPOSALS, *shape, dtype=d).clamp(min=_tiny(d))
    base = 1.0 + c * z
    v = base * base * base
    accept = (base > 0) & (u.log() < 0.5 * z * z + dd - dd * v + dd * v.clamp(min=_tiny(d)).log())
    # The first accepted proposal (if none is, probability < 1e-15, the last one, clamped).
    x = dd * _first_accepted(v, accept)
    u_boost = loom.rand(*shape, dtype=d).clamp(min=_tiny(d))
    x = loom.where(boost, x * u_boost.pow(1.0 / alpha), x)
    return x.clamp(min=_tiny(d))


def _series(a: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """S = sum_n x^n / ((a+1)...(a+n)) and dS/da: P(a, x) = x^a e^-x S / Gamma(a + 1)."""
    term = loom.ones_like(x)
    dterm = loom.zeros_like(x)
    s, ds = term, dterm
    for n in range(1, _TERMS + 1):
        r = x / (a + n)
        new = term * r
        dterm = dterm * r - new / (a + n)
        term = new
        s, ds = s + term, ds + dterm
    return s, ds


def _fraction(a: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """The continued fraction h and dh/da with Q(a, x) = x^a e^-x h / Gamma(a) (backward recurrence)."""
    r = loom.zeros_like(x)
    dr = loom.zeros_like(x)
    for i in range(_TERMS, 0, -1):
        an = -i * (i - a)
        den = x + (2 * i + 1) - a + r
        r, dr = an / den, (i * den - an * (dr - 1.0)) / (den * den)
    den = x + 1 - a + r
    return den.reciprocal(), -(dr - 1.0) / (den * den)


def _split(a: Tensor, x: Tensor):
    """Which elements use the series (x < a + 1), and safe inputs for each branch (no NaN in the other)."""
    lower = x < a + 1
    xs = loom.where(lower, x, loom.zeros_like(x))
    xf = loom.where(lower, a + 1, x)
    return lower, xs, xf


def _gammainc(a: Tensor, x: Tensor) -> Tensor:
    """The regularised lower incomplete gamma function P(a, x), differentiable in both."""
    lower, xs, xf = _split(a, x)
    s, _ = _series(a, xs)
    h, _ = _fraction(a, xf)
    p_series = (a * xs.clamp(min=_tiny(x.dtype)).log() - xs - loom.lgamma(a + 1)).exp() * s
    q_fraction = (a * xf.log() - xf - loom.lgamma(a)).exp() * h
    p = loom.where(lower, p_series, 1 - q_fraction)
    return loom.where(x > 0, p, loom.zeros_like(p))


def _sample_grad(x: Tensor, a: Tensor) -> Tensor:
    """d x / d alpha for x ~ Gamma(alpha, 1) held at a fixed quantile (implicit reparameterisation)."""
    x, a = x.detach().to(dt.float64), a.detach().to(dt.float64)
    lower, xs, xf = _split(a, x)
    s, ds = _series(a, xs)
    h, dh = _fraction(a, xf)
    g_lower = -(xs / a) * (s * (xs.clamp(min=1e-300).log() - loom.digamma(a + 1)) + ds)
    g_upper = xf * (h * (xf.log() - loom.digamma(a)) + dh)
    return loom.where(lower, g_lower, g_upper)


class _StandardGamma(Function):
    """Gamma(alpha, 1) samples; backward multiplies by the implicit reparameterisation gradient.

    The gradient is first order only (`once_differentiable`): a second derivative through a sample
    finds no history to follow rather than a wrong value, as with PyTorch's `_standard_gamma`.
    """

    @staticmethod
    def forward(ctx, alpha):
        x = _standard_gamma(alpha)
        ctx.save_for_backward(x, alpha.detach())
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, alpha = ctx.saved_tensors
        return grad * _sample_grad(x, alpha).to(grad.dtype)


def _reparameterised_gamma(alpha: Tensor) -> Tensor:
    """Gamma(alpha, 1) samples whose gradient in alpha is the implicit reparameterisation gradient."""
    return _StandardGamma.apply(alpha)


class Gamma(ExponentialFamily):
    """The gamma distribution with shape `concentration` and `rate` (mean concentration / rate).

    As `torch.distributions.Gamma`; ``rsample`` is differentiable in both parameters (in the concentration
    through the implicit reparameterisation gradient, first order only: a second
    derivative through a sample has no history), and ``cdf`` is the regularised
    incomplete gamma function.

    Examples
    --------
    >>> from loom.distributions import Gamma
    >>> d = Gamma(2.0, 3.0)
    >>> round(d.log_prob(loom.tensor(1.0)).item(), 4), round(d.cdf(loom.tensor(1.0)).item(), 4)
    (-0.8028, 0.8009)
    >>> round(d.mean.item(), 4), round(d.entropy().item(), 4)
    (0.6667, 0.4786)
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Gamma, batch_shape, _instance, ("concentration", "rate"))

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        value = _reparameterised_gamma(self.concentration.expand(*shape)) / self.rate.expand(*shape)
        return value.clamp(min=_tiny(value.dtype))

    def log_prob(self, value):
        value = loom.as_tensor(value, dtype=self.rate.dtype)
        if self._validate_args:
            self._validate_sample(value)
        return (loom.xlogy(self.concentration, self.rate) + loom.xlogy(self.concentration - 1, value)
                - self.rate * value - loom.lgamma(self.concentration))

    def entropy(self):
        c = self.concentration
        return c - self.rate.log() + loom.lgamma(c) + (1.0 - c) * loom.digamma(c)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        a, x = loom.broadcast_tensors(self.concentration, self.rate * value)
        return _gammainc(a, x)

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return loom.lgamma(x + 1) + (x + 1) * (-y.reciprocal()).log()
