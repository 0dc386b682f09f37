"""The beta distribution on [0, 1]."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.dirichlet import Dirichlet
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.utils import broadcast_all
from loom.tensor import Size

__all__ = ["Beta"]


class Beta(ExponentialFamily):
    """The beta distribution with `concentration1` (alpha) and `concentration0` (beta), as torch's.

    A two-category `Dirichlet` underneath; ``rsample`` is differentiable in both concentrations.

    Examples
    --------
    >>> from loom.distributions import Beta
    >>> d = Beta(2.0, 3.0)
    >>> d.mean.item(), round(d.log_prob(loom.tensor(0.5)).item(), 4), round(d.entropy().item(), 4)
    (0.4000000059604645, 0.4055, -0.2349)
    """

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None) -> None:
        c1, c0 = broadcast_all(concentration1, concentration0)
        self._dirichlet = Dirichlet(loom.stack([c1, c0], -1), validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = Size(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        super(Beta, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=Size()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._dirichlet.log_prob(loom.stack([value, 1.0 - value], -1))

    def entropy(self):
        return self._dirichlet.entropy()

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return loom.lgamma(x) + loom.lgamma(y) - loom.lgamma(x + y)
