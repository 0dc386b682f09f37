"""Trace a module or function into a loom inference graph, and find which sizes follow the dynamic axes.

loom graphs are shape-specialised. To export a graph whose batch (or any other
named axis) varies, the function is traced once at the example sizes and once
more per dynamic symbol with that symbol one larger. The graphs must have the
same structure; every integer attribute that differs between them is a linear
function of the symbols (``c + a * batch``), which the ONNX lowering turns into
shape arithmetic on the input's run-time shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from loom.errors import LoomError
from loom.ir.graph import Graph

# Passes that keep shapes symbolic: constant folding would bake batch-sized arrays into buffers.
_PASSES = ("prune", "cse", "simplify")


@dataclass(frozen=True)
class Dim:
    """A size that depends on the dynamic symbols: ``const + sum(coef * symbol)``."""

    const: int
    terms: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        parts = [f"{a}*{s}" if a != 1 else s for s, a in self.terms]
        if self.const:
            parts.append(str(self.const))
        return " + ".join(parts) or "0"

    @property
    def symbol(self) -> str | None:
        """The symbol name when the size is exactly one symbol."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None


@dataclass
class Traced:
    """A traced inference graph: its placeholders' roles and, per node, attrs with symbolic sizes."""

    graph: Graph
    n_args: int
    externals: list[Any]          # The tensors behind the ext placeholders (weights), in order.
    sym_attrs: dict[int, dict]    # id(node) -> attrs with Dim where a size depends on a symbol.
    sym_shapes: dict[int, tuple]  # id(node) -> shape with Dim entries.
    symbols: dict[str, tuple[int, int]]  # symbol -> (argument index, axis) to read it from.


def _flatten_args(args) -> tuple[list, Callable]:
    """Tensors of nested tuples/lists of example arguments, and a rebuild function."""
    from loom.tensor import Tensor

    leaves: list = []

    def walk(obj):
        if isinstance(obj, Tensor):
            leaves.append(obj)
            return ("T", len(leaves) - 1)
        if isinstance(obj, (tuple, list)):
            return (type(obj), [walk(o) for o in obj])
        return ("C", obj)

    spec = [walk(a) for a in args]

    def rebuild(values):
        def build(s):
            if s[0] == "T":
                return values[s[1]]
            if s[0] == "C":
                return s[1]
            return s[0](build(o) for o in s[1])
        return [build(s) for s in spec]
    return leaves, rebuild


def trace_once(fn: Callable, args: Sequence, rebuild: Callable, passes=_PASSES) -> tuple[Graph, list]:
    """One trace of `fn` on placeholders shaped like the tensors `args`; returns (graph, externals)."""
    from loom.autograd.grad_mode import no_grad
    from loom.compiler import run_passes
    from loom.function import _capture, _flatten, _Trace
    from loom.ir.node import Node
    from loom.runtime import realize as _realize
    from loom.tensor import Tensor, default_generator

    if _realize.active_trace is not None:
        raise LoomError("loom.onnx.export: cannot export from inside a traced loom.function")
    tr = _Trace()
    nodes, holders = [], []
    for a in args:
        n = Node("input", (), {"shape": tuple(a.shape), "dtype": a.dtype}, tuple(a.shape), a.dtype)
        nodes.append(n)
        holders.append(Tensor._wrap(n))
    rng_state = (default_generator._seed, default_generator._counter)
    _realize.active_trace = tr
    try:
        with no_grad():
            out = fn(*rebuild(holders))
    finally:
        _realize.active_trace = None
        default_generator._seed, default_generator._counter = rng_state
    leaves: list = []
    _flatten(out, leaves)
    if not leaves:
        raise LoomError("loom.onnx.export: the model returned no tensors; return a tensor or a "
                        "tuple/list/dict of tensors")
    graph, entry = _capture(tr, nodes, leaves, [], [])
    # In-place updates during the trace (e.g. BatchNorm statistics in train mode) are undone.
    for t, old in tr.mutated.values():
        t._node = old
    if entry.scalars:
        raise LoomError("loom.onnx.export: the model reads loom.dynamic_scalar values, which ONNX "
                        "cannot take; pass them as tensor arguments")
    externals = [ref() for ref, _, _ in entry.externals]
    if passes:
        graph = run_passes(graph, list(passes))
    return graph, externals


