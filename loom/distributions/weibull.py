"""The two-parameter Weibull distribution."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.exponential import Exponential
from loom.distributions.gumbel import _EULER
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import AffineTransform, PowerTransform
from loom.distributions.utils import broadcast_all

__all__ = ["Weibull"]


class Weibull(TransformedDistribution):
    """The Weibull distribution with `scale` and shape `concentration`, as `torch.distributions.Weibull`.

    Examples
    --------
    >>> from loom.distributions import Weibull
    >>> d = Weibull(1.0, 2.0)
    >>> round(d.mean.item(), 4), round(d.log_prob(loom.tensor(1.0)).item(), 4)
    (0.8862, -0.3069)
    """

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args: bool | None = None) -> None:
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(loom.ones_like(self.scale), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration_reciprocal),
                      AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Weibull, _instance)
        new.scale = self.scale.expand(*batch_shape)
        new.concentration = self.concentration.expand(*batch_shape)
        new.concentration_reciprocal = new.concentration.reciprocal()
        base = self.base_dist.expand(batch_shape)
        transforms = [PowerTransform(exponent=new.concentration_reciprocal),
                      AffineTransform(loc=0, scale=new.scale)]
        TransformedDistribution.__init__(new, base, transforms, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.scale * loom.lgamma(1 + self.concentration_reciprocal).exp()

    @property
    def mode(self):
        return self.scale * ((self.concentration - 1) / self.concentration) ** self.concentration_reciprocal

    @property
    def variance(self):
        return self.scale.pow(2) * (loom.lgamma(1 + 2 * self.concentration_reciprocal).exp()
                                    - loom.lgamma(1 + self.concentration_reciprocal).mul(2).exp())

    def entropy(self):
        return (_EULER * (1 - self.concentration_reciprocal) + (self.scale * self.concentration_reciprocal).log()
                + 1)
