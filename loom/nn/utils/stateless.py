"""Call a module with other tensors in place of its parameters and buffers (`functional_call`)."""
from __future__ import annotations

from typing import Any

from loom.errors import LoomValueError
from loom.nn.module import Module

__all__ = ["functional_call"]


def _owner(module: Module, name: str) -> tuple[Module, str]:
    *path, leaf = name.split(".")
    for p in path:
        module = getattr(module, p)
    return module, leaf


def functional_call(module: Module, parameters_and_buffers: dict | tuple, args: Any = None,
                    kwargs: dict | None = None, *, tie_weights: bool = True, strict: bool = False) -> Any:
    """Run `module(*args, **kwargs)` with the named tensors standing in for its parameters and buffers.

    Gradients flow to the given tensors; the module's own are restored afterwards.

    Examples
    --------
    >>> lin = loom.nn.Linear(2, 1)
    >>> w = {"weight": loom.ones(1, 2), "bias": loom.zeros(1)}
    >>> loom.nn.utils.stateless.functional_call(lin, w, (loom.tensor([[1.0, 2.0]]),)).tolist()
    [[3.0]]
    """
    if isinstance(parameters_and_buffers, (tuple, list)):
        merged: dict = {}
        for d in parameters_and_buffers:
            for k, v in d.items():
                if k in merged:
                    raise LoomValueError(f"loom.nn.utils.stateless.functional_call: {k!r} appears in more than one "
                                         "dictionary")
                merged[k] = v
        parameters_and_buffers = merged
    if strict:
        names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing = sorted(names - set(parameters_and_buffers))
        unexpected = sorted(set(parameters_and_buffers) - names)
        if missing or unexpected:
            raise LoomValueError(f"loom.nn.utils.stateless.functional_call: missing keys {missing}, unexpected keys "
                                 f"{unexpected}")
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    saved = []
    try:
        for name, value in parameters_and_buffers.items():
            owner, leaf = _owner(module, name)
            for store in ("_parameters", "_buffers"):
                d = owner.__dict__[store]
                if leaf in d:
                    saved.append((d, leaf, d[leaf]))
                    d[leaf] = value
                    break
            else:
                raise LoomValueError(f"loom.nn.utils.stateless.functional_call: the module has no parameter or "
                                     f"buffer named {name!r}")
        return module(*args, **(kwargs or {}))
    finally:
        for d, leaf, old in reversed(saved):
            d[leaf] = old
