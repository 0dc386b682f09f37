"""In-place reuse: let an elementwise node write its result over an input nobody else needs.

The marks live in ``graph.meta["inplace"] = {node: input_index}``: the memory
planner gives `node` the slot of ``node.inputs[input_index]`` and the executor
writes the result there. A mark is legal when

- `node` is elementwise in that input (a unary/binary/compare/ternary
  primitive, or a ``fused`` node whose body computes elementwise only and
  reads that input as is or reshaped, its other inputs through any view, such
  as a bias row broadcast over a matmul result; see
  `loom.compiler.constants.reads_elementwise`), so output element i depends
  on element i of that input alone and overwriting it is safe;
- `node` is not a graph output (outputs get their own arrays);
- the input is an intermediate (not a placeholder, constant or output), `node`
  is its only consumer, and both have the same number of bytes.

Each input slot is handed on at most once, so reuse chains stay linear.
"""
from __future__ import annotations

from loom.compiler.constants import ELEMENTWISE_KINDS, is_elementwise, reusable  # noqa: F401
from loom.compiler.passes.registry import register_pass
from loom.ir.graph import Graph
from loom.ir.node import Node

@register_pass("inplace", level=2, _builtin=True)
def inplace(graph: Graph) -> Graph:
    """Mark each elementwise node that can overwrite one of its inputs (``graph.meta["inplace"]``).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((4,), "float32")
    >>> e = g.add_node("exp", [x])
    >>> n = g.add_node("neg", [e])
    >>> g.outputs = [g.add_node("sum", [n], {"axes": (0,), "keepdim": False})]
    >>> inplace(g).meta["inplace"] == {n: 0}
    True
    """
    outputs = set(graph.outputs)
    marks: dict[Node, int] = {}
    for node in graph.topological_order():
        for k in range(len(node.inputs)):
            if reusable(graph, node, k, outputs):
                marks[node] = k
                break
    graph.meta["inplace"] = marks
    return graph
