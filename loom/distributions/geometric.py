"""The geometric distribution: failures before the first success."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.distribution import Distribution
from loom.distributions.utils import _uniform, broadcast_all, lazy_property, logits_to_probs, probs_to_logits
from loom.tensor import Size

__all__ = ["Geometric"]


class Geometric(Distribution):
    """The number of failures before the first success with probability `probs` (or sigmoid(`logits`)).

    As `torch.distributions.Geometric` (support 0, 1, 2, ...).

    Examples
    --------
    >>> from loom.distributions import Geometric
    >>> d = Geometric(probs=loom.tensor(0.25))
    >>> round(d.log_prob(loom.tensor(2.0)).item(), 4), d.mean.item(), d.variance.item()
    (-1.9617, 3.0, 12.0)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits("Geometric", probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        param = self.probs if probs is not None else self.logits
        super().__init__(param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Geometric, batch_shape, _instance, ("probs", "logits"))

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return loom.zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            u = _uniform(shape, self.probs.dtype)
            return (u.log() / loom.log1p(-self.probs)).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = loom.where((probs == 1) & (value == 0), loom.zeros_like(probs), probs)
        return value * loom.log1p(-probs) + self.probs.log()

    def entropy(self):
        return loom.nn.functional.binary_cross_entropy_with_logits(self.logits, self.probs,
                                                                   reduction="none") / self.probs
