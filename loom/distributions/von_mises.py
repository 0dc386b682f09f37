"""The von Mises distribution: a normal distribution wrapped on the circle."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.utils import _first_accepted, _uniform, bessel_i, broadcast_all
from loom.tensor import Size

__all__ = ["VonMises"]

_PROPOSALS = 24  # Best-Fisher accepts each proposal with probability > 0.65: all 24 fail with p < 1e-10.


def _log_i0(kappa):
    """log I_0(kappa) without overflow: log(exp(-kappa) I_0(kappa)) + kappa."""
    return bessel_i(0, kappa, True).log() + kappa


class VonMises(Distribution):
    """Angles in [-pi, pi) with density exp(kappa cos(x - loc)) / (2 pi I_0(kappa)), as `torch.distributions.VonMises`.

    Sampling uses Best and Fisher's rejection method (1979) in float64, as PyTorch does.

    Examples
    --------
    >>> from loom.distributions import VonMises
    >>> d = VonMises(loom.tensor(0.0), loom.tensor(2.0))
    >>> round(d.log_prob(loom.tensor(0.5)).item(), 4)
    -0.9067
    """

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(VonMises, batch_shape, _instance, ("loc", "concentration"))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        k = self.concentration
        return k * loom.cos(value - self.loc) - math.log(2 * math.pi) - _log_i0(k)

    @property
    def mean(self):
        """The circular mean, `loc`."""
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        """The circular variance 1 - I_1(kappa) / I_0(kappa)."""
        k = self.concentration
        return 1 - bessel_i(1, k, True) / bessel_i(0, k, True)

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            loc = self.loc.to(loom.float64).expand(*shape)
            kappa = self.concentration.to(loom.float64).expand(*shape)
            tau = 1 + (1 + 4 * kappa ** 2).sqrt()
            rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
            r = loom.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho ** 2) / (2 * rho))  # Taylor near kappa = 0.
            u1, u2, u3 = (_uniform((_PROPOSALS, *shape), loom.float64) for _ in range(3))
            z = loom.cos(math.pi * u1)
            f = (1 + r * z) / (r + z)
            c = kappa * (r - f)
            accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
            x = _first_accepted((u3 - 0.5).sign() * f.clamp(-1.0, 1.0).acos(), accept)
            return ((x + math.pi + loc) % (2 * math.pi) - math.pi).to(self.loc.dtype)
