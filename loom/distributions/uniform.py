"""The continuous uniform distribution."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.utils import broadcast_all
from loom.tensor import Size

__all__ = ["Uniform"]


class Uniform(Distribution):
    """Uniform on the half-open interval [low, high), as `torch.distributions.Uniform`.

    Examples
    --------
    >>> from loom.distributions import Uniform
    >>> d = Uniform(0.0, 4.0)
    >>> round(d.log_prob(loom.tensor(1.0)).item(), 4), d.cdf(loom.tensor(1.0)).item(), d.variance.item()
    (-1.3863, 0.25, 1.3333333730697632)
    """

    has_rsample = True

    @property
    def arg_constraints(self):
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Uniform, batch_shape, _instance, ("low", "high"))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.high * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        rand = loom.rand(*shape, dtype=self.low.dtype)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = (self.low <= value).to(self.low.dtype)
        ub = (self.high > value).to(self.low.dtype)
        return (lb * ub).log() - (self.high - self.low).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()
