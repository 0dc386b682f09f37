"""`torch._dynamo`: the few Dynamo controls scripts call (`reset`, `config.suppress_errors`, ...).

`torch.compile` runs through `loom.function`, which falls back to eager execution on
its own, so these are accepted and change nothing.
"""
from __future__ import annotations

from types import SimpleNamespace

from loom.torch.compiler import allow_in_graph, disable, is_compiling, reset  # noqa: F401

# Settings scripts assign (`torch._dynamo.config.suppress_errors = True`); any other name can be set too.
config = SimpleNamespace(suppress_errors=False, cache_size_limit=8, accumulated_cache_size_limit=256,
                         verbose=False, capture_scalar_outputs=False, automatic_dynamic_shapes=True,
                         optimize_ddp=True)


def mark_dynamic(t, index, **kwargs) -> None:
    """Accepted: loom's kernels take sizes as arguments, so every dim is dynamic already."""


maybe_mark_dynamic = mark_static = mark_dynamic


def optimize(backend="inductor", **kwargs):
    """`torch._dynamo.optimize(...)(fn)`: the same as `torch.compile(fn)`."""
    from loom.torch._compile import compile as _compile
    return lambda fn: _compile(fn)
