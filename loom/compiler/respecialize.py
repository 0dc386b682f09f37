"""Re-specialise an optimised graph to new sizes: a traced step at a new batch size without the pass pipeline.

`loom.function` traces its step again when an input's shape changes (the
Python code may depend on sizes), but the new trace usually differs from an
earlier one only in sizes: the same ops, edges, dtypes and attributes, save
shape attributes, slice bounds and messages that name sizes. Then the
earlier trace's optimised graph is valid for the new one with those values
replaced: `respecialize` rebuilds it with every size-carrying attribute
mapped to the new trace's value and every shape inferred again, and only the
passes after fusion (in-place reuse, the memory plan) run again. No pass runs, and no kernel is built (kernels take
sizes as arguments).

Which value replaces which: the passes copy attribute values (tuples,
strings, numbers) from the trace into the optimised graph, or derive shape
attributes from node shapes, as the same Python objects. So an object of the
old trace maps to the value at the same place in the new trace, found by
identity; an object met at two places with two different new values is
ambiguous, and the optimised graph may not use it.

The passes' decisions must come out the same at the new sizes, so the trace
is re-specialised only when (`_substitution`):

- every size that changes is at least 2 before and after (a size-1 axis is
  what simplification and broadcasting rules look for), and a reshape's,
  expand's, slice's or reduction's shape equals its input's (an expand's:
  its input's input's) in the new trace exactly where it did in the old one
  (what ``reshape to the same shape`` and row-kernel rules compare; the
  passes after fusion, in-place reuse and the memory plan, run anew);
- constant-folded values cannot change: a computation on constants only
  reads no changed size or value;
- two nodes equal in the old trace (same op, inputs, attributes and shape:
  merged by common-subexpression elimination) stay equal in the new one;
- a scalar constant that changes (a mean's 1/N) is neither 0, 1 nor an
  infinity before or after (the values simplification rewrites by);
- constant arrays are equal element for element.

Anything else (an optimised node whose size-carrying attribute has no known
new value, a re-inferred shape that disagrees with the new trace's) returns
None and the caller runs the pipeline.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from loom.compiler.constants import FOLDABLE_SOURCES
from loom.dtypes import DType
from loom.compiler.passes import passes_for_level
from loom.compiler.passes.registry import PASSES
from loom.errors import LoomError
from loom.ir import ops
from loom.ir.graph import Graph, _remap_meta
from loom.ir.node import Node

# Attributes whose values hold no size (axes, permutations, flags): kept as they are when a pass made them.
_SIZE_FREE = frozenset({"perm", "axes", "axis", "keepdim", "dtype", "index", "dims", "descending", "stable",
                        "side", "mode", "approximate", "causal", "reduction", "ignore_index", "eps"})
# Ops whose "shape" attribute is their own shape.
_SHAPE_ATTR_OPS = frozenset({"input", "const", "arange", "rand", "reshape", "expand", "buffer"})
_AMBIGUOUS = object()
_MISSING = object()
# Ops that simplification and fusion rules compare with their inputs by shape (a reshape to the same shape,
# a reduction over size-1 axes, a row reduction's broadcast back).
_COMPARED = frozenset({"reshape", "expand", "slice"} |
                      {n for n, p in ops.PRIMITIVES.items() if p.kind == "reduce"})
# Attribute values that never carry a size (dtypes, flags): compared, not mapped.
_PLAIN = frozenset({DType, bool, type(None)})


class _NoReuse(Exception):
    """The optimised graph cannot be re-specialised (the caller compiles the new trace)."""


def default_pipeline(level: int) -> bool:
    """Whether `level` runs only loom's own passes (a registered pass might decide anything on sizes)."""
    names = passes_for_level(level)
    return all(PASSES[n].builtin for n in names)


def respecialize(old: Graph, new: Graph, optimized: Graph) -> Graph | None:
    """`optimized` (the optimised form of trace `old`) rebuilt for trace `new`, or None where that is not
    known to equal the fusion pass's output for `new` (see the module docstring). The passes after fusion
    (in-place marks, the memory plan) are left to the caller."""
    t = time.perf_counter()
    try:
        sub = _substitution(old, new)
        out = _rebuild(optimized, sub, new)
    except _NoReuse:
        return None
    except LoomError:
        return None  # An attribute the new sizes make invalid: the pipeline says what is wrong, if anything.
    out.meta["pass_seconds"] = {"respecialize": time.perf_counter() - t}
    return out


# ---------------------------------------------------------------- old trace -> new trace

def _changed_ok(a: int, b: int) -> bool:
    return a == b or (a >= 2 and b >= 2)


def _special(v: Any) -> bool:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return True
    return f in (0.0, 1.0, -1.0) or math.isinf(f) or math.isnan(f)


