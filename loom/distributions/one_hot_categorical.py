"""The one-hot categorical distribution: categorical draws as one-hot vectors."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.categorical import Categorical
from loom.distributions.distribution import Distribution
from loom.tensor import Size

__all__ = ["OneHotCategorical", "OneHotCategoricalStraightThrough"]


class OneHotCategorical(Distribution):
    """One-hot vectors of `Categorical` draws (the event is the last dimension), as torch's.

    Examples
    --------
    >>> from loom.distributions import OneHotCategorical
    >>> d = OneHotCategorical(probs=loom.tensor([0.25, 0.75]))
    >>> d.sample().shape, round(d.log_prob(loom.tensor([0.0, 1.0])).item(), 4)
    (loom.Size([2]), -0.2877)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs, logits)
        param = self._categorical._param
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        batch_shape = Size(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return loom.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=Size()):
        probs = self._categorical.probs
        indices = self._categorical.sample(sample_shape)
        return loom.nn.functional.one_hot(indices, probs.shape[-1]).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        n = self.event_shape[0]
        values = loom.eye(n, dtype=self._param.dtype).reshape(n, *([1] * len(self.batch_shape)), n)
        return values.expand(n, *self.batch_shape, n) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """`OneHotCategorical` whose ``rsample`` passes gradients straight through to the probabilities.

    Examples
    --------
    >>> from loom.distributions import OneHotCategoricalStraightThrough
    >>> p = loom.tensor([0.5, 0.5], requires_grad=True)
    >>> OneHotCategoricalStraightThrough(probs=p).rsample().sum().backward()
    >>> p.grad is not None
    True
    """

    has_rsample = True

    def rsample(self, sample_shape=Size()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
