"""In-place reuse: let an elementwise node write its result over an input nobody else needs.

The marks live in ``graph.meta["inplace"] = {node: input_index}``: the memory
planner gives `node` the slot of ``node.inputs[input_index]`` and the executor
writes the result there. A mark is legal when

- `node` is elementwise (a unary/binary/compare/ternary primitive, or a
  ``fused`` node whose body is elementwise only), so output element i depends
  on input element i alone and overwriting it is safe;
- `node` is not a graph output (outputs get their own arrays);
- the input is an intermediate (not a placeholder, constant or output), `node`
  is its only consumer, and both have the same number of bytes.

Each input slot is handed on at most once, so reuse chains stay linear.
"""
from __future__ import annotations

from loom.compiler.constants import nbytes
from loom.compiler.passes import register_pass
from loom.ir import ops
from loom.ir.graph import CONSTANT_OPS, Graph
from loom.ir.node import Node

ELEMENTWISE_KINDS = frozenset({"unary", "binary", "compare", "ternary"})


def is_elementwise(node: Node) -> bool:
    """Whether output element i of `node` reads only element i of each input."""
    if node.op == "fused":
        body = node.attrs["body"]
        return all(n.op in ("input", "const") or ops.PRIMITIVES[n.op].kind in ELEMENTWISE_KINDS
                   for n in body.topological_order())
    prim = ops.PRIMITIVES.get(node.op)
    return prim is not None and prim.kind in ELEMENTWISE_KINDS


def reusable(graph: Graph, node: Node, index: int, outputs: set[Node] | None = None) -> bool:
    """Whether `node` may write its result over input `index` (see the module docstring)."""
    outputs = set(graph.outputs) if outputs is None else outputs
    if node not in graph or node in outputs or not is_elementwise(node):
        return False
    if not isinstance(index, int) or not 0 <= index < len(node.inputs):
        return False
    donor = node.inputs[index]
    return (donor.op != "input" and donor.op not in CONSTANT_OPS and donor not in outputs
            and graph.consumers(donor) == [node] and nbytes(donor) == nbytes(node) and nbytes(node) > 0)


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