def _substitution(old: Graph, new: Graph) -> dict[int, Any]:
    """id(object of `old`'s shapes and attributes) -> its value in `new` (`_AMBIGUOUS` where two differ)."""
    n1, n2 = list(old._nodes), list(new._nodes)  # In the order the trace added them (both traces alike).
    if len(n1) != len(n2) or len(old.inputs) != len(new.inputs) or len(old.outputs) != len(new.outputs):
        raise _NoReuse
    corr = dict(zip(n1, n2))  # Node of `old` -> the node at its place in `new`.
    if [corr[n] for n in old.inputs] != list(new.inputs) or [corr[n] for n in old.outputs] != list(new.outputs):
        raise _NoReuse  # (Nodes compare by identity.)
    sub: dict[int, Any] = {}
    get = sub.get
    keep: list[Any] = []  # The objects whose ids are keys (alive while `old` is; kept with the map anyway).
    constant: set[Node] = set()   # Nodes of `old` computed from constants only (folded by the pipeline).
    changed_source: set[Node] = set()  # Constant sources whose value or shape changes.
    changed: list[Node] = []  # Nodes of `old` whose shape or attributes change.
    for a, b in zip(n1, n2):
        if a.op != b.op or a.dtype is not b.dtype or len(a.inputs) != len(b.inputs):
            raise _NoReuse
        for i, j in zip(a.inputs, b.inputs):
            if corr[i] is not j:
                raise _NoReuse
        sa, sb = a.shape, b.shape
        differs = sa != sb
        if differs and (len(sa) != len(sb) or not all(map(_changed_ok, sa, sb))):
            raise _NoReuse
        if a.op in _COMPARED:
            for i, j in zip(a.inputs, b.inputs):
                # A rule comparing a movement op's or a reduction's shape with its input's (an expand's with its
                # input's input's) decides alike.
                if (i.shape == sa) != (j.shape == sb):
                    raise _NoReuse
                if a.op == "expand":
                    for ii, jj in zip(i.inputs, j.inputs):
                        if (ii.shape == sa) != (jj.shape == sb):
                            raise _NoReuse
        pairs = [(sa, sb)]
        aa, ba = a.attrs, b.attrs
        if aa:
            if aa.keys() != ba.keys():
                raise _NoReuse
            for key, va in aa.items():
                t = type(va)
                if t in _PLAIN:
                    if va != ba[key]:
                        raise _NoReuse
                    continue
                vb = ba[key]
                pairs.append((va, vb))
                if va is vb or (t is type(vb) and t is not np.ndarray and t is not Graph and va == vb):
                    continue
                differs = True
                if t is not type(vb):
                    raise _NoReuse
                if t is tuple:
                    if len(va) != len(vb) or not all(type(x) is int and type(y) is int for x, y in zip(va, vb)):
                        raise _NoReuse
                    if key == "shape" and not all(map(_changed_ok, va, vb)):
                        raise _NoReuse
                elif t is float or t is int:
                    if a.op != "const" or key != "value" or _special(va) or _special(vb):
                        raise _NoReuse
                elif t is not str:
                    raise _NoReuse
        for va, vb in pairs:
            k = id(va)
            was = get(k, _MISSING)
            if was is _MISSING:
                sub[k] = vb
                keep.append(va)
            elif was is not vb and was is not _AMBIGUOUS and not _same(was, vb):
                sub[k] = _AMBIGUOUS
        if differs:
            changed.append(a)
        op = a.op
        if op == "buffer":
            x, y = a.buffer, b.buffer
            if x is not y and (x.dtype != y.dtype or x.shape != y.shape or
                               not np.array_equal(x.view(np.uint8), y.view(np.uint8))):
                raise _NoReuse
        if op in FOLDABLE_SOURCES:
            constant.add(a)
            if differs:
                changed_source.add(a)
        elif a.inputs and a.inputs[0] in constant and op != "rand" and all(i in constant for i in a.inputs):
            constant.add(a)
            if differs or any(i in changed_source for i in a.inputs):
                raise _NoReuse  # Folded at compile time from values that change.
    if changed:
        _same_merges(n1, corr, changed)
    sub[-1] = keep  # (Never an id: keeps the objects alive with the map.)
    return sub


def _same_merges(n1: list[Node], corr: dict[Node, Node], changed: list[Node]) -> None:
    """Raise `_NoReuse` where common-subexpression elimination merged two nodes of the old trace that the
    new one tells apart (a mean's 1/N equal to another constant at one batch size only): the optimised graph
    computes them once, with one new value for both."""
    groups = {(a.op, tuple(map(id, a.inputs))) for a in changed}
    seen: dict[tuple, tuple] = {}
    for a in n1:
        group = (a.op, tuple(map(id, a.inputs)))
        if group not in groups:
            continue
        b = corr[a]
        try:
            k1 = (group, a.shape, a.dtype, tuple(a.attrs.items()))
            k2 = (b.shape, b.dtype, tuple(b.attrs.items()))
            if seen.setdefault(k1, k2) != k2:
                raise _NoReuse
        except TypeError:  # An unhashable attribute: not compared, so not reused.
            raise _NoReuse from None


