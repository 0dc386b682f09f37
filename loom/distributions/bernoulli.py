"""The Bernoulli distribution."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits
from loom.errors import LoomValueError
from loom.tensor import Size

__all__ = ["Bernoulli"]


def _probs_or_logits(name: str, probs, logits):
    if (probs is None) == (logits is None):
        raise LoomValueError(f"loom.distributions.{name}: either `probs` or `logits` must be specified, but not "
                             "both")


class Bernoulli(ExponentialFamily):
    """1 with probability `probs` (or sigmoid(`logits`)), else 0, as `torch.distributions.Bernoulli`.

    Examples
    --------
    >>> from loom.distributions import Bernoulli
    >>> d = Bernoulli(probs=loom.tensor([0.25]))
    >>> [round(v, 4) for v in d.log_prob(loom.tensor([1.0])).tolist()], round(d.entropy().item(), 4)
    ([-1.3863], 0.5623)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits("Bernoulli", probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Bernoulli, batch_shape, _instance, ("probs", "logits"))
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return loom.where(self.probs == 0.5, loom.full_like(mode, math.nan), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            p = self.probs.expand(*shape)
            return (loom.rand(*shape, dtype=p.dtype) < p).to(p.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -loom.nn.functional.binary_cross_entropy_with_logits(logits, value.to(logits.dtype),
                                                                     reduction="none")

    def entropy(self):
        return loom.nn.functional.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        values = loom.arange(2, dtype=self._param.dtype).reshape(-1, *([1] * len(self._batch_shape)))
        return values.expand(-1, *self._batch_shape) if expand else values

    @property
    def _natural_params(self):
        return (loom.logit(self.probs),)

    def _log_normalizer(self, x):
        return loom.log1p(loom.exp(x))
