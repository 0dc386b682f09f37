"""`torch.jit`: TorchScript is PyTorch's own compiler; here `script` and `trace` return what they are given
(loom traces with `loom.function`, which `torch.compile` maps to), and the decorators are identities."""
from __future__ import annotations

from loom.errors import LoomError


def script(obj, *args, **kwargs):
    """`obj` unchanged: it runs as Python (use torch.compile / loom.function to compile it)."""
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    """`func` unchanged: it runs as Python (use torch.compile / loom.function to compile it)."""
    return func


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


def ignore(drop=False, **kwargs):
    return drop if callable(drop) else (lambda fn: fn)


def unused(fn):
    return fn


def export(fn):
    return fn


def interface(obj):
    return obj


def save(m, f, *args, **kwargs):
    raise LoomError("loom.torch.jit.save: TorchScript archives are not supported; use torch.save(model.state_dict())")


def load(f, *args, **kwargs):
    raise LoomError("loom.torch.jit.load: TorchScript archives are not supported; load a state_dict with torch.load")


class Final:
    """`torch.jit.Final[int]` annotations: accepted and ignored."""

    def __class_getitem__(cls, item):
        return item
