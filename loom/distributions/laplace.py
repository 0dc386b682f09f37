"""The Laplace (double exponential) distribution."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.utils import _eps, broadcast_all
from loom.tensor import Size

__all__ = ["Laplace"]


class Laplace(Distribution):
    """The Laplace distribution with location `loc` and scale `scale`, as `torch.distributions.Laplace`.

    Examples
    --------
    >>> from loom.distributions import Laplace
    >>> d = Laplace(0.0, 1.0)
    >>> round(d.log_prob(loom.tensor(1.0)).item(), 4), round(d.cdf(loom.tensor(0.0)).item(), 4)
    (-1.6931, 0.5)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Laplace, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return (2 ** 0.5) * self.scale

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        eps = _eps(self.loc.dtype)
        u = loom.rand(*shape, dtype=self.loc.dtype) * (2.0 - eps) + (eps - 1.0)  # In (-1, 1).
        return self.loc - self.scale * u.sign() * loom.log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * loom.expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * loom.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + (2 * self.scale).log()
