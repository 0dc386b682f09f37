"""The Fisher-Snedecor (F) distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.gamma import Gamma
from loom.distributions.utils import _tiny, broadcast_all
from loom.tensor import Size

__all__ = ["FisherSnedecor"]


class FisherSnedecor(Distribution):
    """The F distribution with `df1` and `df2` degrees of freedom, as `torch.distributions.FisherSnedecor`.

    ``rsample`` is the ratio of two reparameterised gammas, differentiable in both parameters.

    Examples
    --------
    >>> from loom.distributions import FisherSnedecor
    >>> d = FisherSnedecor(4.0, 6.0)
    >>> d.mean.item(), round(d.log_prob(loom.tensor(1.0)).item(), 4)
    (1.5, -0.8802)
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args: bool | None = None) -> None:
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(FisherSnedecor, batch_shape, _instance, ("df1", "df2"))
        new._gamma1 = self._gamma1.expand(batch_shape)
        new._gamma2 = self._gamma2.expand(batch_shape)
        return new

    @property
    def mean(self):
        df2 = loom.where(self.df2 > 2, self.df2, loom.full_like(self.df2, math.nan))
        return df2 / (df2 - 2)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return loom.where(self.df1 > 2, mode, loom.full_like(mode, math.nan))

    @property
    def variance(self):
        df2 = loom.where(self.df2 > 4, self.df2, loom.full_like(self.df2, math.nan))
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=Size()):
        tiny = _tiny(self.df1.dtype)
        x1 = self._gamma1.rsample(sample_shape)
        x2 = self._gamma2.rsample(sample_shape).clamp(min=tiny)
        return (x1 / x2).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = loom.lgamma(ct1 + ct2) - loom.lgamma(ct1) - loom.lgamma(ct2)
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * loom.log1p(ct3 * value)
        return t1 + t2 - t3
