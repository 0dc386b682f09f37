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


def save(m, f, *args, **kwargs) -> None:
    """Save a scripted or traced module (here the module itself) for `torch.jit.load`.

    The file is loom's pickle of the whole module, not a TorchScript archive:
    it loads back in loom, where the module's class can be imported.

    Examples
    --------
    >>> import io
    >>> import loom.torch as torch
    >>> buf = io.BytesIO()
    >>> torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), buf)
    >>> _ = buf.seek(0)
    >>> torch.jit.load(buf).out_features
    3
    """
    from loom.io import torch_save as _save
    _save(m, f)


def load(f, map_location=None, *args, **kwargs):
    """Load what `torch.jit.save` wrote: the module, ready to call."""
    from loom.io import torch_load as _load
    try:
        return _load(f, map_location=map_location, weights_only=False)
    except LoomError as e:
        raise LoomError(f"loom.torch.jit.load: {f!r} is not a module saved by loom's torch.jit.save (TorchScript "
                        f"archives written by PyTorch are not supported): {e}") from e


class Final:
    """`torch.jit.Final[int]` annotations: accepted and ignored."""

    def __class_getitem__(cls, item):
        return item
