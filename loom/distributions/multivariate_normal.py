"""The multivariate normal distribution, parameterised by covariance, precision or a Cholesky factor."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.utils import lazy_property
from loom.errors import LoomValueError
from loom.tensor import Size, broadcast_shapes

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    """Matrix times vector with broadcasting batch dimensions."""
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _tril_inv(L):
    """The inverse of a lower-triangular matrix, reading its lower triangle only (as a triangular solve)."""
    return loom.linalg.inv(L.tril())


def _batch_mahalanobis(bL, bx):
    """x^T (L L^T)^-1 x for lower-triangular L, with broadcasting batch dimensions."""
    return _batch_mv(_tril_inv(bL), bx).pow(2).sum(-1)


class MultivariateNormal(Distribution):
    """The multivariate normal with mean `loc` and one of `covariance_matrix`, `precision_matrix`, `scale_tril`.

    As `torch.distributions.MultivariateNormal`: the last dimension of `loc` is the event; batch
    dimensions of the mean and of the matrix broadcast. Everything is computed from the lower Cholesky
    factor of the covariance (through loom.linalg's cholesky and inv, so it is differentiable).

    Examples
    --------
    >>> from loom.distributions import MultivariateNormal
    >>> d = MultivariateNormal(loom.zeros(2), covariance_matrix=loom.tensor([[2.0, 0.5], [0.5, 1.0]]))
    >>> round(d.log_prob(loom.tensor([1.0, -1.0])).item(), 4), round(d.entropy().item(), 4)
    (-3.2605, 3.1177)
    >>> d.rsample((5,)).shape
    loom.Size([5, 2])
    """

    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args: bool | None = None) -> None:
        name = "loom.distributions.MultivariateNormal"
        loc = loom.as_tensor(loc)
        if loc.ndim < 1:
            raise LoomValueError(f"{name}: loc must be at least one-dimensional, got shape {tuple(loc.shape)}")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise LoomValueError(f"{name}: exactly one of covariance_matrix, precision_matrix or scale_tril may "
                                 "be specified")
        given = scale_tril if scale_tril is not None else \
            covariance_matrix if covariance_matrix is not None else precision_matrix
        if given.ndim < 2:
            raise LoomValueError(f"{name}: the matrix must be at least two-dimensional, with optional leading "
                                 f"batch dimensions, got shape {tuple(given.shape)}")
        if given.shape[-1] != loc.shape[-1] or given.shape[-2] != loc.shape[-1]:
            raise LoomValueError(f"{name}: the matrix of shape {tuple(given.shape)} does not match loc's event "
                                 f"size {loc.shape[-1]}")
        batch_shape = broadcast_shapes(tuple(given.shape[:-2]), tuple(loc.shape[:-1]))
        n = loc.shape[-1]
        if scale_tril is not None:
            self.scale_tril = scale_tril.expand(*batch_shape, n, n)
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self.covariance_matrix = covariance_matrix.expand(*batch_shape, n, n)
            self._unbroadcasted_scale_tril = loom.linalg.cholesky(covariance_matrix)
        else:
            self.precision_matrix = precision_matrix.expand(*batch_shape, n, n)
            self._unbroadcasted_scale_tril = loom.linalg.cholesky(loom.linalg.inv(precision_matrix))
        self.loc = loc.expand(*batch_shape, n)
        super().__init__(batch_shape, loc.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(MultivariateNormal, batch_shape, _instance,
                                  ("loc", "covariance_matrix", "scale_tril", "precision_matrix"))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        return new

    @lazy_property
    def scale_tril(self):
        n = self._event_shape[0]
        return self._unbroadcasted_scale_tril.expand(*self._batch_shape, n, n)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        n = self._event_shape[0]
        return (L @ L.transpose(-1, -2)).expand(*self._batch_shape, n, n)

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        n = self._event_shape[0]
        Linv = _tril_inv(L)
        return (Linv.transpose(-1, -2) @ Linv).expand(*self._batch_shape, n, n)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(*self._batch_shape, *self._event_shape)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        eps = loom.randn(*shape, dtype=self.loc.dtype)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - half_log_det

    def entropy(self):
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det
        return H.expand(*self._batch_shape) if len(self._batch_shape) else H