def _same(x: Any, y: Any) -> bool:
    if x is y:
        return True
    if type(x) is not type(y):
        return False
    try:
        return bool(x == y)
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- the optimised graph, rebuilt

def _attr(key: str, value: Any, sub: dict[int, Any]) -> Any:
    found = sub.get(id(value), None)
    if found is _AMBIGUOUS:
        raise _NoReuse
    if found is not None or id(value) in sub:
        return found
    if value is None or isinstance(value, (bool, float, str)) or key in _SIZE_FREE or not _has_int(value):
        return value
    raise _NoReuse  # A size-carrying value a pass made: its new value is not known.


def _has_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_int(v) for v in value)
    return False


def _rebuild(g: Graph, sub: dict[int, Any], new: Graph, inputs: list[Node] | None = None) -> Graph:
    """`g` with sizes re-specialised; `inputs`: the new shapes of a fused body's inputs (their nodes)."""
    out = Graph()
    mapping: dict[Node, Node] = {}
    if inputs is None:
        for p, q in zip(g.inputs, new.inputs):  # The optimised graph takes the trace's inputs, in order.
            if p.dtype is not q.dtype or len(p.shape) != len(q.shape):
                raise _NoReuse
            mapping[p] = out._insert(Node("input", (), {"shape": tuple(q.shape), "dtype": q.dtype},
                                          tuple(q.shape), q.dtype, p.device, p.name))
    else:
        for p, q in zip(g.inputs, inputs):
            mapping[p] = out._insert(Node("input", (), {"shape": q.shape, "dtype": q.dtype}, q.shape, q.dtype,
                                          p.device, p.name))
    out._inputs = [mapping[p] for p in g.inputs]
    get = sub.get
    prims = ops.PRIMITIVES
    for n in g.topological_order():
        if n in mapping:
            continue
        op = n.op
        if op == "input":
            raise _NoReuse  # A placeholder not among the inputs (the executor would refuse it too).
        ins = tuple([mapping[i] for i in n.inputs])
        same = True  # Inputs of the same shapes and attributes of the same values: the same shape.
        for i, j in zip(n.inputs, ins):
            if i.shape != j.shape:
                same = False
                break
        attrs = {}
        if op == "buffer":
            # A constant array of the trace, or one folded from constants that do not change (`_substitution`).
            for obj in (n.attrs.get("shape"), n.shape):
                want = get(id(obj), None)
                if want is _AMBIGUOUS or (want is not None and tuple(want) != tuple(n.shape)):
                    raise _NoReuse
            attrs = dict(n.attrs)
        else:
            for key, value in n.attrs.items():
                if type(value) in _PLAIN:
                    attrs[key] = value
                    continue
                if key == "body" and op == "fused":
                    v = value if same and not _body_changes(value, sub) else _rebuild(value, sub, new, list(ins))
                elif key == "shape" and op in _SHAPE_ATTR_OPS:
                    v = _shape_of(n, sub)
                else:
                    v = _attr(key, value, sub)
                if v is not value and same and not _same(v, value):
                    same = False
                attrs[key] = v
        if same:
            shape, dtype = n.shape, n.dtype
        else:
            shape, dtype = prims[op].infer(list(ins), attrs)  # (The new trace checked these attributes.)
            shape = tuple(shape)
            want = get(id(n.shape), None)
            if dtype is not n.dtype or len(shape) != len(n.shape) or \
                    (want is not None and want is not _AMBIGUOUS and want != shape):
                raise _NoReuse
        mapping[n] = out._insert(Node(op, ins, attrs, shape, dtype, n.device, n.name, buffer=n.buffer))
    out._outputs = [mapping[o] for o in g.outputs]
    if inputs is None:
        out.meta = {k: _remap_meta(v, mapping) for k, v in g.meta.items()
                    if k not in ("memory", "pass_seconds", "inplace")}
    return out


def _body_changes(body: Graph, sub: dict[int, Any]) -> bool:
    """Whether a fused body on inputs of unchanged shapes holds an attribute whose value changes."""
    get = sub.get
    for n in body._nodes:
        for value in n.attrs.values():
            if type(value) in _PLAIN:
                continue
            found = get(id(value), _MISSING)
            if found is _AMBIGUOUS or (found is not _MISSING and found is not value and not _same(found, value)):
                return True
            if found is _MISSING and n.op != "input" and isinstance(value, Graph):
                return True
    return False


def _shape_of(n: Node, sub: dict[int, Any]) -> tuple[int, ...]:
    """The new shape of a node whose shape is an attribute (reshape, expand, const, ...)."""
    found = sub.get(id(n.attrs.get("shape")), None)
    if found is None:
        found = sub.get(id(n.shape), None)
    if found is None or found is _AMBIGUOUS:
        raise _NoReuse
    return tuple(found)
