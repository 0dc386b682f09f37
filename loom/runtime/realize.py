"""Where pending nodes get computed: the backend switch and the guard of `loom.function` traces.

Two kinds of requests reach here. A *value* request (`.numpy()`, `.item()`,
printing, `bool()`) needs numbers now; inside a trace it is an error, since a
traced function must not branch on data it has not computed yet. A *barrier*
(`loom.realize`, `loom.synchronize`, the lazy depth limit) only says "now is a
good time"; inside a trace it is skipped for traced nodes.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator

from loom.errors import LoomError
from loom.ir.node import Node
from loom.runtime import dtr, reference

# The trace in progress (set by loom.function while it traces), or None.
active_trace = None

_BACKENDS = ("tiered", "auto", "reference", "compiled")
_backend = os.environ.get("LOOM_BACKEND", "reference")
# With the "auto" backend, pending graphs of at least this many nodes (a training step's forward,
# backward and update) go through the compiler; smaller ones (one-off ops) run on the reference path,
# where compiling would cost more than it saves.
AUTO_MIN_NODES = int(os.environ.get("LOOM_AUTO_MIN_NODES", "48") or 48)
if _backend not in _BACKENDS:
    raise LoomError(f"loom: LOOM_BACKEND={_backend!r} is not one of {_BACKENDS}")


def get_backend() -> str:
    """How eager values are computed now: ``'tiered'``, ``'auto'``, ``'reference'`` or ``'compiled'``
    (see `set_backend`)."""
    return _backend


def set_backend(name: str) -> None:
    """Choose how eager values are computed.

    'reference' (the default, or ``LOOM_BACKEND``) evaluates node by node
    with NumPy. 'tiered' evaluates node by node with
    NumPy until a pending graph's structure has been seen ``TIER_AFTER``
    times; then its plan is compiled in a background thread (the steps keep
    running on the reference path meanwhile) and later occurrences replay the
    compiled plan once it is ready and has reproduced a reference occurrence's
    outputs bit for bit (`loom.compiler.eager.realize_tiered`; a plan that
    does not is dropped), so 'tiered' gives the reference path's bits.
    'compiled' sends every pending graph through the compiler (passes, fused C
    kernels, a plan cached by the graph's structure, so a repeated training
    step compiles once) and waits for it; 'auto' compiles graphs of at least ``AUTO_MIN_NODES`` nodes
    and runs smaller ones on the reference path. 'auto' and 'compiled' give
    the reference path's results within float rounding (exact ops bit for bit; transcendental
    functions and reordered float sums within the parity suite's tolerance).

    Examples
    --------
    >>> import loom
    >>> with loom.backend("reference"):       # set_backend without the block
    ...     loom.get_backend()
    'reference'
    """
    global _backend
    if name not in _BACKENDS:
        raise LoomError(f"loom.set_backend: unknown backend {name!r}; expected one of {_BACKENDS}")
    _backend = name


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Compute eager values with `name` inside the block."""
    prev = _backend
    set_backend(name)
    try:
        yield
    finally:
        set_backend(prev)


# How the compiled backends compute pending nodes. The compiler registers them (`loom.compiler.eager`)
# when `import loom` loads it; the runtime never imports the compiler.
_compiled_realize = None
_tiered_realize = None


def register_compiled(fn, tiered=None) -> None:
    """Make `fn(nodes)` compute pending nodes for the 'compiled' and 'auto' backends, and `tiered(nodes)`
    for the 'tiered' one (the compiler calls this)."""
    global _compiled_realize, _tiered_realize
    _compiled_realize = fn
    if tiered is not None:
        _tiered_realize = tiered


def _run(nodes: list[Node]) -> None:
    if not nodes:
        return
    if _backend == "tiered":
        if _tiered_realize is not None and active_trace is None and dtr.ACTIVE is None:
            _tiered_realize(nodes)
        else:
            reference.realize(nodes)
    elif _compiled_realize is not None and (_backend == "compiled" or (_backend == "auto" and _large(nodes))):
        _compiled_realize(nodes)
    else:
        reference.realize(nodes)


def _large(nodes: list[Node]) -> bool:
    """Whether the pending graph behind `nodes` has at least AUTO_MIN_NODES nodes (counting stops there)."""
    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n.buffer is not None or n.id in seen:
            continue
        seen.add(n.id)
        if len(seen) >= AUTO_MIN_NODES:
            return True
        stack.extend(n.inputs)
    return False


def realize_value(nodes: Iterable[Node]) -> None:
    """Compute `nodes` because their values are needed now."""
    nodes = [n for n in nodes if n.buffer is None]
    if active_trace is not None:
        traced = [n for n in nodes if n.id >= active_trace.start_id and not _constant(n)]
        if traced:
            raise LoomError(
                "loom.function: a traced function read the value of a tensor it computed "
                f"({traced[0].dtype.name}{list(traced[0].shape)}, op {traced[0].op}); a trace cannot "
                "depend on data it has not computed yet. Return the tensor instead, or use "
                "loom.cond / loom.while_loop for data-dependent control flow")
    _run(nodes)


def _constant(node: Node) -> bool:
    """Whether a traced node is computed from constants made inside the trace only (safe to fold)."""
    for n in reference.pending_order([node]):
        if n.op in ("input", "rand"):
            return False
        for i in n.inputs:
            if i.buffer is not None and i.id < active_trace.start_id:
                return False  # State from outside the trace: its value may change between calls.
    return True


def realize_barrier(nodes: Iterable[Node]) -> None:
    """Compute `nodes` now if that is allowed (outside traces, or work from before the trace)."""
    nodes = [n for n in nodes if n.buffer is None]
    if active_trace is not None:
        nodes = [n for n in nodes if n.id < active_trace.start_id]
    _run(nodes)
