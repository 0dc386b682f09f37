"""The Dirichlet distribution over the probability simplex."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.gamma import _reparameterised_gamma
from loom.errors import LoomValueError
from loom.tensor import Size

__all__ = ["Dirichlet"]


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution with `concentration` (its last dimension is the event), as torch's.

    ``rsample`` normalises reparameterised gamma draws, so it is differentiable in the concentration.

    Examples
    --------
    >>> from loom.distributions import Dirichlet
    >>> d = Dirichlet(loom.tensor([1.0, 2.0, 3.0]))
    >>> [round(v, 4) for v in d.mean.tolist()]
    [0.1667, 0.3333, 0.5]
    >>> round(d.log_prob(loom.tensor([0.2, 0.3, 0.5])).item(), 4)
    1.5041
    """

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args: bool | None = None) -> None:
        concentration = loom.as_tensor(concentration)
        if concentration.ndim < 1:
            raise LoomValueError("loom.distributions.Dirichlet: `concentration` must be at least one-dimensional, "
                                 f"got shape {tuple(concentration.shape)}")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Dirichlet, batch_shape, _instance, ("concentration",))

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        g = _reparameterised_gamma(self.concentration.expand(*shape))
        return g / g.sum(-1, keepdim=True)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return loom.xlogy(c - 1.0, value).sum(-1) + loom.lgamma(c.sum(-1)) - loom.lgamma(c).sum(-1)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        cm1 = (self.concentration - 1).clamp(min=0.0)
        mode = cm1 / cm1.sum(-1, True)
        # With every concentration below 1 the density is unbounded at the corners; PyTorch returns the first.
        all_small = (self.concentration < 1).all(-1, keepdim=True)
        corner = (loom.arange(self.concentration.shape[-1]) == 0).to(mode.dtype)
        return loom.where(all_small, corner, mode)

    @property
    def variance(self):
        c = self.concentration
        c0 = c.sum(-1, True)
        return c * (c0 - c) / (c0.pow(2) * (c0 + 1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        a0 = c.sum(-1)
        return (loom.lgamma(c).sum(-1) - loom.lgamma(a0) - (k - a0) * loom.digamma(a0)
                - ((c - 1.0) * loom.digamma(c)).sum(-1))

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return loom.lgamma(x).sum(-1) - loom.lgamma(x.sum(-1))
