"""The relaxed one-hot categorical (Concrete / Gumbel-softmax) distribution and its log form."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.categorical import Categorical
from loom.distributions.distribution import Distribution
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import ExpTransform
from loom.distributions.utils import clamp_probs
from loom.tensor import Size

__all__ = ["ExpRelaxedCategorical", "RelaxedOneHotCategorical"]


class ExpRelaxedCategorical(Distribution):
    """The log of a `RelaxedOneHotCategorical` sample (a point of the log-simplex), as torch's.

    Examples
    --------
    >>> from loom.distributions.relaxed_categorical import ExpRelaxedCategorical
    >>> d = ExpRelaxedCategorical(loom.tensor(1.0), probs=loom.tensor([0.5, 0.5]))
    >>> round(d.log_prob(loom.tensor([0.5, 0.5]).log()).item(), 4)
    -1.3863
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs, logits)
        self.temperature = loom.as_tensor(temperature)
        param = self._categorical._param
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        batch_shape = Size(batch_shape)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        uniforms = clamp_probs(loom.rand(*shape, dtype=self.logits.dtype))
        gumbels = -((-(uniforms.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value):
        K = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        log_scale = math.lgamma(K) + (K - 1) * self.temperature.log()
        score = self.logits - value * self.temperature
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """A continuous relaxation of `OneHotCategorical` on the simplex at `temperature` (Gumbel-softmax), as torch's.

    Examples
    --------
    >>> from loom.distributions import RelaxedOneHotCategorical
    >>> d = RelaxedOneHotCategorical(loom.tensor(0.5), probs=loom.tensor([0.2, 0.3, 0.5]))
    >>> s = d.rsample()
    >>> s.shape, round(s.sum().item(), 5)
    (loom.Size([3]), 1.0)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedOneHotCategorical, _instance)
        return super().expand(Size(batch_shape), _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs
