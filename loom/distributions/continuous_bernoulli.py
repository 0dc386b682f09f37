"""The continuous Bernoulli distribution (Loaiza-Ganem & Cunningham, 2019): a density on [0, 1] for VAEs."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import (_uniform, broadcast_all, clamp_probs, lazy_property, logits_to_probs,
                                      probs_to_logits)
from loom.errors import LoomValueError
from loom.tensor import Size

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(ExponentialFamily):
    """p(x) = C(λ) λ^x (1 - λ)^(1 - x) on [0, 1], as `torch.distributions.ContinuousBernoulli`.

    Near λ = 0.5, where the closed forms divide 0 by 0, the normaliser, mean and
    variance use their Taylor expansions (the `lims` interval), as PyTorch does.

    Examples
    --------
    >>> from loom.distributions import ContinuousBernoulli
    >>> d = ContinuousBernoulli(probs=loom.tensor([0.3]))
    >>> [round(v, 4) for v in d.log_prob(loom.tensor([0.2])).tolist()]
    [0.2245]
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args: bool | None = None) -> None:
        _probs_or_logits("ContinuousBernoulli", probs, logits)
        if probs is not None:
            (probs,) = broadcast_all(probs)
            if validate_args and not bool(((probs >= 0) & (probs <= 1)).all()):
                raise LoomValueError("loom.distributions.ContinuousBernoulli: probs must lie in [0, 1]")
            self.probs = clamp_probs(probs)  # Checked before the clamp, which would hide a value outside [0, 1].
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        self._lims = tuple(lims)
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(ContinuousBernoulli, batch_shape, _instance, ("probs", "logits"))
        new._lims = self._lims
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self):
        return self._param.shape

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs >= self._lims[1])

    def _cut_probs(self):
        """probs, with those near 0.5 moved to lims[0] so that the closed forms stay finite there."""
        return loom.where(self._outside_unstable_region(), self.probs, loom.full_like(self.probs, self._lims[0]))

    def _cont_bern_log_norm(self):
        """log C(λ): log(2 atanh(1 - 2λ) / (1 - 2λ)), or its Taylor expansion near λ = 0.5."""
        p = self._cut_probs()
        below = loom.where(p <= 0.5, p, loom.zeros_like(p))
        above = loom.where(p >= 0.5, p, loom.ones_like(p))
        log_norm = loom.log(loom.abs(loom.log1p(-p) - loom.log(p))) - loom.where(
            p <= 0.5, loom.log1p(-2.0 * below), loom.log(2.0 * above - 1.0))
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return loom.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        p = self._cut_probs()
        mus = p / (2.0 * p - 1.0) + 1.0 / (loom.log1p(-p) - loom.log(p))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x
        return loom.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return loom.sqrt(self.variance)

    @property
    def variance(self):
        p = self._cut_probs()
        var = p * (p - 1.0) / (1.0 - 2.0 * p) ** 2 + 1.0 / (loom.log1p(-p) - loom.log(p)) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return loom.where(self._outside_unstable_region(), var, taylor)

    def sample(self, sample_shape=Size()):
        with loom.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        return self.icdf(_uniform(shape, self.probs.dtype))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -loom.nn.functional.binary_cross_entropy_with_logits(
            logits, value.to(logits.dtype), reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        p = self._cut_probs()
        cdfs = (p ** value * (1.0 - p) ** (1.0 - value) + p - 1.0) / (2.0 * p - 1.0)
        unbounded = loom.where(self._outside_unstable_region(), cdfs, value)
        return loom.where(value <= 0.0, loom.zeros_like(unbounded),
                          loom.where(value >= 1.0, loom.ones_like(unbounded), unbounded))

    def icdf(self, value):
        p = self._cut_probs()
        inv = (loom.log1p(-p + value * (2.0 * p - 1.0)) - loom.log1p(-p)) / (loom.log(p) - loom.log1p(-p))
        return loom.where(self._outside_unstable_region(), inv, value)

    def entropy(self):
        log_p0, log_p1 = loom.log1p(-self.probs), loom.log(self.probs)
        return self.mean * (log_p0 - log_p1) - self._cont_bern_log_norm() - log_p0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """log C as a function of the natural parameter (the logit), Taylor-expanded near 0."""
        lo, hi = self._lims[0] - 0.5, self._lims[1] - 0.5
        outside = (x <= lo) | (x >= hi)
        cut = loom.where(outside, x, loom.full_like(x, lo))
        log_norm = loom.log(loom.abs(loom.exp(cut) - 1.0)) - loom.log(loom.abs(cut))
        taylor = 0.5 * x + x ** 2 / 24.0 - x ** 4 / 2880.0
        return loom.where(outside, log_norm, taylor)
