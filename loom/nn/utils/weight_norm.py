"""The pre-parametrization spellings `torch.nn.utils.weight_norm` / `spectral_norm` (forward pre-hooks)."""
from __future__ import annotations

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.functional.nn import normalize
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.nn.utils.parametrizations import _norm_except_dim, _weight_norm
from loom.tensor import Tensor, randn

__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]


class _WeightNormHook:
    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = dim

    def compute_weight(self, module: Module) -> Tensor:
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Split `module.<name>` into a magnitude `<name>_g` and a direction `<name>_v`, recombined before
    every forward as g * v / ||v||.

    Examples
    --------
    >>> m = loom.nn.utils.weight_norm(loom.nn.Linear(20, 40), name="weight")
    >>> m.weight_g.shape, m.weight_v.shape
    (loom.Size([40, 1]), loom.Size([40, 20]))
    """
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            raise LoomValueError(f"loom.nn.utils.weight_norm: cannot register two weight_norm hooks on the same "
                                 f"parameter {name}")
    weight = getattr(module, name)
    if not isinstance(weight, Parameter):
        raise LoomValueError(f"loom.nn.utils.weight_norm: '{name}' is not a parameter of {type(module).__name__}")
    dim = None if dim is None or dim == -1 else dim
    hook = _WeightNormHook(name, dim)
    del module._parameters[name]
    with no_grad():
        module.register_parameter(name + "_g", Parameter(_norm_except_dim(weight, dim).detach().clone()))
        module.register_parameter(name + "_v", Parameter(weight.detach().clone()))
    setattr(module, name, hook.compute_weight(module))
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: `module.<name>` becomes a plain parameter again."""
    for hid, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            with no_grad():
                weight = hook.compute_weight(module).detach().clone()
            del module._forward_pre_hooks[hid]
            del module._parameters[name + "_g"]
            del module._parameters[name + "_v"]
            module.__dict__.pop(name, None)
            module.register_parameter(name, Parameter(weight))
            return module
    raise LoomValueError(f"loom.nn.utils.remove_weight_norm: weight_norm of '{name}' not found in {module}")


class _SpectralNormHook:
    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        self.name = name
        self.n_power_iterations = n_power_iterations
        self.dim = dim
        self.eps = eps

    def matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute([self.dim] + [d for d in range(weight.ndim) if d != self.dim])
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        mat = self.matrix(weight)
        if do_power_iteration:
            with no_grad():
                m = mat.detach()
                for _ in range(self.n_power_iterations):
                    v.copy_(normalize(m.T.mv(u), dim=0, eps=self.eps))
                    u.copy_(normalize(m.mv(v), dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()
        sigma = (u * mat.mv(v)).sum()
        return weight / sigma

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Divide `module.<name>` by its spectral norm before every forward (one power-iteration step per
    training forward), keeping `<name>_orig`, `<name>_u` and `<name>_v` as PyTorch does.

    Examples
    --------
    >>> m = loom.nn.utils.spectral_norm(loom.nn.Linear(20, 40))
    >>> m.weight_u.shape
    loom.Size([40])
    """
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _SpectralNormHook) and hook.name == name:
            raise LoomValueError(f"loom.nn.utils.spectral_norm: cannot register two spectral_norm hooks on the "
                                 f"same parameter {name}")
    if n_power_iterations <= 0:
        raise LoomValueError(f"loom.nn.utils.spectral_norm: n_power_iterations must be positive, got "
                             f"{n_power_iterations}")
    if dim is None:
        from loom.nn.modules.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    weight = getattr(module, name)
    hook = _SpectralNormHook(name, n_power_iterations, dim, eps)
    with no_grad():
        mat = hook.matrix(weight)
        h, w = mat.shape
        u = normalize(randn(h, dtype=weight.dtype), dim=0, eps=eps)
        v = normalize(randn(w, dtype=weight.dtype), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach().clone())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(hook)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: `module.<name>` becomes a plain parameter holding the normalised weight."""
    for hid, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, _SpectralNormHook) and hook.name == name:
            with no_grad():
                weight = hook.compute_weight(module, False).detach().clone()
            del module._forward_pre_hooks[hid]
            del module._parameters[name + "_orig"]
            del module._buffers[name + "_u"]
            del module._buffers[name + "_v"]
            module.__dict__.pop(name, None)
            module.register_parameter(name, Parameter(weight))
            return module
    raise LoomValueError(f"loom.nn.utils.remove_spectral_norm: spectral_norm of '{name}' not found in {module}")
