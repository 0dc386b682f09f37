"""Student's t-distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.chi2 import Chi2
from loom.distributions.distribution import Distribution
from loom.distributions.utils import broadcast_all
from loom.tensor import Size

__all__ = ["StudentT"]


class StudentT(Distribution):
    """Student's t with `df` degrees of freedom, location `loc` and scale `scale`, as torch's.

    ``rsample`` draws Normal / sqrt(Chi2 / df), differentiable in all three parameters.

    Examples
    --------
    >>> from loom.distributions import StudentT
    >>> d = StudentT(3.0)
    >>> round(d.log_prob(loom.tensor(0.0)).item(), 4), d.variance.item(), round(d.entropy().item(), 4)
    (-1.0009, 3.0, 1.7735)
    """

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args: bool | None = None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(StudentT, batch_shape, _instance, ("df", "loc", "scale"))
        new._chi2 = self._chi2.expand(batch_shape)
        return new

    @property
    def mean(self):
        return loom.where(self.df > 1, self.loc, loom.full_like(self.loc, math.nan))

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        df = self.df
        finite = self.scale.pow(2) * df / (df - 2).clamp(min=1e-30)
        return loom.where(df > 2, finite, loom.where(df > 1, loom.full_like(df, math.inf),
                                                     loom.full_like(df, math.nan)))

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        x = loom.randn(*shape, dtype=self.df.dtype)
        z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * x * (z / self.df).rsqrt()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi) + loom.lgamma(0.5 * self.df)
             - loom.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * loom.log1p(y ** 2.0 / self.df) - z

    def entropy(self):
        df = self.df
        lbeta = loom.lgamma(0.5 * df) + math.lgamma(0.5) - loom.lgamma(0.5 * (df + 1))
        return (self.scale.log() + 0.5 * (df + 1) * (loom.digamma(0.5 * (df + 1)) - loom.digamma(0.5 * df))
                + 0.5 * df.log() + lbeta)
