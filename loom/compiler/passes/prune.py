"""Dead-node pruning: drop every node the graph's outputs do not need."""
from __future__ import annotations

from loom.compiler.passes.registry import register_pass
from loom.ir.graph import Graph
from loom.ir.node import Node


def live_nodes(graph: Graph) -> set[Node]:
    """The nodes the outputs depend on (outputs included)."""
    live: set[Node] = set()
    stack = list(graph.outputs)
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(i for i in n.inputs if i not in live)
    return live


@register_pass("prune", level=1, _builtin=True)
def prune(graph: Graph) -> Graph:
    """Remove the nodes no output depends on; placeholders stay (they are the graph's signature).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> unused = g.add_node("exp", [x])
    >>> g.outputs = [g.add_node("neg", [x])]
    >>> [n.op for n in prune(g)]
    ['input', 'neg']
    """
    live = live_nodes(graph)
    dead = [n for n in graph.topological_order() if n not in live and n.op != "input"]
    if dead:
        graph.remove_subgraph(dead)
    return graph


def drop_unused(graph: Graph, nodes) -> None:
    """Remove `nodes` that nothing consumes and no output names, then inputs of theirs left unused.

    Rewriting passes call this on the nodes they replaced, so they leave no
    garbage behind without pruning nodes that were dead before they ran.
    """
    stack = list(nodes)
    if not stack:
        return
    outputs = set(graph.outputs)
    users = graph._users  # Read only (consumers() copies).
    while stack:
        n = stack.pop()
        if n not in graph or n.op == "input" or n in outputs or users[n]:
            continue
        ins = n.inputs
        graph.remove_node(n)
        stack.extend(ins)
