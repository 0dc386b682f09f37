"""`ExponentialFamily`: distributions p(x) = h(x) exp(<t(x), theta> - F(theta)), with a generic entropy."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions.distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """The base of exponential-family distributions, as `torch.distributions.ExponentialFamily`.

    A subclass may define ``_natural_params`` (a tuple of Tensors), ``_log_normalizer(*params)`` and
    ``_mean_carrier_measure``; the entropy then follows from the Bregman divergence of the log-normalizer
    (by automatic differentiation), and `kl_divergence` between two members of the same family likewise.
    The families loom provides compute their entropies in closed form.

    Examples
    --------
    >>> from loom.distributions import ExponentialFamily, Normal
    >>> isinstance(Normal(0.0, 1.0), ExponentialFamily)
    True
    """

    @property
    def _natural_params(self):
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} does not define _natural_params")

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} does not define _log_normalizer")

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} does not define "
                                  "_mean_carrier_measure")

    def entropy(self):
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        with loom.enable_grad():
            lg_normal = self._log_normalizer(*nparams)
            gradients = loom.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for np_, g in zip(nparams, gradients):
            result = result - (np_ * g).reshape(*self._batch_shape, -1).sum(-1)
        return result
