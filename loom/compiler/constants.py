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
    if node.op == "fused":
        body = node.attrs["body"]
        reshaped: set[Node] = set()
        for n in body.topological_order():
            if n.op in ("input", "const"):
                continue
            if n.op == "reshape" and (n.inputs[0].op == "input" or n.inputs[0] in reshaped):
                reshaped.add(n)
            elif ops.PRIMITIVES[n.op].kind not in ELEMENTWISE_KINDS:
                return False
        return body.outputs[0] not in reshaped
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
