"""`torch.compiler`: PyTorch's controls of `torch.compile`, for the `loom.function` tracing behind it.

loom has no Dynamo: `torch.compile` traces with `loom.function` (loom.torch._compile), so
`reset` has no cache of its own to drop, `disable` leaves a function eager, and
`is_compiling` says whether a trace is running.

Examples
--------
>>> import loom.torch as torch
>>> torch.compiler.is_compiling()
False
>>> torch.compiler.disable(lambda x: x + 1)(1)
2
"""
from __future__ import annotations

from loom.runtime import realize as _realize


def reset() -> None:
    """Nothing to drop: each `torch.compile` result keeps its own traces."""


def is_compiling() -> bool:
    """True while a compiled function is being traced."""
    return _realize.active_trace is not None


is_dynamo_compiling = is_compiling


def disable(fn=None, recursive: bool = True, *, reason: str | None = None):
    """`fn` unchanged (as a decorator, with or without arguments): it runs as Python."""
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    """`fn` unchanged: loom.function traces through any Python function."""
    return fn


def assume_constant_result(fn):
    """`fn` unchanged: loom.function records what `fn` computes on each trace."""
    return fn


def cudagraph_mark_step_begin() -> None:
    """No CUDA graphs on the cpu."""
