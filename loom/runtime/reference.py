"""The NumPy reference interpreter: the semantics every other backend must match."""
from __future__ import annotations

import math
import sys
import weakref
from typing import Iterable

import numpy as np

from loom import dtypes as dt
from loom.ir.node import Node
from loom import profiler as _profiler
from loom.ir.ops import PRIMITIVES
from loom.runtime import dtr, threads

_UPCAST = (dt.bfloat16, dt.float16)

# Arrays whose memory the user also holds (`loom.from_numpy`): NumPy writes and
# loom's in-place ops change them, so no other value may be a view of them.
_EXTERNAL: dict[int, weakref.ref] = {}


def share_external(array: np.ndarray) -> None:
    """Record that `array` is user-visible memory that may change under loom."""
    key = id(array)
    if key not in _EXTERNAL:
        def forget(_ref: weakref.ref, key: int = key) -> None:
            _EXTERNAL.pop(key, None)
        _EXTERNAL[key] = weakref.ref(array, forget)


def _views_external(out: np.ndarray, inputs: list[np.ndarray], windows: dict = {}) -> bool:  # noqa: B006
    """Whether `out` is a view of user memory, directly or through a view made earlier (`windows`)."""
    return out.base is not None and any(
        (id(a) in _EXTERNAL or id(a) in windows) and np.may_share_memory(out, a) for a in inputs)


def _settle_windows(windows: dict) -> None:
    """Copy the values in `windows` (views of user memory) that something still holds: a value, not a
    window onto memory that may change. Intermediates that views were read by and then freed cost no copy
    (the transposed input of a weight gradient, a full-graph feature matrix: tens of megabytes a step)."""
    global window_copies
    for ref in windows.values():
        node = ref()
        if node is not None and node.op == "buffer" and node.buffer is not None and node.buffer.base is not None:
            node.buffer = node.buffer.copy()
            window_copies += 1


window_copies = 0  # How many views of user memory were copied because something held them (for tests).


def pending_order(targets: Iterable[Node]) -> list[Node]:
    """Unrealised ancestors of `targets` in topological order (iterative, no recursion limit)."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in targets:
        if root.buffer is not None or root.id in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node.id in seen or node.buffer is not None:
                continue
            seen.add(node.id)
            stack.append((node, True))
            for i in node.inputs:
                if i.buffer is None and i.id not in seen:
                    stack.append((i, False))
    return order


def to_compute(a: np.ndarray, d: dt.DType) -> np.ndarray:
    """Half-precision values compute in float32, as PyTorch's CPU kernels do."""
    if d is dt.bfloat16:
        return dt.bf16_to_f32(a)
    if d is dt.float16:
        return a.astype(np.float32)
    return a


def from_compute(a: np.ndarray, d: dt.DType) -> np.ndarray:
    if d is dt.bfloat16:
        return dt.f32_to_bf16(np.asarray(a, np.float32))
    if a.dtype != d.np:
        return np.asarray(a).astype(d.np)
    return a


def cast(a: np.ndarray, src: dt.DType, dst: dt.DType) -> np.ndarray:
    a = to_compute(a, src)
    if src.category == 3 and dst.category < 3:
        # Complex to real keeps the real part (as PyTorch); to bool asks whether either part is nonzero.
        a = a != 0 if dst is dt.bool_ else a.real
    if dst is dt.bfloat16:
        return dt.f32_to_bf16(a.astype(np.float32))
    if dst.category == 1 and src.category >= 2:
        a = np.trunc(a)  # Float to int truncates toward zero, as in C and PyTorch.
    return a.astype(dst.np)


def evaluate(node: Node, arrays: list[np.ndarray]) -> np.ndarray:
    """Run one primitive on NumPy inputs, returning an array of the node's dtype and shape."""
    op = node.op
    prim = PRIMITIVES[op]
    if op == "cast":
        out = cast(arrays[0], node.inputs[0].dtype, node.dtype)
    elif prim.kind == "source":
        out = prim.impl(node.attrs)
    else:
        if op == "matmul":
            threads.prepare_blas(math.prod(node.shape) * int(node.inputs[0].shape[-1]))
        for i in node.inputs:
            if i.dtype in _UPCAST:
                arrays = [to_compute(a, i.dtype) for a, i in zip(arrays, node.inputs)]
                break
        out = prim.impl(*arrays, node.attrs)
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        d = node.dtype
        if d is dt.bfloat16 or out.dtype != d.np:
            out = from_compute(out, d)
    if out.shape != node.shape and out.shape != tuple(node.shape):  # A broken rule must never pass silently.
        raise AssertionError(f"loom internal: {op} produced {out.shape}, inferred {node.shape}")
    return out


def realize(targets: Iterable[Node], order: list[Node] | None = None) -> None:
    """Compute every pending node behind `targets`, turning each into a buffer node.

    `order`: their `pending_order`, when the caller has it already (this function empties the list as
    it goes, so that each intermediate is freed after its last use)."""
    if order is None:
        order = pending_order(targets)
    flipped = _transposed_products(order)
    pool = dtr.ACTIVE
    if pool is not None:
        pool.begin()
    # Values computed here as views of user memory, by id of the array: copied when the graph is done if
    # something still holds them (under a memory budget, at once: its recipes may keep any value).
    windows: dict[int, weakref.ref] = {}
    try:
        _run_order(order, flipped, pool, windows)
    finally:
        if windows:
            _settle_windows(windows)


