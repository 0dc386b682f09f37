"""The logistic-normal distribution on the simplex."""
from __future__ import annotations

from loom.distributions import constraints
from loom.distributions.normal import Normal
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import StickBreakingTransform
from loom.tensor import Size

__all__ = ["LogisticNormal"]


class LogisticNormal(TransformedDistribution):
    """Normal(loc, scale) vectors of length K - 1 mapped to the K-simplex by stick breaking, as torch's.

    Examples
    --------
    >>> from loom.distributions import LogisticNormal
    >>> d = LogisticNormal(loom.zeros(2), loom.ones(2))
    >>> s = d.sample()
    >>> s.shape, round(s.sum().item(), 5)
    (loom.Size([3]), 1.0)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand([1])
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
