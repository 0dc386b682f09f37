"""The Poisson distribution, with a vectorised sampler."""
from __future__ import annotations

from loom import _api as loom
from loom import dtypes as dt
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import _first_accepted, _known_range, _log_factorial, broadcast_all
from loom.tensor import Size, Tensor

__all__ = ["Poisson"]

_INVERSION_TERMS = 64
_PROPOSALS = 12


def _inversion(lam: Tensor, terms: int) -> Tensor:
    """Poisson draws by inversion: the number of CDF values below one uniform (for small rates)."""
    u = loom.rand(*lam.shape, dtype=dt.float64)
    pmf = (-lam).exp()
    cdf = pmf
    k = loom.zeros_like(lam)
    for n in range(1, terms):
        k = k + (cdf < u).to(dt.float64)
        pmf = pmf * lam / n
        cdf = cdf + pmf
    return k


def _ptrs(lam: Tensor) -> Tensor:
    """Poisson draws by Hormann's PTRS rejection (rates >= 10): a fixed number of proposals per element,
    the first accepted one kept."""
    slam, loglam = lam.sqrt(), lam.log()
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    uu = loom.rand(_PROPOSALS, *lam.shape, dtype=dt.float64) - 0.5
    v = loom.rand(_PROPOSALS, *lam.shape, dtype=dt.float64).clamp(min=1e-300)
    us = 0.5 - uu.abs()
    k = ((2 * a / us + b) * uu + lam + 0.43).floor()
    ks = k.clamp(min=0)
    fast = (us >= 0.07) & (v <= vr)
    exact = v.log() + inv_alpha.log() - (a / (us * us) + b).log() <= -lam + ks * loglam - _log_factorial(ks)
    accept = fast | ((k >= 0) & ~((us < 0.013) & (v > us)) & exact)
    return _first_accepted(ks, accept)


def _poisson_sample(rate: Tensor) -> Tensor:
    """Poisson(rate) draws of rate's shape: inversion for rate < 10, PTRS rejection above.

    Both branches run where the rates are pending (in a trace); otherwise only the ones some element
    takes, with the inversion sized to the largest small rate (at most 64 terms: past the tail for 10).
    """
    d = rate.dtype
    lam = rate.detach().to(dt.float64)
    small = lam < 10
    known = _known_range(lam, small)
    terms = _INVERSION_TERMS if known is None else min(_INVERSION_TERMS, int(known[2] + 10 * known[2] ** 0.5) + 13)
    if known is not None and known[1]:
        return _inversion(lam, terms).to(d)
    if known is not None and not known[0]:
        return _ptrs(lam).to(d)
    k_small = _inversion(loom.where(small, lam, loom.ones_like(lam)), terms)
    k_large = _ptrs(loom.where(small, loom.full_like(lam, 10.0), lam))
    return loom.where(small, k_small, k_large).to(d)


class Poisson(ExponentialFamily):
    """The Poisson distribution with mean `rate`, as `torch.distributions.Poisson`.

    Examples
    --------
    >>> from loom.distributions import Poisson
    >>> d = Poisson(2.0)
    >>> round(d.log_prob(loom.tensor(3.0)).item(), 4), d.variance.item()
    (-1.7123, 2.0)
    """

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Poisson, batch_shape, _instance, ("rate",))

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            return _poisson_sample(self.rate.expand(*shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        value = value.to(rate.dtype)
        return loom.xlogy(value, rate) - rate - loom.lgamma(value + 1)

    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return x.exp()