def _run_order(order: list, flipped: set[int], pool, windows: dict) -> None:
    with np.errstate(all="ignore"):
        for k in range(len(order)):
            # The order list lets go of each node as it is computed, and a computed node lets go of
            # its inputs: an intermediate that no tensor holds is freed after its last use, as
            # PyTorch frees it, instead of living until the whole pending graph is done.
            node = order[k]
            order[k] = None
            if pool is not None:
                if node.buffer is not None:
                    continue  # Computed already, as an input of a value the memory budget evicted.
                pool.before(node)
                evicted = [i for i in node.inputs if i.buffer is None]
                if evicted:
                    realize(evicted)  # Read after the budget evicted them: computed again (same bits).
                    del evicted
                recipe = (node.op, node.inputs, node.attrs, node.depth)
                t_start = dtr.timer()
            arrays = [i.buffer for i in node.inputs]
            # Under a memory budget a recipe may read an input again later: never write over one.
            ufunc = _IN_PLACE.get(node.op) if pool is None else None
            if flipped and node.id in flipped and (pool is None or not pool.known(node)):
                ufunc = _TRANSPOSED_MATMUL
            if _profiler.ACTIVE is not None:
                t0 = _profiler.now_us()
                out = _compute(node, arrays, ufunc)
                _profiler.record(node.op, "op", t0, _profiler.now_us(), shape=tuple(node.shape))
            else:
                out = _compute(node, arrays, ufunc)
            if _EXTERNAL and _views_external(out, arrays, windows):
                if pool is not None:
                    out = out.copy()  # A value, not a window onto memory that may change.
                else:
                    windows[id(out)] = weakref.ref(node)
            del arrays
            node.buffer = out
            node.op, node.inputs, node.attrs, node.depth = "buffer", (), {}, 0
            if pool is not None:
                pool.after(node, *recipe, out, dtr.timer() - t_start, ufunc is not _TRANSPOSED_MATMUL)
                del recipe
            del out  # So that the next node may reuse this value's memory once it is dead (`_compute`).


# Elementwise primitives that are exactly these ufuncs: on float inputs of the output's dtype and shape,
# writing the result over an input nothing else can read gives the same bits without a fresh
# allocation (a fresh large array costs page faults on every step).
# (On floats "div" is np.true_divide and "pow" np.power; see loom.ir.ops.)
_IN_PLACE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
             "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative,
             "recip": np.reciprocal, "abs": np.abs, "exp": np.exp, "tanh": np.tanh, "sqrt": np.sqrt,
             "sin": np.sin, "cos": np.cos, "log": np.log, "log1p": np.log1p, "expm1": np.expm1}
_REUSABLE = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_REUSE_MIN = 4096  # Elements; below this a fresh allocation is cheap.
# References to a dead input node: its consumer's inputs tuple, `_compute`'s local and the call's
# argument; to its array: the node's buffer, the `arrays` list, the local and the argument.
_NODE_REFS, _ARRAY_REFS = 3, 4
in_place_count = 0  # How many nodes reused an input's memory (for tests).


def _transposed_products(order: list[Node]) -> set[int]:
    """Float matmuls in `order` that a pending node transposes (the weight gradient of ``x @ W.T``).

    Computing those as ``(b^T a^T)^T`` makes the transpose a row-major array, so the optimizer's
    updates of `W` (row-major) do not mix layouts, each pass of which is several times slower.
    """
    flipped: set[int] = set()
    for n in order:
        if n.op == "permute":
            src = n.inputs[0]
            k = len(n.shape)
            if (src.op == "matmul" and src.buffer is None and src.dtype in _FLIPPABLE and k >= 2
                    and tuple(n.attrs["perm"]) == tuple(range(k - 2)) + (k - 1, k - 2)):
                flipped.add(src.id)
    return flipped


_FLIPPABLE = (dt.float32, dt.float64)
_TRANSPOSED_MATMUL = object()  # Marks a matmul to compute transposed (see `_transposed_products`).


def _compute(node: Node, arrays: list[np.ndarray], ufunc) -> np.ndarray:
    """`evaluate`, writing over a dead input's memory where that gives the same result."""
    if ufunc is _TRANSPOSED_MATMUL:
        a, b = arrays
        if a.dtype == b.dtype == node.dtype.np:
            threads.prepare_blas(math.prod(node.shape) * int(a.shape[-1]))
            return np.matmul(b.swapaxes(-1, -2), a.swapaxes(-1, -2)).swapaxes(-1, -2)
        ufunc = None
    if ufunc is not None:
        shape = node.shape
        inputs = node.inputs
        for k in range(len(arrays)):
            a = arrays[k]
            if (a.base is None and a.dtype in _REUSABLE and a.shape == shape and a.size >= _REUSE_MIN
                    and a.flags.c_contiguous and a.flags.writeable):
                inp = inputs[k]
                if (sys.getrefcount(inp) == _NODE_REFS and sys.getrefcount(a) == _ARRAY_REFS
                        and not weakref.getweakrefcount(inp) and a.dtype == node.dtype.np
                        and all(b.dtype == a.dtype for b in arrays)):
                    global in_place_count
                    in_place_count += 1
                    return ufunc(*arrays, out=a)
                del inp
            del a
    return evaluate(node, arrays)


_ORDERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def run_subgraph(graph, arrays: list[np.ndarray]) -> np.ndarray:
    """Evaluate a one-output subgraph (a fused body) on stored-form arrays, node by node."""
    order = _ORDERS.get(graph)
    if order is None:
        order = _ORDERS[graph] = graph.topological_order()
    env: dict[Node, np.ndarray] = dict(zip(graph.inputs, arrays))
    with np.errstate(all="ignore"):
        for node in order:
            if node not in env:
                env[node] = node.buffer if node.op == "buffer" else evaluate(node, [env[i] for i in node.inputs])
    return env[graph.outputs[0]]
