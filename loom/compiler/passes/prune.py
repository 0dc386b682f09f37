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


def keep_walk_order(graph: Graph, before: list[Node], made: list[Node]) -> bool:
    """Store the order `graph.topological_order()` would now walk to as the graph's node order, so the next
    pass takes it without the walk (milliseconds on a training step's graph).

    `before`: the graph's node order when the pass began; `made`: the nodes it added, in order. When the
    nodes of `before` still in the graph read only nodes before them or added ones, the walk gives them in
    that order, each added node (after the added nodes it reads) just before its first reader, then the
    added nodes nothing reads; that is what is stored (True). Otherwise the order is left as it is (False).
    """
    nodes = graph._nodes
    fresh = {n for n in made if n in nodes}
    out: list[Node] = []
    placed: set[Node] = set()

    def place(node: Node) -> bool:  # Added nodes, inputs first (the walk's post-order); False: not as assumed.
        placed.add(node)
        stack = [(node, iter(node.inputs))]
        while stack:
            n, pending = stack[-1]
            for i in pending:
                if i not in placed:
                    if i not in fresh:
                        return False
                    placed.add(i)
                    stack.append((i, iter(i.inputs)))
                    break
            else:
                stack.pop()
                out.append(n)
        return True

    for n in before:
        if n not in nodes or n in fresh:
            continue
        for i in n.inputs:
            if i not in placed and (i not in fresh or not place(i)):
                return False
        placed.add(n)
        out.append(n)
    for n in made:
        if n in fresh and n not in placed and not place(n):
            return False
    if len(out) != len(nodes):
        return False
    graph._nodes = dict.fromkeys(out)
    return True


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
