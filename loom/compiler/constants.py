"""What the passes know about constant nodes: which nodes are constants and their values."""
from __future__ import annotations

import math

import numpy as np

from loom.dtypes import DType
from loom.ir import ops
from loom.ir.graph import CONSTANT_OPS, Graph
from loom.ir.node import Node
from loom.runtime import reference

# Constants a pass may evaluate at compile time. ``rand`` is a source too, but folding it would
# only trade a cheap counter-based generator for a stored array.
FOLDABLE_SOURCES = frozenset({"buffer", "const", "arange"})

# Movement ops that keep every element's value: a uniform input stays uniform.
_VALUE_PRESERVING = frozenset({"reshape", "permute", "expand", "slice", "flip"})


def nbytes(node: Node) -> int:
    """Bytes of the node's value in stored form (bfloat16 is stored as uint16)."""
    return math.prod(node.shape) * node.dtype.np.itemsize


def source_value(node: Node) -> np.ndarray:
    """The stored-form value of a foldable source node."""
    if node.op == "buffer":
        return node.buffer
    return reference.evaluate(node, [])


def uniform_value(node: Node, max_elements: int = 64) -> np.ndarray | None:
    """The stored-form 0-d value of a node whose elements are all bitwise equal, if known at compile time.

    Looks through value-preserving movement ops down to a ``const`` (any size)
    or a small ``buffer`` (at most `max_elements` elements).
    """
    while node.op in _VALUE_PRESERVING:
        node = node.inputs[0]
    if node.op == "const":
        return np.asarray(ops.PRIMITIVES["const"].impl(dict(node.attrs, shape=()))).copy()
    if node.op == "buffer" and 0 < node.buffer.size <= max_elements:
        flat = np.ascontiguousarray(node.buffer).reshape(-1)
        if (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
            return flat[0:1].reshape(()).copy()
    return None


def scalar(value: np.ndarray, dtype: DType) -> bool | int | float:
    """A stored-form 0-d value as the Python scalar it means (bfloat16 bits become a float)."""
    return reference.to_compute(np.asarray(value), dtype).item()


def const_attrs(value: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> dict:
    """Attrs of a ``const`` node that reproduces the stored-form 0-d `value` bitwise (NaN payloads aside)."""
    return {"value": scalar(value, dtype), "shape": tuple(shape), "dtype": dtype}


ELEMENTWISE_KINDS = frozenset({"unary", "binary", "compare", "ternary"})


def is_elementwise(node: Node) -> bool:
    """Whether output element i of `node` reads only element i of each input (in C order).

    A fused body may reshape its inputs (a matmul's (2048, 512) result read as
    (32, 64, 512)): a reshape keeps every element's place in C order.
    """
    return all(reads_elementwise(node, k) for k in range(len(node.inputs))) if node.op == "fused" \
        else _elementwise_prim(node)


_BROADCASTS = frozenset({"reshape", "expand", "permute", "slice", "flip"})


def _elementwise_prim(node: Node) -> bool:
    prim = ops.PRIMITIVES.get(node.op)
    return prim is not None and prim.kind in ELEMENTWISE_KINDS


def reads_elementwise(node: Node, index: int) -> bool:
    """Whether `node` is elementwise in its input `index`: each output element i is computed from element i
    (in C order) of that input alone, so the result may be written over it.

    A fused body qualifies when all its compute is elementwise, that input is read as is or through
    reshapes, and other inputs through any view (a bias row broadcast over the matmul result it is added
    to).
    """
    if node.op != "fused":
        return _elementwise_prim(node)
    body = node.attrs["body"]
    donor = body.inputs[index]
    flat = {donor}            # The input's elements in their own C order (it and its reshapes).
    views: set[Node] = set()  # Other inputs, moved.
    for n in body.topological_order():
        if n.op in ("input", "const"):
            continue
        if n.op == "reshape" and n.inputs[0] in flat:
            flat.add(n)
        elif n.op in _BROADCASTS and (n.inputs[0] in views or (n.inputs[0].op == "input" and n.inputs[0] is not donor)):
            views.add(n)
        elif not _elementwise_prim(n):
            return False
    return body.outputs[0] not in flat and body.outputs[0] not in views


def reusable(graph: Graph, node: Node, index: int, outputs: set[Node] | None = None) -> bool:
    """Whether `node` may write its result over input `index` (see the module docstring)."""
    outputs = set(graph.outputs) if outputs is None else outputs
    if node not in graph or node in outputs or not isinstance(index, int) or not 0 <= index < len(node.inputs):
        return False
    if not reads_elementwise(node, index):
        return False
    donor = node.inputs[index]
    return (donor.op != "input" and donor.op not in CONSTANT_OPS and donor not in outputs
            and graph.consumers(donor) == [node] and nbytes(donor) == nbytes(node) and nbytes(node) > 0)
