"""The Kumaraswamy distribution on [0, 1]."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.gumbel import _EULER
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import AffineTransform, PowerTransform
from loom.distributions.uniform import Uniform
from loom.distributions.utils import broadcast_all
from loom.tensor import Size

__all__ = ["Kumaraswamy"]


def _moments(a, b, n):
    """E[X^n] of a Kumaraswamy(a, b): b * B(1 + n / a, b)."""
    arg1 = 1 + n / a
    return b * (loom.lgamma(arg1) + loom.lgamma(b) - loom.lgamma(arg1 + b)).exp()


class Kumaraswamy(TransformedDistribution):
    """The Kumaraswamy distribution with `concentration1` (a) and `concentration0` (b), as torch's.

    Its CDF is 1 - (1 - x^a)^b, so samples are closed-form transforms of uniforms (reparameterisable).

    Examples
    --------
    >>> from loom.distributions import Kumaraswamy
    >>> d = Kumaraswamy(2.0, 3.0)
    >>> round(d.mean.item(), 4), round(d.log_prob(loom.tensor(0.5)).item(), 4)
    (0.4571, 0.5232)
    """

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None) -> None:
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base = Uniform(loom.zeros_like(self.concentration0), loom.ones_like(self.concentration0),
                       validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(*batch_shape)
        new.concentration0 = self.concentration0.expand(*batch_shape)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        c1, c0 = self.concentration1, self.concentration0
        log_mode = c0.reciprocal() * loom.log1p(-c0) - loom.log1p(-c0 * c1)
        log_mode = loom.where((c0 < 1) | (c1 < 1), loom.full_like(log_mode, math.nan), log_mode)
        return log_mode.exp()

    @property
    def variance(self):
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        h0 = loom.digamma(self.concentration0 + 1) + _EULER
        return t0 + t1 * h0 - self.concentration1.log() - self.concentration0.log()
