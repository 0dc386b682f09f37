"""The Gumbel (type-I extreme value) distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import AffineTransform, ExpTransform
from loom.distributions.uniform import Uniform
from loom.distributions.utils import _eps, _tiny, broadcast_all
from loom.tensor import Size

__all__ = ["Gumbel"]

_EULER = 0.57721566490153286060


class Gumbel(TransformedDistribution):
    """The Gumbel distribution with location `loc` and scale `scale`, as `torch.distributions.Gumbel`.

    Examples
    --------
    >>> from loom.distributions import Gumbel
    >>> d = Gumbel(0.0, 1.0)
    >>> round(d.log_prob(loom.tensor(0.0)).item(), 4), round(d.mean.item(), 4), round(d.cdf(loom.tensor(0.0)).item(), 4)
    (-1.0, 0.5772, 0.3679)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        d = self.loc.dtype
        base = Uniform(loom.full_like(self.loc, _tiny(d)), loom.full_like(self.loc, 1 - _eps(d)),
                       validate_args=validate_args)
        transforms = [ExpTransform().inv, AffineTransform(loc=0, scale=-loom.ones_like(self.scale)),
                      ExpTransform().inv, AffineTransform(loc=self.loc, scale=-self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gumbel, _instance)
        new.loc = self.loc.expand(*batch_shape)
        new.scale = self.scale.expand(*batch_shape)
        return super().expand(Size(batch_shape), _instance=new)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (self.loc - value) / self.scale
        return (y - y.exp()) - self.scale.log()

    @property
    def mean(self):
        return self.loc + self.scale * _EULER

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def entropy(self):
        return self.scale.log() + (1 + _EULER)
