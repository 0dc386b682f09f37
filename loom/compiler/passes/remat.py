"""The rematerialisation pass: fits the graph under ``graph.meta["memory_budget"]`` (see `loom.compiler.remat`)."""
from __future__ import annotations

from loom.compiler.passes.registry import register_pass
from loom.compiler.memory import plan_memory
from loom.compiler.remat import DEFAULT_OFFLOAD, _reschedule, rematerialize
from loom.ir.graph import Graph


@register_pass("remat", _builtin=True)
def remat(graph: Graph) -> Graph:
    """Recompute activations instead of keeping them, until the planned arena fits the memory budget.

    Runs only when asked (``loom.function(..., memory_budget=...)`` puts it
    before ``memory``, and so does a trace with ``loom.utils.checkpoint``
    segments, whose recomputation it schedules early without a budget); the budget is ``graph.meta["memory_budget"]`` as
    ``(bytes, strict)``, the disk tier setting ``graph.meta["offload"]``
    (``"auto"``, `DEFAULT_OFFLOAD`, when absent) and the outcome goes to ``graph.meta["remat"]``.

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((1024,), "float32")
    >>> a = g.add_node("exp", [x])
    >>> b = g.add_node("exp", [g.add_node("neg", [a])])
    >>> g.outputs = [g.add_node("mul", [g.add_node("exp", [g.add_node("neg", [b])]), a])]
    >>> g.meta["memory_budget"] = (8192, False)
    >>> remat(g).meta["remat"].values
    1
    """
    budget = graph.meta.get("memory_budget")
    if budget is None:
        if graph.meta.get("recompute"):
            # Manual checkpoints (`loom.utils.checkpoint`) without a budget: a recomputed activation dies only
            # once its weight gradient has run, which the traced backward leaves to the optimizer; run such
            # work as soon as it can, unless that plans a larger arena.
            moved = graph.copy()
            if _reschedule(moved) and plan_memory(moved).arena_bytes <= plan_memory(graph).arena_bytes:
                return moved
        return graph
    nbytes, strict = budget
    graph, report = rematerialize(graph, nbytes, strict, graph.meta.get("offload") or DEFAULT_OFFLOAD)
    graph.meta["remat"] = report
    return graph
