"""The categorical distribution over {0, ..., K - 1}."""
from __future__ import annotations

import math

import numpy as np

from loom import _api as loom
from loom import dtypes as dt
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.distribution import Distribution
from loom.distributions.utils import lazy_property, logits_to_probs, probs_to_logits
from loom.errors import LoomValueError
from loom.tensor import Size

__all__ = ["Categorical"]


class Categorical(Distribution):
    """Category indices drawn with probabilities `probs` (or softmax(`logits`)) over the last dimension.

    As `torch.distributions.Categorical`: `probs` need not sum to 1 (they are normalised), `logits` are
    unnormalised log-probabilities; the last dimension indexes the categories.

    Examples
    --------
    >>> from loom.distributions import Categorical
    >>> d = Categorical(probs=loom.tensor([0.1, 0.2, 0.7]))
    >>> round(d.log_prob(loom.tensor(2)).item(), 4), round(d.entropy().item(), 4), d.mode.item()
    (-0.3567, 0.8018, 2)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits(type(self).__name__, probs, logits)
        if probs is not None:
            probs = loom.as_tensor(probs)
            if probs.ndim < 1:
                raise LoomValueError("loom.distributions.Categorical: `probs` must be at least one-dimensional")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            logits = loom.as_tensor(logits)
            if logits.ndim < 1:
                raise LoomValueError("loom.distributions.Categorical: `logits` must be at least one-dimensional")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        super().__init__(self._param.shape[:-1], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Categorical, batch_shape, _instance, ("probs", "logits"))
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        new._num_events = self._num_events
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return loom.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return loom.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            # Gumbel-max: the argmax of logits plus Gumbel noise is a categorical draw.
            logits = self.logits.expand(*shape, self._num_events)
            u = loom.rand(*shape, self._num_events, dtype=logits.dtype).clamp(min=float(np.finfo(np.float64).tiny))
            finite = logits.clamp(min=float(np.finfo(logits.dtype.np).min))
            return (finite - (-u.log()).log()).argmax(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.to(dt.int64).unsqueeze(-1)
        value, log_pmf = loom.broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        logits = self.logits.clamp(min=float(np.finfo(self.logits.dtype.np).min))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        values = loom.arange(self._num_events, dtype=dt.int64).reshape(-1, *([1] * len(self._batch_shape)))
        return values.expand(-1, *self._batch_shape) if expand else values
