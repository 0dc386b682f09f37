"""The multinomial distribution: category counts of `total_count` categorical draws."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.binomial import Binomial
from loom.distributions.categorical import Categorical
from loom.distributions.distribution import Distribution
from loom.distributions.utils import broadcast_all
from loom.errors import LoomTypeError
from loom.tensor import Size

__all__ = ["Multinomial"]


class Multinomial(Distribution):
    """Counts per category of `total_count` draws with probabilities `probs` (or softmax(`logits`)), as torch's.

    `total_count` is an int (the same for the whole batch); ``sample`` needs it, ``log_prob`` does not.

    Examples
    --------
    >>> from loom.distributions import Multinomial
    >>> d = Multinomial(4, probs=loom.tensor([0.2, 0.3, 0.5]))
    >>> d.sample().sum().item(), round(d.log_prob(loom.tensor([1.0, 1.0, 2.0])).item(), 4)
    (4.0, -1.7148)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}

    def __init__(self, total_count: int = 1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if not isinstance(total_count, int):
            raise LoomTypeError(f"loom.distributions.Multinomial: total_count must be an int (inhomogeneous counts "
                                f"are not supported), got {type(total_count).__name__}")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        param = self._categorical._param
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = Binomial(total_count=self.total_count, probs=new._categorical.probs, validate_args=False)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=Size()):
        with loom.no_grad():
            samples = self._categorical.sample(Size((self.total_count,) + tuple(sample_shape)))
            k = self._categorical._num_events
            counts = loom.nn.functional.one_hot(samples, k).to(self.probs.dtype).sum(0)
            return counts.reshape(*self._extended_shape(sample_shape))

    def entropy(self):
        n = loom.tensor(float(self.total_count), dtype=self.probs.dtype)
        support = self._binomial.enumerate_support()
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = loom.lgamma(support + 1)
        return (n * self._categorical.entropy() - math.lgamma(self.total_count + 1)
                + (binomial_probs * weights).sum(0).sum(-1))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        value = value.to(logits.dtype)
        log_factorial_n = loom.lgamma(value.sum(-1) + 1)
        log_factorial_xs = loom.lgamma(value + 1).sum(-1)
        logits = loom.where((value == 0) & (logits == -math.inf), loom.zeros_like(logits), logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)
