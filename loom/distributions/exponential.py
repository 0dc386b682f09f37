"""The exponential distribution."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import _uniform, broadcast_all
from loom.tensor import Size

__all__ = ["Exponential"]


class Exponential(ExponentialFamily):
    """The exponential distribution with rate `rate` (mean 1 / rate), as `torch.distributions.Exponential`.

    Examples
    --------
    >>> from loom.distributions import Exponential
    >>> d = Exponential(2.0)
    >>> round(d.log_prob(loom.tensor(1.0)).item(), 4), round(d.cdf(loom.tensor(1.0)).item(), 4), d.mean.item()
    (-1.3069, 0.8647, 0.5)
    """

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, rate, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Exponential, batch_shape, _instance, ("rate",))

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return loom.zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        return -_uniform(shape, self.rate.dtype).log() / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - loom.exp(-self.rate * value)

    def icdf(self, value):
        return -loom.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - self.rate.log()

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -(-x).log()
