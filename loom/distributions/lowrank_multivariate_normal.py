"""The multivariate normal with a low-rank-plus-diagonal covariance."""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.distribution import Distribution
from loom.distributions.multivariate_normal import _batch_mahalanobis, _batch_mv, _tril_inv
from loom.distributions.utils import lazy_property
from loom.errors import LoomValueError
from loom.tensor import Size, broadcast_shapes

__all__ = ["LowRankMultivariateNormal"]


def _capacitance_tril(W, D):
    """Cholesky factor of the capacitance matrix I + W^T D^-1 W."""
    m = W.shape[-1]
    Wt_Dinv = W.transpose(-1, -2) / D.unsqueeze(-2)
    K = Wt_Dinv @ W + loom.eye(m, dtype=W.dtype)
    return loom.linalg.cholesky(K)


def _lowrank_logdet(W, D, capacitance_tril):
    """log det(W W^T + D) by the matrix determinant lemma."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _lowrank_mahalanobis(W, D, x, capacitance_tril):
    """x^T (W W^T + D)^-1 x by the Woodbury identity."""
    Wt_Dinv = W.transpose(-1, -2) / D.unsqueeze(-2)
    Wt_Dinv_x = _batch_mv(Wt_Dinv, x)
    return (x.pow(2) / D).sum(-1) - _batch_mahalanobis(capacitance_tril, Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    """A multivariate normal with covariance ``cov_factor @ cov_factor.T + diag(cov_diag)``, as torch's.

    Log-densities use the Woodbury identity and the matrix determinant lemma, so they cost
    O(n m^2) for an n x m `cov_factor`.

    Examples
    --------
    >>> from loom.distributions import LowRankMultivariateNormal
    >>> d = LowRankMultivariateNormal(loom.zeros(3), loom.tensor([[1.0], [0.5], [0.0]]), loom.ones(3))
    >>> round(d.log_prob(loom.zeros(3)).item(), 4), d.variance.tolist()
    (-3.1623, [2.0, 1.25, 1.0])
    """

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args: bool | None = None) -> None:
        name = "loom.distributions.LowRankMultivariateNormal"
        loc, cov_factor, cov_diag = loom.as_tensor(loc), loom.as_tensor(cov_factor), loom.as_tensor(cov_diag)
        if loc.ndim < 1:
            raise LoomValueError(f"{name}: loc must be at least one-dimensional")
        n = loc.shape[-1]
        if cov_factor.ndim < 2 or cov_factor.shape[-2] != n:
            raise LoomValueError(f"{name}: cov_factor must be at least two-dimensional with {n} rows, got shape "
                                 f"{tuple(cov_factor.shape)}")
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise LoomValueError(f"{name}: cov_diag must be a batch of vectors of size {n}, got shape "
                                 f"{tuple(cov_diag.shape)}")
        batch_shape = broadcast_shapes(tuple(loc.shape[:-1]), tuple(cov_factor.shape[:-2]),
                                            tuple(cov_diag.shape[:-1]))
        self.loc = loc.expand(*batch_shape, n)
        self.cov_factor = cov_factor.expand(*batch_shape, *cov_factor.shape[-2:])
        self.cov_diag = cov_diag.expand(*batch_shape, n)
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch_shape, loc.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(LowRankMultivariateNormal, batch_shape, _instance,
                                  ("loc", "cov_factor", "cov_diag"))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        return new

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return (self._unbroadcasted_cov_factor.pow(2).sum(-1)
                + self._unbroadcasted_cov_diag).expand(*self._batch_shape, *self._event_shape)

    @lazy_property
    def scale_tril(self):
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / d_sqrt
        K = Dinvsqrt_W @ Dinvsqrt_W.transpose(-1, -2) + loom.eye(n, dtype=self.loc.dtype)
        return (d_sqrt * loom.linalg.cholesky(K)).expand(*self._batch_shape, n, n)

    @lazy_property
    def covariance_matrix(self):
        n = self._event_shape[0]
        W = self._unbroadcasted_cov_factor
        return (W @ W.transpose(-1, -2) + loom.diag_embed(self._unbroadcasted_cov_diag)).expand(
            *self._batch_shape, n, n)

    @lazy_property
    def precision_matrix(self):
        n = self._event_shape[0]
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        Wt_Dinv = W.transpose(-1, -2) / D.unsqueeze(-2)
        A = _tril_inv(self._capacitance_tril) @ Wt_Dinv
        return (loom.diag_embed(D.reciprocal()) - A.transpose(-1, -2) @ A).expand(*self._batch_shape, n, n)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        eps_W = loom.randn(*shape[:-1], self.cov_factor.shape[-1], dtype=self.loc.dtype)
        eps_D = loom.randn(*shape, dtype=self.loc.dtype)
        return (self.loc + _batch_mv(self._unbroadcasted_cov_factor, eps_W)
                + self._unbroadcasted_cov_diag.sqrt() * eps_D)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, diff,
                                 self._capacitance_tril)
        log_det = _lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                  self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + log_det + M)

    def entropy(self):
        log_det = _lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                  self._capacitance_tril)
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + log_det)
        return H.expand(*self._batch_shape) if len(self._batch_shape) else H
