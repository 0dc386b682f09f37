"""The Poisson distribution, with a vectorised sampler."""
from __future__ import annotations

import loom
from loom import dtypes as dt
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import _first_accepted, broadcast_all
from loom.tensor import Size, Tensor

__all__ = ["Poisson"]

_INVERSION_TERMS = 64
_PROPOSALS = 12


def _poisson_sample(rate: Tensor) -> Tensor:
    """Poisson(rate) draws of rate's shape: inversion for rate < 10, Hormann's PTRS rejection above."""
    d = rate.dtype
    lam = rate.detach().to(dt.float64)
    shape = tuple(lam.shape)
    small = lam < 10
    # Inversion: count the CDF values below one uniform (64 terms reach far past the tail for rate < 10).
    ls = loom.where(small, lam, loom.ones_like(lam))
    u = loom.rand(*shape, dtype=dt.float64)
    pmf = (-ls).exp()
    cdf = pmf
    k_small = loom.zeros_like(lam)
    for n in range(1, _INVERSION_TERMS):
        k_small = k_small + (cdf < u).to(dt.float64)
        pmf = pmf * ls / n
        cdf = cdf + pmf
    # PTRS: each element draws a fixed number of proposals and keeps the first accepted one.
    ll = loom.where(small, loom.full_like(lam, 10.0), lam)
    slam, loglam = ll.sqrt(), ll.log()
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    uu = loom.rand(_PROPOSALS, *shape, dtype=dt.float64) - 0.5
    v = loom.rand(_PROPOSALS, *shape, dtype=dt.float64).clamp(min=1e-300)
    us = 0.5 - uu.abs()
    k = ((2 * a / us + b) * uu + ll + 0.43).floor()
    ks = k.clamp(min=0)
    fast = (us >= 0.07) & (v <= vr)
    exact = v.log() + inv_alpha.log() - (a / (us * us) + b).log() <= -ll + ks * loglam - loom.lgamma(ks + 1)
    accept = fast | ((k >= 0) & ~((us < 0.013) & (v > us)) & exact)
    k_large = _first_accepted(ks, accept)
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
