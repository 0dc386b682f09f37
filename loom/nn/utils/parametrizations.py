"""Weight and spectral normalisation as parametrizations, as `torch.nn.utils.parametrizations`."""
from __future__ import annotations

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.functional.nn import normalize
from loom.nn.module import Module
from loom.nn.utils import parametrize
from loom.tensor import Tensor, randn

__all__ = ["weight_norm", "spectral_norm"]


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
