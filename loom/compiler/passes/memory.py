"""The memory planning pass: stores `loom.compiler.memory.plan_memory`'s plan in ``graph.meta["memory"]``."""
from __future__ import annotations

from loom.compiler.memory import plan_memory
from loom.compiler.passes.registry import register_pass
from loom.ir.graph import Graph


@register_pass("memory", level=3, _builtin=True)
def memory(graph: Graph) -> Graph:
    """Plan the arena for the graph's intermediates; the plan goes to ``graph.meta["memory"]``.

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((16,), "float32")
    >>> g.outputs = [g.add_node("neg", [g.add_node("exp", [x])])]
    >>> memory(g).meta["memory"].arena_bytes
    64
    """
    graph.meta["memory"] = plan_memory(graph)
    return graph
