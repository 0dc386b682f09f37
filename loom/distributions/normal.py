"""The normal (Gaussian) distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import broadcast_all
from loom.tensor import Size

__all__ = ["Normal"]


class Normal(ExponentialFamily):
    """The normal distribution with mean `loc` and standard deviation `scale`, as `torch.distributions.Normal`.

    Parameters
    ----------
    loc : float or Tensor
    scale : float or Tensor (positive)
    validate_args : bool, optional

    Examples
    --------
    >>> from loom.distributions import Normal
    >>> d = Normal(loom.tensor([0.0, 1.0]), 2.0)
    >>> [round(v, 4) for v in d.log_prob(loom.tensor([0.0, 0.0])).tolist()]
    [-1.6121, -1.7371]
    >>> round(d.cdf(loom.tensor([0.0, 1.0]))[1].item(), 4), round(d.entropy()[0].item(), 4)
    (0.5, 2.1121)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Normal, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def sample(self, sample_shape=Size()):
        with loom.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        eps = loom.randn(*shape, dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + loom.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * loom.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    @property
    def _natural_params(self):
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * (-math.pi / y).log()
