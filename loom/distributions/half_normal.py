"""The half-normal distribution: |X| for X normal with mean 0."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.normal import Normal
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import AbsTransform
from loom.tensor import Size

__all__ = ["HalfNormal"]


class HalfNormal(TransformedDistribution):
    """|X| for X ~ Normal(0, scale), as `torch.distributions.HalfNormal`.

    Examples
    --------
    >>> from loom.distributions import HalfNormal
    >>> d = HalfNormal(1.0)
    >>> round(d.log_prob(loom.tensor(0.0)).item(), 4), round(d.mean.item(), 4), round(d.cdf(loom.tensor(1.0)).item(), 4)
    (-0.2258, 0.7979, 0.6827)
    """

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args: bool | None = None) -> None:
        super().__init__(Normal(0, scale, validate_args=False), AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfNormal, _instance)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self):
        return loom.zeros_like(self.scale)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return loom.where(value >= 0, log_prob, loom.full_like(log_prob, -math.inf))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
