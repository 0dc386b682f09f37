"""Constant folding: compute at compile time every node whose inputs are all constants.

The value comes from the reference interpreter, so a folded graph computes
what the original did. A result whose elements are all equal becomes a
``const`` node (free, whatever its size); any other result becomes a
``buffer`` node if it is at most `MAX_FOLD_BYTES`. Nodes depending on
``rand`` are left alone, so are collectives (they talk to the other ranks
at run time), and so is a node whose evaluation raises (integer
division by zero, an index out of range): that error belongs to run time.
"""
from __future__ import annotations

import numpy as np

from loom.compiler.constants import FOLDABLE_SOURCES, const_attrs, nbytes, source_value, uniform_value
from loom.compiler.passes.registry import register_pass
from loom.compiler.passes.prune import drop_unused, keep_walk_order
from loom.errors import LoomError
from loom.ir import collective, ops
from loom.ir.graph import Graph, _frozen
from loom.ir.node import Node
from loom.runtime import reference

MAX_FOLD_BYTES = 1 << 20  # Largest non-uniform result stored as a buffer constant.

_ELEMENTWISE = frozenset({"unary", "binary", "compare", "ternary"})
_SHAPE_ONLY = frozenset({"reshape", "permute", "expand", "slice", "flip"})


def _scalar_node(node: Node) -> Node:
    """A 0-d stand-in for `node` to evaluate it on one element of uniform inputs."""
    return Node(node.op, tuple(Node("const", (), {}, (), i.dtype) for i in node.inputs), node.attrs,
                (), node.dtype)


def _fold_uniform(node: Node) -> np.ndarray | None:
    """The 0-d stored value of an elementwise or shape-only node of uniform constants, or None."""
    kind = ops.PRIMITIVES[node.op].kind
    if kind not in _ELEMENTWISE and node.op not in _SHAPE_ONLY:
        return None
    values = []
    for i in node.inputs:
        v = uniform_value(i)
        if v is None:
            return None
        values.append(v)
    if node.op in _SHAPE_ONLY:
        return values[0]
    return reference.evaluate(_scalar_node(node), values)


def _uniform_result(array: np.ndarray) -> np.ndarray | None:
    if array.size <= 1:
        return None
    flat = np.ascontiguousarray(array).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    return flat[0:1].reshape(()).copy() if (raw == raw[:1]).all() else None


def fold(graph: Graph, max_bytes: int = MAX_FOLD_BYTES) -> Graph:
    """Replace constant subexpressions by their values (see the module docstring).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> two = g.add_constant(2.0, "float32", shape=(3,))
    >>> g.outputs = [g.add_node("mul", [x, g.add_node("exp", [two])])]
    >>> [n.op for n in fold(g)]
    ['input', 'const', 'mul']
    """
    values: dict[Node, np.ndarray] = {}  # Values computed so far (stored form).

    def value(n: Node) -> np.ndarray:
        if n not in values:
            values[n] = source_value(n)
        return values[n]

    before = list(graph._nodes)
    order = graph.topological_order()
    made: list[Node] = []
    with np.errstate(all="ignore"):
        for node in order:
            if not node.inputs or not all(i.op in FOLDABLE_SOURCES for i in node.inputs) or \
                    ops.PRIMITIVES[node.op].kind == collective.KIND:
                continue
            try:
                uniform = _fold_uniform(node)
                if uniform is None:
                    if nbytes(node) > max_bytes or any(
                            i.op == "arange" and nbytes(i) > max_bytes for i in node.inputs):
                        continue
                    array = reference.evaluate(node, [value(i) for i in node.inputs])
                    uniform = _uniform_result(array)
            except (LoomError, ArithmeticError, ValueError, IndexError):
                continue  # The error is the program's behaviour: it happens at run time.
            if uniform is not None and node.dtype.category == 3:
                # A const attr holds a real number: a uniform complex value stays a buffer.
                array, uniform = np.broadcast_to(uniform, tuple(node.shape)), None
            if uniform is not None:
                new = graph.add_node("const", [], const_attrs(uniform, node.dtype, tuple(node.shape)),
                                     name=node.name)
            else:
                new = graph._add_buffer(_frozen(array), node.dtype, node.name, node.device)
                values[new] = new.buffer
            graph.replace(node, new)
            drop_unused(graph, [node])
            made.append(new)
    if made:
        keep_walk_order(graph, before, made)
    return graph


register_pass("fold", level=1, _builtin=True)(fold)

__all__ = ["fold", "MAX_FOLD_BYTES"]
