"""Weight and spectral normalisation as parametrizations, as `torch.nn.utils.parametrizations`."""
from __future__ import annotations

import numpy as np

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.functional.nn import normalize
from loom.nn.module import Module
from loom.nn.utils import parametrize
from loom import linalg as _linalg
from loom.functional.compat import allclose
from loom.functional.shape import cat
from loom.tensor import Tensor, eye, randn, zeros

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


def _norm_except_dim(v: Tensor, dim: int | None) -> Tensor:
    """The 2-norm of v over every dim but `dim` (over all of v when dim is None), kept broadcastable."""
    if dim is None or dim == -1 and v.ndim == 0:
        return (v * v).sum().sqrt()
    dim = dim % v.ndim if v.ndim else 0
    axes = tuple(d for d in range(v.ndim) if d != dim)
    return (v * v).sum(axes, keepdim=True).sqrt() if axes else v.abs()


def _weight_norm(v: Tensor, g: Tensor, dim: int | None) -> Tensor:
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, None if self.dim == -1 else self.dim)

    def right_inverse(self, weight: Tensor):
        return _norm_except_dim(weight, None if self.dim == -1 else self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize `module.<name>` as g * v / ||v|| (norm over every dim but `dim`).

    The magnitude g is `parametrizations.<name>.original0` and the direction v
    `parametrizations.<name>.original1`, as in PyTorch.

    Examples
    --------
    >>> m = loom.nn.utils.parametrizations.weight_norm(loom.nn.Linear(20, 40))
    >>> m.parametrizations.weight.original0.shape, m.parametrizations.weight.original1.shape
    (loom.Size([40, 1]), loom.Size([40, 20]))
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if not -ndim <= dim < max(ndim, 1):
            raise LoomValueError(f"loom.nn.utils.parametrizations.spectral_norm: dim {dim} is out of range for a "
                                 f"{ndim}-d weight")
        if n_power_iterations <= 0:
            raise LoomValueError("loom.nn.utils.parametrizations.spectral_norm: n_power_iterations must be "
                                 f"positive, got {n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = self._reshape_weight_to_matrix(weight)
            h, w = mat.shape
            self.register_buffer("_u", normalize(randn(h, dtype=weight.dtype), dim=0, eps=self.eps))
            self.register_buffer("_v", normalize(randn(w, dtype=weight.dtype), dim=0, eps=self.eps))
            self._power_method(mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute([self.dim] + [d for d in range(weight.ndim) if d != self.dim])
        return weight.flatten(1)

    def _power_method(self, weight_mat: Tensor, n: int) -> None:
        with no_grad():
            mat = weight_mat.detach()
            for _ in range(n):
                self._u.copy_(normalize(mat.mv(self._v), dim=0, eps=self.eps))
                self._v.copy_(normalize(mat.T.mv(self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u = self._u.clone()
        v = self._v.clone()
        sigma = (u * mat.mv(v)).sum()
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Reparametrize `module.<name>` as W / sigma(W), sigma the largest singular value estimated by power
    iteration (one step per training forward; buffers `_u`, `_v` hold the singular vectors).

    Examples
    --------
    >>> m = loom.nn.utils.parametrizations.spectral_norm(loom.nn.Linear(20, 40))
    >>> m.parametrizations.weight.original.shape
    loom.Size([40, 20])
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise LoomValueError(f"loom.nn.utils.parametrizations.spectral_norm: module has no tensor '{name}'")
    if dim is None:
        from loom.nn.modules.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


_ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def _orthonormal_columns(a: Tensor) -> Tensor:
    """The Q of a's QR with R's diagonal made positive: a's columns orthonormalised in order."""
    q, r = _linalg.qr(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


class _Orthogonal(Module):
    """Maps an unconstrained (n, k) tensor to one with orthonormal columns (rows when n < k)."""

    def __init__(self, weight: Tensor, orthogonal_map: str, use_trivialization: bool = True) -> None:
        super().__init__()
        if weight.dtype.is_complex:
            raise LoomValueError("loom.nn.utils.parametrizations.orthogonal: complex weights are not supported")
        self.shape, self.orthogonal_map = tuple(weight.shape), orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x: Tensor) -> Tensor:
        n, k = x.shape[-2], x.shape[-1]
        transposed = n < k
        if transposed:
            x, n, k = x.mT, k, n
        if self.orthogonal_map == "householder":
            a = x.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (a * a).sum(dim=-2))
            q = _linalg.householder_product(a, tau)
            q = q * x.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        else:
            x = x.tril()
            if n != k:
                x = cat([x, zeros(*x.shape[:-1], n - k, dtype=x.dtype)], dim=-1)
            a = x - x.mT
            if self.orthogonal_map == "matrix_exp":
                q = _linalg.matrix_exp(a)
            else:
                ident = eye(n, dtype=a.dtype)
                q = _linalg.solve(ident - 0.5 * a, ident + 0.5 * a)
            q = q[..., :k]
        if getattr(self, "base", None) is not None:
            q = self.base @ q
        return q.mT if transposed else q

    @no_grad()
    def right_inverse(self, q: Tensor) -> Tensor:
        if tuple(q.shape) != self.shape:
            raise LoomValueError(f"loom.nn.utils.parametrizations.orthogonal: expected a value of shape "
                                 f"{list(self.shape)}, got {list(q.shape)}")
        if not hasattr(self, "base"):
            raise LoomValueError("loom.nn.utils.parametrizations.orthogonal: assigning to the weight needs "
                                 "use_trivialization=True")
        q_in = q
        n, k = q.shape[-2], q.shape[-1]
        if n < k:
            q, n, k = q.mT, k, n
        if n == k:
            tol = 10.0 * n * float(np.finfo(np.float32 if q.dtype.np == np.uint16 else q.dtype.np).eps)
            q = q.clone() if allclose(q.mT @ q, eye(k, dtype=q.dtype), atol=tol) else _orthonormal_columns(q)
        else:  # Completed to a square orthogonal basis; its first k columns are q's own orthonormalised.
            q = _orthonormal_columns(cat([q, randn(*q.shape[:-1], n - k, dtype=q.dtype)], dim=-1))
        self.base = q
        neg_eye = zeros(*q_in.shape, dtype=q_in.dtype)
        neg_eye.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_eye


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Reparametrize `module.<name>` to a matrix with orthonormal rows or columns, as PyTorch's.

    The weight starts as the original one orthonormalised (QR); training then moves it on the orthogonal
    matrices through `orthogonal_map` ("matrix_exp" for square weights, else "householder", or "cayley").

    Examples
    --------
    >>> m = loom.nn.utils.parametrizations.orthogonal(loom.nn.Linear(4, 3))
    >>> loom.allclose(m.weight @ m.weight.T, loom.eye(3), atol=1e-5)
    True
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise LoomValueError(f"loom.nn.utils.parametrizations.orthogonal: module has no tensor '{name}'")
    if weight.ndim < 2:
        raise LoomValueError(f"loom.nn.utils.parametrizations.orthogonal: expected a matrix or a batch of "
                             f"matrices, got a tensor of shape {list(weight.shape)}")
    n, k = weight.shape[-2], weight.shape[-1]
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if n == k else "householder"
    if orthogonal_map not in _ORTHOGONAL_MAPS:
        raise LoomValueError(f"loom.nn.utils.parametrizations.orthogonal: orthogonal_map must be one of "
                             f"{_ORTHOGONAL_MAPS}, got {orthogonal_map!r}")
    if not use_trivialization:
        raise LoomValueError("loom.nn.utils.parametrizations.orthogonal: use_trivialization=False is not "
                             "supported by loom")
    parametrize.register_parametrization(module, name, _Orthogonal(weight, orthogonal_map, use_trivialization),
                                         unsafe=True)
    return module
