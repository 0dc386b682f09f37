"""The inverse-gamma distribution: 1 / X for X gamma."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.gamma import Gamma
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import PowerTransform
from loom.tensor import Size

__all__ = ["InverseGamma"]


class InverseGamma(TransformedDistribution):
    """1 / X for X ~ Gamma(concentration, rate), as `torch.distributions.InverseGamma`.

    Examples
    --------
    >>> from loom.distributions import InverseGamma
    >>> d = InverseGamma(3.0, 2.0)
    >>> d.mean.item(), round(d.log_prob(loom.tensor(1.0)).item(), 4)
    (1.0, -0.6137)
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        base = Gamma(concentration, rate, validate_args=validate_args)
        super().__init__(base, PowerTransform(-loom.ones_like(base.rate)), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        result = self.rate / (self.concentration - 1)
        return loom.where(self.concentration > 1, result, loom.full_like(result, math.inf))

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        c = self.concentration
        result = self.rate.pow(2) / ((c - 1).pow(2) * (c - 2))
        return loom.where(c > 2, result, loom.full_like(result, math.inf))

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + loom.lgamma(c) - (1 + c) * loom.digamma(c)
