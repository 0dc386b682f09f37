"""The log-normal distribution: exp(X) for X normal."""
from __future__ import annotations

from loom.distributions import constraints
from loom.distributions.normal import Normal
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import ExpTransform
from loom.tensor import Size

__all__ = ["LogNormal"]


class LogNormal(TransformedDistribution):
    """exp(X) for X ~ Normal(loc, scale), as `torch.distributions.LogNormal`.

    Examples
    --------
    >>> from loom.distributions import LogNormal
    >>> d = LogNormal(0.0, 1.0)
    >>> round(d.log_prob(loom.tensor(1.0)).item(), 4), round(d.mean.item(), 4), round(d.cdf(loom.tensor(1.0)).item(), 4)
    (-0.9189, 1.6487, 0.5)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        super().__init__(Normal(loc, scale, validate_args=validate_args), ExpTransform(),
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogNormal, _instance)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def loc(self):
        return self.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self):
        return (self.loc - self.scale.square()).exp()

    @property
    def variance(self):
        scale_sq = self.scale.pow(2)
        return scale_sq.expm1() * (2 * self.loc + scale_sq).exp()

    def entropy(self):
        return self.base_dist.entropy() + self.loc
