"""The negative binomial distribution: failures before `total_count` successes."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.distribution import Distribution
from loom.distributions.gamma import Gamma
from loom.distributions.poisson import _poisson_sample
from loom.distributions.utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits
from loom.tensor import Size

__all__ = ["NegativeBinomial"]


class NegativeBinomial(Distribution):
    """The number of failures before `total_count` successes, each trial succeeding with `probs`, as torch's.

    Sampled as a gamma-Poisson mixture; `total_count` may be any non-negative real.

    Examples
    --------
    >>> from loom.distributions import NegativeBinomial
    >>> d = NegativeBinomial(3.0, probs=loom.tensor(0.4))
    >>> d.mean.item(), round(d.log_prob(loom.tensor(2.0)).item(), 4)
    (2.0, -1.5733)
    """

    arg_constraints = {"total_count": constraints.greater_than_eq(0), "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits("NegativeBinomial", probs, logits)
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self.total_count = self.total_count.to(self.probs.dtype)
            self._param = self.probs
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self.total_count = self.total_count.to(self.logits.dtype)
            self._param = self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(NegativeBinomial, batch_shape, _instance, ("total_count", "probs", "logits"))
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new

    @property
    def mean(self):
        return self.total_count * self.logits.exp()

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / loom.sigmoid(-self.logits)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=(-self.logits).exp(), validate_args=False)

    def sample(self, sample_shape=Size()):
        with loom.no_grad():
            return _poisson_sample(self._gamma.sample(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logsigmoid = loom.nn.functional.logsigmoid
        log_unnormalized = self.total_count * logsigmoid(-self.logits) + value * logsigmoid(self.logits)
        log_normalization = (-loom.lgamma(self.total_count + value) + loom.lgamma(1.0 + value)
                             + loom.lgamma(self.total_count))
        log_normalization = loom.where(self.total_count + value == 0, loom.zeros_like(log_normalization),
                                       log_normalization)
        return log_unnormalized - log_normalization
