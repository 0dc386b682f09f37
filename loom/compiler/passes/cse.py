"""Common-subexpression elimination: one node per distinct computation.

Two nodes merge when they apply the same op to the same inputs with equal
attrs (compared exactly: ``0.0`` and ``-0.0`` differ, NaN equals NaN); the
inputs of commutative ops are compared as a set. Constants merge when their
values are bitwise equal. ``rand`` nodes merge only when every attr, the seed
included, is equal, since they then produce the same values. Collectives
(``send``, ``recv``, ``all_reduce``, ...) never merge: each one is a message
exchange that the other ranks wait for.

Nodes a checkpointed segment's backward recomputes (``graph.meta["recompute"]``,
node -> recomputation number, set by `loom.function` for
`loom.utils.checkpoint`) merge only with nodes of the same recomputation:
merged with their forward twins, the recomputation would vanish and the
segment's activations would stay alive until the backward.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any, Hashable

import numpy as np

from loom.compiler.passes.registry import register_pass
from loom.compiler.passes.prune import drop_unused
from loom.dtypes import DType
from loom.ir import collective
from loom.ir.graph import Graph
from loom.ir.node import Node

# Ops whose result does not depend on the order of their two inputs (bitwise, NaN payloads aside).
COMMUTATIVE = frozenset({"add", "mul", "eq", "ne", "and", "or", "xor"})
_COLLECTIVES = frozenset(collective.OPS)


def attr_key(value: Any) -> Hashable:
    """A hashable key equal for two attr values exactly when they mean the same thing."""
    kind = type(value)
    if kind is int:
        return ("i", value)
    if kind is tuple and all(type(v) is int for v in value):
        return ("ti", value)  # Shapes, axes, permutations: ints compare exactly as they are.
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        return ("f", "nan" if value != value else struct.pack("<d", value))  # Keeps -0.0 apart.
    if isinstance(value, (tuple, list)):
        return ("t",) + tuple(attr_key(v) for v in value)
    if isinstance(value, DType):
        return ("d", value.name)
    if value is None or isinstance(value, str):
        return ("s", value)
    return ("o", id(value))  # Graph bodies and other objects: equal only to themselves.


def node_key(node: Node, position: dict[Node, int]) -> Hashable:
    """What makes two nodes compute the same value."""
    ins = node.inputs
    if node.op in COMMUTATIVE:
        ins = tuple(sorted(ins, key=position.__getitem__))
    attrs = tuple(sorted([(k, attr_key(v)) for k, v in node.attrs.items()])) if node.attrs else ()
    return node.op, ins, attrs, tuple(node.shape), node.dtype.name, node.device


def _buffer_key(node: Node) -> Hashable:
    digest = hashlib.blake2b(np.ascontiguousarray(node.buffer).tobytes(), digest_size=16).digest()
    return "buffer", tuple(node.shape), node.dtype.name, node.device, digest


@register_pass("cse", level=1, _builtin=True)
def cse(graph: Graph) -> Graph:
    """Merge nodes that compute the same value; the first one (in topological order) stays.

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), "float32")
    >>> a, b = g.add_node("exp", [x]), g.add_node("exp", [x])
    >>> g.outputs = [g.add_node("add", [a, b])]
    >>> [n.op for n in cse(g)]
    ['input', 'exp', 'add']
    """
    order = graph.topological_order()
    position = {n: k for k, n in enumerate(order)}
    recompute: dict[Node, int] = graph.meta.get("recompute") or {}
    seen: dict[Hashable, Node] = {}
    replaced: list[Node] = []
    for node in order:
        if node.op == "input" or node.op in _COLLECTIVES:
            continue
        key = _buffer_key(node) if node.op == "buffer" else node_key(node, position)
        if recompute and node.op != "buffer":
            key = (key, recompute.get(node, 0))
        first = seen.get(key)
        if first is None:
            seen[key] = node
        elif node.op != "buffer" or np.ascontiguousarray(first.buffer).tobytes() == \
                np.ascontiguousarray(node.buffer).tobytes():
            graph.replace(node, first, check_cycles=False)  # first precedes node in topological order.
            replaced.append(node)
    # Once, at the end: a replaced node's inputs are its first's too, so the removals change no later key.
    drop_unused(graph, replaced)
    return graph
