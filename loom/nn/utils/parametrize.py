"""Parametrizations, as `torch.nn.utils.parametrize`: a module tensor computed from other tensors on access.

`register_parametrization(module, "weight", P)` moves the parameter to
`module.parametrizations.weight.original` (or `original0`, `original1`, ...
when `P.right_inverse` returns several tensors) and makes `module.weight` a
property that returns `P(original)`: every access recomputes it, so gradients
flow to the originals. The state_dict keys are PyTorch's.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.nn.module import Module
from loom.nn.modules.container import ModuleDict, ModuleList
from loom.nn.parameter import Parameter
from loom.tensor import Tensor

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached",
           "ParametrizationList", "type_before_parametrizations", "transfer_parametrizations_and_params"]

_cache_enabled = 0
_cache: dict = {}


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Within this context each parametrized tensor is computed once per module and name."""
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order to its original(s)."""

    def __init__(self, modules, original: Tensor, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        first = modules[0]
        with no_grad():
            new = first.right_inverse(original) if hasattr(first, "right_inverse") else original
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        req = original.requires_grad
        if self.is_tensor:
            self.original = Parameter(new.detach().clone(), requires_grad=req) if not isinstance(new, Parameter) \
                else new
        else:
            for k, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise LoomValueError("loom.nn.utils.parametrize: right_inverse must return tensors, got "
                                         f"{type(t).__name__}")
                setattr(self, f"original{k}", Parameter(t.detach().clone(), requires_grad=req))

    def right_inverse(self, value: Tensor) -> None:
        """Set the originals so that the parametrized tensor becomes `value`."""
        with no_grad():
            for m in reversed(list(self)):
                if not hasattr(m, "right_inverse"):
                    raise LoomValueError(f"loom.nn.utils.parametrize: parametrization {type(m).__name__} has no "
                                         "right_inverse, so the tensor cannot be assigned")
                value = m.right_inverse(value)
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for k, t in enumerate(value):
                    getattr(self, f"original{k}").copy_(t)

    def forward(self) -> Tensor:
        mods = list(self)
        if self.is_tensor:
            x = mods[0](self.original)
        else:
            x = mods[0](*[getattr(self, f"original{k}") for k in range(self.ntensors)])
        for m in mods[1:]:
            x = m(x)
        return x


def _make_property(name: str) -> property:
    def get(self) -> Tensor:
        plist = self.parametrizations[name]
        if _cache_enabled:
            key = (id(self), name)
            if key not in _cache:
                _cache[key] = plist()
            return _cache[key]
        return plist()

    def set_(self, value: Tensor) -> None:
        self.parametrizations[name].right_inverse(value)
    return property(get, set_)


def _inject_class(module: Module) -> None:
    """Give `module` its own subclass, so properties added to it touch no other instance."""
    cls = module.__class__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"_loom_unparametrized": cls})


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has a parametrization (on `tensor_name`, when given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if plists is None or not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module: Module) -> type:
    """The module's class as it was before any parametrization was registered."""
    return getattr(type(module), "_loom_unparametrized", type(module))


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make `module.<tensor_name>` the result of `parametrization` applied to the original tensor.

    Examples
    --------
    >>> class Symmetric(loom.nn.Module):
    ...     def forward(self, x):
    ...         return x.triu() + x.triu(1).transpose(0, 1)
    >>> m = register_parametrization(loom.nn.Linear(3, 3), "weight", Symmetric())
    >>> w = m.weight
    >>> bool((w == w.T).all())
    True
    """
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        return module
    original = getattr(module, tensor_name)
    if not isinstance(original, Tensor):
        raise LoomValueError(f"loom.nn.utils.parametrize.register_parametrization: module has no tensor "
                             f"'{tensor_name}' (found {type(original).__name__})")
    if not unsafe:
        with no_grad():
            y = parametrization(original)
        if not isinstance(y, Tensor) or tuple(y.shape) != tuple(original.shape) or y.dtype is not original.dtype:
            raise LoomValueError("loom.nn.utils.parametrize.register_parametrization: the parametrization must "
                                 f"keep the tensor's shape {list(original.shape)} and dtype {original.dtype.name}, "
                                 f"got {type(y).__name__} {list(getattr(y, 'shape', []))}")
    plist = ParametrizationList([parametrization], original, unsafe)
    if tensor_name in module._parameters:
        del module._parameters[tensor_name]
    elif tensor_name in module._buffers:
        del module._buffers[tensor_name]
    else:
        module.__dict__.pop(tensor_name, None)
    if not is_parametrized(module):
        _inject_class(module)
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    setattr(type(module), tensor_name, _make_property(tensor_name))
    return module


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo `register_parametrization` on `tensor_name`: keep the current value (or the original)."""
    if not is_parametrized(module, tensor_name):
        raise LoomValueError(f"loom.nn.utils.parametrize.remove_parametrizations: module has no parametrization "
                             f"on '{tensor_name}'")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with no_grad():
            value = plist()
        new = Parameter(value.detach().clone(), requires_grad=True)
    else:
        if not plist.is_tensor:
            raise LoomValueError("loom.nn.utils.parametrize.remove_parametrizations: leave_parametrized=False "
                                 "needs a parametrization with a single original tensor")
        new = plist.original
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    module.register_parameter(tensor_name, new)
    if not is_parametrized(module):
        del module._modules["parametrizations"]
        module.__class__ = type_before_parametrizations(module)
    return module


def transfer_parametrizations_and_params(from_module: Module, to_module: Module,
                                         tensor_name: str | None = None) -> Module:
    """Register on `to_module` the parametrizations (and originals) `from_module` has."""
    names = [tensor_name] if tensor_name is not None else list(from_module.parametrizations.keys())
    for name in names:
        plist = from_module.parametrizations[name]
        if not is_parametrized(to_module, name):
            if not hasattr(to_module, name):
                setattr(to_module, name, Parameter(getattr(from_module, name).detach().clone()))
            for m in plist:
                register_parametrization(to_module, name, m, unsafe=True)
        with no_grad():
            target = to_module.parametrizations[name]
            if plist.is_tensor:
                target.original.copy_(plist.original)
            else:
                for k in range(plist.ntensors):
                    getattr(target, f"original{k}").copy_(getattr(plist, f"original{k}"))
    return to_module