def _resize(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`array` with `axis` resized to `size` by repeating its entries (keeps index values valid)."""
    idx = np.arange(size) % array.shape[axis]
    return np.ascontiguousarray(np.take(array, idx, axis=axis))


def trace(fn: Callable, example_args: Sequence, dynamic: dict[int, dict[int, str]]) -> Traced:
    """Trace `fn`; with `dynamic` ({arg index: {axis: symbol}}) also find the symbolic sizes."""
    import loom

    leaves, rebuild = _flatten_args(example_args)
    symbols: dict[str, tuple[int, int]] = {}
    for k, axes in dynamic.items():
        for axis, name in axes.items():
            symbols.setdefault(name, (k, axis))
    base_size = {s: max(2, leaves[k].shape[ax]) for s, (k, ax) in symbols.items()}

    def args_at(sizes: dict[str, int]) -> list:
        out = []
        for k, t in enumerate(leaves):
            array = t.numpy()
            for axis, name in dynamic.get(k, {}).items():
                array = _resize(array, axis, sizes[name])
            out.append(loom.from_numpy(np.array(array)) if dynamic.get(k) else t)
        return out

    base_args = args_at(base_size) if symbols else leaves
    graph, externals = trace_once(fn, base_args, rebuild)
    nodes = list(graph)
    sym_attrs = {id(n): dict(n.attrs) for n in nodes}
    sym_shapes = {id(n): tuple(n.shape) for n in nodes}
    if not symbols:
        return Traced(graph, len(leaves), externals, sym_attrs, sym_shapes, {})
    diffs: dict[str, list] = {}
    for name in symbols:
        variant, _ = trace_once(fn, args_at({**base_size, name: base_size[name] + 1}), rebuild)
        other = list(variant)
        _same_structure(graph, nodes, variant, other)
        diffs[name] = other
    for i, n in enumerate(nodes):
        variants = {s: diffs[s][i] for s in symbols}
        sym_shapes[id(n)] = tuple(_sym(v, {s: variants[s].shape[d] for s in symbols}, base_size, n, "shape")
                                  for d, v in enumerate(n.shape))
        if n.attrs:
            sym_attrs[id(n)] = {key: _sym_tree(val, {s: variants[s].attrs[key] for s in symbols}, base_size, n,
                                               key) for key, val in n.attrs.items()}
        if n.op == "buffer" and any(isinstance(d, Dim) for d in sym_shapes[id(n)]):
            raise LoomError(f"loom.onnx.export: the constant %{n.id} ({n.dtype.name}{list(n.shape)}) has a size "
                            "that follows a dynamic axis, so it cannot be stored in the ONNX file; build it from "
                            "the inputs (e.g. with loom.arange / expand) or export with static shapes")
    return Traced(graph, len(leaves), externals, sym_attrs, sym_shapes, symbols)


def _same_structure(base: Graph, nodes: list, variant: Graph, other: list) -> None:
    index = {n: i for i, n in enumerate(nodes)}
    vindex = {n: i for i, n in enumerate(other)}
    ok = len(nodes) == len(other)
    if ok:
        for a, b in zip(nodes, other):
            if a.op != b.op or [index[i] for i in a.inputs] != [vindex[i] for i in b.inputs] \
                    or set(a.attrs) != set(b.attrs) or a.dtype is not b.dtype:
                ok = False
                bad = a
                break
    else:
        bad = None
    ok = ok and [index[o] for o in base.outputs] == [vindex[o] for o in variant.outputs]
    if not ok:
        where = f" (first difference at %{bad.id} {bad.op})" if bad is not None else ""
        raise LoomError("loom.onnx.export: the model's graph changes structure when a dynamic axis changes "
                        f"size{where}, so it cannot be exported with that axis dynamic; export it with static "
                        "shapes (no dynamic_axes)")


def _sym(base, variants: dict[str, Any], base_size: dict[str, int], node, key: str):
    """`base` as an int, or as a Dim when it changes with a symbol; refuses non-integer changes."""
    if all(v == base for v in variants.values()):
        return base
    if not isinstance(base, (int, np.integer)) or isinstance(base, bool) or \
            not all(isinstance(v, (int, np.integer)) for v in variants.values()):
        raise LoomError(f"loom.onnx.export: attr {key!r} of %{node.id} ({node.op}) is {base!r} and changes with "
                        f"the dynamic axes ({variants!r}); only integer sizes may follow a dynamic axis. Export "
                        "with static shapes")
    terms = tuple((s, int(v) - int(base)) for s, v in sorted(variants.items()) if v != base)
    const = int(base) - sum(a * base_size[s] for s, a in terms)
    return Dim(const, terms)


def _sym_tree(base, variants: dict[str, Any], base_size, node, key):
    if isinstance(base, (tuple, list)):
        if not all(isinstance(v, (tuple, list)) and len(v) == len(base) for v in variants.values()):
            raise LoomError(f"loom.onnx.export: attr {key!r} of %{node.id} ({node.op}) changes length with the "
                            "dynamic axes; export with static shapes")
        return tuple(_sym_tree(b, {s: v[i] for s, v in variants.items()}, base_size, node, key)
                     for i, b in enumerate(base))
    if isinstance(base, (Graph, str, type(None))) or hasattr(base, "category"):
        return base
    return _sym(base, variants, base_size, node, key)


def external_names(model: Any, externals: list) -> list[str]:
    """Names for the weights a trace read: the module's parameter/buffer names where known."""
    names: dict[int, str] = {}
    if model is not None and hasattr(model, "named_parameters"):
        for name, p in model.named_parameters():
            names.setdefault(id(p), name)
        if hasattr(model, "named_buffers"):
            for name, b in model.named_buffers():
                names.setdefault(id(b), name)
    out, used = [], set()
    for k, t in enumerate(externals):
        name = names.get(id(t), f"const{k}")
        while name in used:
            name += "_"
        used.add(name)
        out.append(name)
    return out


__all__ = ["Dim", "Traced", "trace", "trace_once", "external_names"]
