"""Algebraic simplification: rewrite nodes into cheaper nodes that compute the same bits.

Every default rule is exact under IEEE-754, NaN, infinities and signed zeros
included. That rules some "obvious" identities out:

- ``x * 0`` is not 0 (NaN and infinities give NaN, negative x gives -0.0);
- ``x + 0.0`` is not x (``-0.0 + 0.0`` is ``+0.0``), but ``x + (-0.0)`` is,
  and so is ``x - 0.0``; for integers and bools any zero works;
- ``exp(log(x))`` and ``log(exp(x))`` round, and differ for x < 0 or large x,
  so they are applied only by ``simplify(graph, fast_math=True)`` (the
  ``simplify_fast_math`` pass), which no optimisation level runs.

Rules: ``x*1, 1*x, x/1, x**1, x+(-0.0), x-0.0`` (any zero for integers),
``x|0, x^0, x&True`` for bools/integers, ``maximum(x, -inf), minimum(x, inf)``,
``neg(neg x), not(not x), abs(abs x), abs(neg x)``; permute chains compose
(and vanish when the result is the identity); reshape chains collapse;
reshape/expand to the same shape, cast to the same dtype, slices covering the
whole tensor, zero padding and flips of size-1 axes vanish; expand chains
collapse; cast chains collapse when the first cast is lossless; double flips
cancel; ``where(c, x, x)`` and ``where`` on a constant condition pick a side;
prod/max/min (and integer sums) over no axes or only size-1 axes become the
input or a reshape of it. A floating sum is not simplified: it adds to +0.0,
so even a one-element sum maps -0.0 to +0.0.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.compiler.constants import scalar, uniform_value
from loom.compiler.passes.registry import register_pass
from loom.compiler.passes.prune import drop_unused, keep_walk_order
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import reference

# A rule returns None (no change), an existing node equal to the one it looked at, or a new
# node spec (op, inputs, attrs).
Spec = tuple[str, tuple[Node, ...], dict]


def _is(node: Node, target: float, negative_zero: bool | None = None) -> bool:
    """Whether every element of `node` is known to equal `target` (with the given zero sign, if floating)."""
    v = uniform_value(node)
    if v is None:
        return False
    x = scalar(v, node.dtype)
    if x != target:
        return False
    if negative_zero is not None and node.dtype.is_floating_point:
        return bool(np.signbit(reference.to_compute(v, node.dtype))) == negative_zero
    return True


def _bits(d: dt.DType) -> tuple[str, int]:
    """('b'|'i'|'u'|'f', exactly representable integer bits or mantissa bits)."""
    if d is dt.bool_:
        return "b", 1
    if d.is_floating_point:
        return "f", {dt.float16: 11, dt.bfloat16: 8, dt.float32: 24, dt.float64: 53}[d]
    kind = d.np.kind
    return kind, 8 * d.np.itemsize


def lossless(src: dt.DType, dst: dt.DType) -> bool:
    """Whether casting `src` to `dst` keeps every value exactly."""
    if src is dst or src is dt.bool_:
        return True
    (sk, sb), (dk, db) = _bits(src), _bits(dst)
    if sk == "f":
        if dk != "f":
            return False
        # Wider in both mantissa and exponent: float16/bfloat16 -> float32/64, float32 -> float64.
        return (src, dst) in {(dt.float16, dt.float32), (dt.float16, dt.float64), (dt.bfloat16, dt.float32),
                              (dt.bfloat16, dt.float64), (dt.float32, dt.float64)}
    if dk == "b":
        return False
    if dk == "f":
        return sb - (sk == "i") <= db  # Magnitude bits fit the mantissa.
    if sk == "u":
        return db > sb if dk == "i" else db >= sb
    return dk == "i" and db >= sb


def _binary_identity(n: Node) -> Node | None:
    x, y = n.inputs
    d = n.dtype
    flt = d.is_floating_point
    op = n.op
    if op == "mul":
        return x if _is(y, 1) else y if _is(x, 1) else None
    if op in ("div", "pow"):
        return x if _is(y, 1) else None
    if op == "add":
        zero = (lambda v: _is(v, 0, negative_zero=True)) if flt else (lambda v: _is(v, 0))
        return x if zero(y) else y if zero(x) else None
    if op == "sub":
        return x if _is(y, 0, negative_zero=False if flt else None) else None
    if op in ("or", "xor"):
        return x if _is(y, 0) else y if _is(x, 0) else None
    if op == "and" and d is dt.bool_:
        return x if _is(y, True) else y if _is(x, True) else None
    if op == "maximum" and flt:
        return x if _is(y, -np.inf) else y if _is(x, -np.inf) else None
    if op == "minimum" and flt:
        return x if _is(y, np.inf) else y if _is(x, np.inf) else None
    return None


def _flip_axes(n: Node, axes) -> tuple[int, ...]:
    return tuple(sorted(a for a in set(axes) if n.shape[a] > 1))


def _rule(n: Node, fast_math: bool) -> Node | Spec | None:
    op, ins = n.op, n.inputs
    if not ins:
        return None
    x = ins[0]
    if op in ("mul", "div", "pow", "add", "sub", "or", "xor", "and", "maximum", "minimum"):
        return _binary_identity(n)
    if op in ("neg", "not") and x.op == op:
        return x.inputs[0]
    if op == "abs" and x.op in ("abs", "neg"):
        return ("abs", (x.inputs[0],), {}) if x.op == "neg" else x
    if fast_math and (op, x.op) in (("exp", "log"), ("log", "exp")):
        return x.inputs[0]
    if op == "cast":
        if n.dtype is x.dtype:
            return x
        if x.op == "cast" and lossless(x.inputs[0].dtype, x.dtype):
            inner = x.inputs[0]
            return inner if inner.dtype is n.dtype else ("cast", (inner,), {"dtype": n.dtype})
        return None
    if op == "reshape":
        if tuple(x.shape) == tuple(n.shape):
            return x
        if x.op == "reshape":
            return ("reshape", (x.inputs[0],), {"shape": tuple(n.shape)})
        return None
    if op == "permute":
        perm = tuple(n.attrs["perm"])
        if perm == tuple(range(len(perm))):
            return x
        if x.op == "permute":
            first = tuple(x.attrs["perm"])
            return ("permute", (x.inputs[0],), {"perm": tuple(first[p] for p in perm)})
        return None
    if op == "expand":
        if tuple(x.shape) == tuple(n.shape):
            return x
        if x.op == "expand":
            return ("expand", (x.inputs[0],), {"shape": tuple(n.shape)})
        return None
    if op == "slice":
        return x if tuple(x.shape) == tuple(n.shape) and not any(n.attrs["starts"]) else None
    if op == "pad":
        return x if all(lo == 0 and hi == 0 for lo, hi in n.attrs["pads"]) else None
    if op == "flip":
        axes = _flip_axes(n, n.attrs["axes"])
        if x.op == "flip":
            axes = tuple(sorted(set(axes) ^ set(_flip_axes(x, x.attrs["axes"]))))
            x = x.inputs[0]
            if axes:
                return ("flip", (x,), {"axes": axes})
        elif axes and axes != tuple(n.attrs["axes"]):
            return ("flip", (x,), {"axes": axes})
        return x if not axes else None
    if op == "where":
        c, a, b = ins
        if a is b:
            return a
        cond = uniform_value(c)
        if cond is not None:
            return a if scalar(cond, c.dtype) else b
        return None
    if op in ("sum", "prod", "max", "min") and not (op == "sum" and n.dtype.is_floating_point):
        # A floating sum adds to +0.0, so even a one-element sum turns -0.0 into +0.0: no rule.
        axes = n.attrs["axes"]
        if not axes or (len(x.shape) > 0 and all(x.shape[a] == 1 for a in axes)):
            return x if tuple(x.shape) == tuple(n.shape) else ("reshape", (x,), {"shape": tuple(n.shape)})
    return None


def simplify(graph: Graph, fast_math: bool = False) -> Graph:
    """Apply the algebraic rules of the module docstring until none applies.

    Parameters
    ----------
    graph : loom.ir.Graph
        Edited in place and returned.
    fast_math : bool
        Also apply the inexact rules (``exp(log x) -> x``, ``log(exp x) -> x``).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((2, 3), "float32")
    >>> t = g.add_node("permute", [g.add_node("permute", [x], {"perm": (1, 0)})], {"perm": (1, 0)})
    >>> g.outputs = [g.add_node("mul", [t, g.add_constant(1.0, "float32", shape=(2, 3))])]
    >>> [n.op for n in simplify(g)]
    ['input']
    """
    replaced: list[Node] = []
    before, added = list(graph._nodes), []
    recompute = graph.meta.get("recompute")  # A checkpoint's recomputation stays one when rewritten (see cse).
    for node in graph.topological_order():
        if node not in graph or node.op in ("input", "buffer"):
            continue
        current = node
        while True:
            result = _rule(current, fast_math)
            if result is None:
                break
            made = isinstance(result, tuple)
            if isinstance(result, tuple):
                op, ins, attrs = result
                result = graph.add_node(op, ins, attrs, name=current.name)
                added.append(result)
                if recompute and current in recompute:
                    recompute[result] = recompute[current]
            graph.replace(current, result, check_cycles=False)  # Built from current's ancestors.
            replaced.append(current)
            if not made:
                break  # An existing node: an ancestor, already simplified.
            current = result
    drop_unused(graph, replaced)
    if added:
        keep_walk_order(graph, before, added)
    return graph


register_pass("simplify", level=2, _builtin=True)(simplify)


@register_pass("simplify_fast_math", _builtin=True)
def simplify_fast_math(graph: Graph) -> Graph:
    """`simplify` plus the inexact rules exp(log x) -> x and log(exp x) -> x (run only on request)."""
    return simplify(graph, fast_math=True)
