"""Eager values through the compiler: the pending subgraph is captured, compiled once per structure, run.

Every realised value behind the pending nodes becomes an input of the
captured graph, so the graph's structure does not depend on data and one
compiled executable serves every later realisation of the same structure
(an eager training loop compiles on its first iteration and replays after).

The runtime does not import the compiler: `loom.runtime.realize` calls the
function this module registers with it (`register_compiled`) when the
backend asks for compiled values.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from loom.compiler.pipeline import compile as compile_graph
from loom.compiler.remat import parse_budget
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import realize as _realize
from loom.runtime.reference import pending_order

_CACHE: dict[Any, Any] = {}
_CACHE_LIMIT = 512
stats = {"compiles": 0, "hits": 0}
_BUDGET: tuple[int, bool] | None = None  # (bytes, strict) from set_memory_budget.


def set_memory_budget(budget: int | str | None, strict: bool = False) -> None:
    """Fit every graph the compiled eager backend compiles from now on under `budget` bytes.

    The eager counterpart of ``loom.function(..., memory_budget=...)``: each
    pending subgraph realised under ``loom.set_backend("compiled")`` goes
    through the same rematerialisation pass (`loom.compiler.remat`) before
    its memory is planned; results stay bit-identical. `budget` is an int
    (bytes) or a string such as ``"256MB"``; None turns it off. A budget that
    cannot be met warns (`loom.LoomWarning`), or raises
    `loom.MemoryBudgetError` when `strict`. The reference backend has no
    arena and ignores it.

    Examples
    --------
    >>> import loom
    >>> loom.set_memory_budget("64MiB")
    >>> loom.get_memory_budget()
    67108864
    >>> loom.set_memory_budget(None)
    """
    global _BUDGET
    if budget is None:
        _BUDGET = None
        return
    _BUDGET = (parse_budget(budget, "loom.set_memory_budget"), bool(strict))


def get_memory_budget() -> int | None:
    """The eager memory budget in bytes (`set_memory_budget`), or None."""
    return _BUDGET[0] if _BUDGET is not None else None


def _attr_key(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return ("nan",)
    if hasattr(value, "name") and type(value).__name__ == "DType":
        return ("dtype", value.name)
    if isinstance(value, Graph):
        return ("graph", id(value))
    return value


def capture(targets: list[Node]) -> tuple[Any, list[Node], list[Node], list[Node]]:
    """The structural key of the pending subgraph, its order, its realised inputs and targets."""
    order = pending_order(targets)
    index: dict[int, int] = {}
    inputs: list[Node] = []
    parts: list[Any] = []
    for n in order:
        for i in n.inputs:
            if i.buffer is not None and i.id not in index:
                index[i.id] = len(index)
                inputs.append(i)
                parts.append(("in", i.dtype.name, i.shape))
        index[n.id] = len(index)
        parts.append((n.op, tuple(index[i.id] for i in n.inputs), _attr_key(n.attrs), n.dtype.name, n.shape))
    outs = [t for t in dict.fromkeys(targets) if t.buffer is None]
    parts.append(("out", tuple(index[t.id] for t in outs)))
    return tuple(parts), order, inputs, outs


def _build(order: list[Node], inputs: list[Node], outs: list[Node]) -> Graph:
    g = Graph()
    mapping: dict[int, Node] = {}
    for n in inputs:
        mapping[n.id] = g.add_input(n.shape, n.dtype)
    for n in order:
        mapping[n.id] = g.add_node(n.op, [mapping[i.id] for i in n.inputs], dict(n.attrs))
    g.outputs = [mapping[n.id] for n in outs]
    return g


def realize(targets: list[Node]) -> None:
    """Compute `targets` with the compiled executable for their pending subgraph's structure."""
    key, order, inputs, outs = capture(targets)
    if not order:
        return
    key = (key, _BUDGET)
    exe = _CACHE.get(key)
    if exe is None:
        graph = _build(order, inputs, outs)
        if _BUDGET is not None:
            graph.meta["memory_budget"] = _BUDGET
        exe = compile_graph(graph)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = exe
        stats["compiles"] += 1
    else:
        stats["hits"] += 1
    results = exe(*[np.asarray(n.buffer) for n in inputs])
    for node, value in zip(outs, results):
        node.buffer = value
        node.op, node.inputs, node.attrs, node.depth = "buffer", (), {}, 0
    # Intermediate nodes were folded into kernels; drop their inputs so history is freed,
    # and let any of them that a tensor still holds be recomputed on demand from its own inputs.


_realize.register_compiled(realize)
