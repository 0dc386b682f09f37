"""`torch.compile` over `loom.function`.

A compiled function or module's forward is traced by `loom.function` into one
graph. A traced call returns values with no autograd history, so where the
eager result would carry a gradient back to a backward outside the call (a
training forward followed by `loss.backward()`), the call stays eager (still
lazy and compiled per graph by loom's runtime). A function that does its own
backward and optimizer step, or a forward under `no_grad`, is replayed traced.
If tracing fails (the function reads a computed value, say) the call falls
back to eager, as PyTorch's compiler falls back at a graph break.
"""
from __future__ import annotations

import functools
import warnings

import loom
from loom.autograd.grad_mode import is_grad_enabled
from loom.errors import LoomError
from loom.nn import Module
from loom.tensor import Tensor


def _has_grad(out) -> bool:
    if isinstance(out, Tensor):
        return out.requires_grad
    if isinstance(out, (list, tuple)):
        return any(_has_grad(o) for o in out)
    if isinstance(out, dict):
        return any(_has_grad(o) for o in out.values())
    return False


class _Compiled:
    """Call `fn` through loom.function where a traced replay gives the same results as eager."""

    def __init__(self, fn, backend: str = "c") -> None:
        self.fn = fn
        self.traced = loom.function(fn, backend=backend, warmup=0)
        self.eager_modes: set[bool] = set()  # Grad modes in which results need autograd history.
        self.failed = False
        self.probed: set[bool] = set()  # Grad modes whose first (eager) call has run.

    def __call__(self, *args, **kwargs):
        mode = is_grad_enabled()
        if self.failed or mode in self.eager_modes:
            return self.fn(*args, **kwargs)
        if mode not in self.probed:
            out = self.fn(*args, **kwargs)  # The first call in each grad mode runs eagerly and decides.
            self.probed.add(mode)
            if _has_grad(out):
                self.eager_modes.add(mode)
            return out
        try:
            return self.traced(*args, **kwargs)
        except LoomError as e:
            self.failed = True
            warnings.warn(f"loom.torch.compile: running {getattr(self.fn, '__name__', 'the function')} eagerly: "
                          f"it cannot be traced ({e})", UserWarning, stacklevel=2)
            return self.fn(*args, **kwargs)


class OptimizedModule(Module):
    """A module whose calls go through `torch.compile`; parameters, state_dict and modes are the original's.

    `_orig_mod` is the wrapped module, as in PyTorch, and state_dict keys carry
    PyTorch's "_orig_mod." prefix.
    """

    def __init__(self, mod: Module, backend: str = "c") -> None:
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled", _Compiled(mod, backend))

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    # Containers (Sequential, ModuleList) index and iterate as the original does.
    def __getitem__(self, idx):
        return self._orig_mod[idx]

    def __len__(self) -> int:
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)


def compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable: bool = False):
    """`torch.compile(model_or_fn)`: a module or function whose calls are traced and replayed by loom.function.

    The PyTorch options (backend, mode, fullgraph, dynamic) are accepted; loom's
    own compiler serves them all. Used as `@torch.compile` or
    `@torch.compile(mode=...)` too.

    Examples
    --------
    >>> import loom.torch as torch
    >>> net = torch.compile(torch.nn.Linear(2, 3))
    >>> with torch.no_grad():
    ...     ys = [net(torch.ones(4, 2)) for _ in range(3)]
    >>> ys[2].shape, sorted(dict(net.named_parameters()))
    (torch.Size([4, 3]), ['_orig_mod.bias', '_orig_mod.weight'])
    """
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if disable:
        return model
    if isinstance(model, Module):
        return OptimizedModule(model)
    if not callable(model):
        raise LoomError(f"loom.torch.compile: expected a module or a callable, got {type(model).__name__}")
    compiled = _Compiled(model)

    @functools.wraps(model)
    def run(*args, **kwargs):
        return compiled(*args, **kwargs)
    run._torchdynamo_orig_callable = model  # type: ignore[attr-defined]
    return run
