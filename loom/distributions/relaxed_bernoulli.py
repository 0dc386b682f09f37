"""The relaxed (Concrete / Gumbel-softmax) Bernoulli distribution and its logit form."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.distribution import Distribution
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import SigmoidTransform
from loom.distributions.utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs, probs_to_logits
from loom.tensor import Size

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli"]


class LogitRelaxedBernoulli(Distribution):
    """The logit of a `RelaxedBernoulli` sample (Maddison et al., 2017), as torch's.

    Examples
    --------
    >>> from loom.distributions.relaxed_bernoulli import LogitRelaxedBernoulli
    >>> d = LogitRelaxedBernoulli(loom.tensor(0.5), probs=loom.tensor(0.3))
    >>> round(d.log_prob(loom.tensor(0.0)).item(), 4)
    -2.2538
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits("LogitRelaxedBernoulli", probs, logits)
        self.temperature = loom.as_tensor(temperature)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(LogitRelaxedBernoulli, batch_shape, _instance, ("probs", "logits"))
        new.temperature = self.temperature
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(*shape))
        uniforms = clamp_probs(loom.rand(*shape, dtype=probs.dtype))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class RelaxedBernoulli(TransformedDistribution):
    """A continuous relaxation of the Bernoulli on (0, 1) at `temperature`, reparameterisable, as torch's.

    Examples
    --------
    >>> from loom.distributions import RelaxedBernoulli
    >>> d = RelaxedBernoulli(loom.tensor(0.5), probs=loom.tensor(0.3))
    >>> s = d.rsample((4,))
    >>> s.shape, bool(((s > 0) & (s < 1)).all())
    (loom.Size([4]), True)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        base = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
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
