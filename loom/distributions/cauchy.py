"""The Cauchy (Lorentz) distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.utils import _uniform, broadcast_all
from loom.tensor import Size

__all__ = ["Cauchy"]


class Cauchy(Distribution):
    """The Cauchy distribution with median `loc` and half width `scale`, as `torch.distributions.Cauchy`.

    Examples
    --------
    >>> from loom.distributions import Cauchy
    >>> d = Cauchy(0.0, 1.0)
    >>> round(d.log_prob(loom.tensor(0.0)).item(), 4), d.cdf(loom.tensor(0.0)).item()
    (-1.1447, 0.5)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Cauchy, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return loom.full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return loom.full(self._extended_shape(), math.inf, dtype=self.loc.dtype)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        eps = loom.tan(math.pi * (_uniform(shape, self.loc.dtype) - 0.5))
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return loom.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return loom.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()
