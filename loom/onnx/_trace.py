"""Trace a module or function into a loom inference graph, and find which sizes follow the dynamic axes.

loom graphs are shape-specialised. To export a graph whose batch (or any other
named axis) varies, the function is traced once at the example sizes and once
more per dynamic symbol with that symbol one larger. The graphs must have the
same structure; every integer attribute that differs between them is a linear
function of the symbols (``c + a * batch``), which the ONNX lowering turns into
shape arithmetic on the input's run-time shape.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from loom.errors import LoomError
from loom.functional import library_ops as _library_ops
from loom.ir.graph import Graph

# Passes that keep shapes symbolic: constant folding would bake batch-sized arrays into buffers.
_PASSES = ("prune", "cse", "simplify")


@dataclass(frozen=True)
class Dim:
    """A size that depends on the dynamic symbols: ``const + sum(coef * product of symbols)``.

    `terms` holds (monomial, coef) pairs, a monomial being a sorted tuple of
    symbol names (``("batch",)``, or ``("batch", "time")`` for ``batch * time``).
    """

    const: int
    terms: tuple[tuple[tuple[str, ...], int], ...]

    def __str__(self) -> str:
        parts = ["*".join(([str(a)] if a != 1 else []) + list(mono)) for mono, a in self.terms]
        if self.const:
            parts.append(str(self.const))
        return " + ".join(parts) or "0"

    @property
    def symbol(self) -> str | None:
        """The symbol name when the size is exactly one symbol."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            return self.terms[0][0][0]
        return None

    def at(self, sizes: dict[str, int]) -> int:
        """The size for the given symbol values."""
        total = self.const
        for mono, a in self.terms:
            v = a
            for sym in mono:
                v *= sizes[sym]
            total += v
        return total


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


# The nodes a convolution and a max pooling become while a model is traced for export.
CONV_OP, MAXPOOL_OP = "onnx_conv", "onnx_maxpool"


def _library_infer(ins, attrs):
    return tuple(attrs["shape"]), ins[0].dtype


@contextmanager
def native_convs():
    """Record loom's batched convolutions and max poolings as one node each (lowered to ONNX Conv / MaxPool).

    loom decomposes both into im2col movement ops (and a matmul, or a max and
    a gather); the decomposition is still traced (it gives the output's shape)
    and then pruned as dead code. The two primitives exist only while this
    context is open.
    """
    from loom.functional import conv as C
    from loom.ir import ops
    from loom.tensor import Tensor, apply

    conv_nd, max_pool = getattr(C, "_conv", None), getattr(C, "_max_pool", None)
    if conv_nd is None or max_pool is None:  # loom's conv module changed shape: export the decomposition.
        yield
        return

    def conv(op, nsp, input, weight, bias, stride, padding, dilation, groups):
        out = conv_nd(op, nsp, input, weight, bias, stride, padding, dilation, groups)
        if not isinstance(input, Tensor) or input.ndim != nsp + 2 or not isinstance(weight, Tensor):
            return out  # Unbatched input: keep the decomposition.
        k = tuple(weight.shape[2:])
        try:
            s = C._tuple(stride, nsp, "stride", op)
            d = C._tuple(dilation, nsp, "dilation", op)
            pads = C._conv_padding(padding, k, d, s, nsp, op)
        except AttributeError:  # The helpers moved: keep the decomposition.
            return out
        inputs = (input, weight) + ((C._t(bias),) if bias is not None else ())
        attrs = {"strides": s, "pads": tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads), "dilations": d,
                 "group": int(groups), "shape": tuple(out.shape)}
        return apply(CONV_OP, inputs, attrs)

    def pool(op, nsp, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
        out = max_pool(op, nsp, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
        if return_indices or not isinstance(input, Tensor) or input.ndim != nsp + 2 \
                or not input.dtype.is_floating_point:
            return out
        try:
            k, s, d, pads, o = C._pool_geometry(op, input, nsp, kernel_size, stride, padding, dilation, ceil_mode)
        except AttributeError:
            return out
        sizes = [(n + lo + hi - di * (ki - 1) - 1) // si + 1
                 for n, (lo, hi), ki, si, di in zip(input.shape[2:], pads, k, s, d)]
        if sizes != list(o):
            return out  # ONNX's floor rule would give another size: keep the decomposition.
        attrs = {"kernel_shape": k, "strides": s, "dilations": d,
                 "pads": tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads), "shape": tuple(out.shape)}
        return apply(MAXPOOL_OP, (input,), attrs)

    ops.register(CONV_OP, "library", -1, _library_infer, None)
    ops.register(MAXPOOL_OP, "library", 1, _library_infer, None)
    C._conv, C._max_pool = conv, pool
    try:
        yield
    finally:
        C._conv, C._max_pool = conv_nd, max_pool
        ops.PRIMITIVES.pop(CONV_OP, None)
        ops.PRIMITIVES.pop(MAXPOOL_OP, None)


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


MAX_SYMBOLS = 3


def trace(fn: Callable, example_args: Sequence, dynamic: dict[int, dict[int, str]], native_conv: bool = True) -> Traced:
    """Trace `fn` (see `_trace`), convolutions recorded whole when `native_conv`; attention, layer_norm and
    cross_entropy as their decompositions (ONNX has no single op for loom's fused forms)."""
    with _library_ops.decomposed():
        if not native_conv:
            return _trace(fn, example_args, dynamic)
        with native_convs():
            return _trace(fn, example_args, dynamic)


def _trace(fn: Callable, example_args: Sequence, dynamic: dict[int, dict[int, str]]) -> Traced:
    """Trace `fn`; with `dynamic` ({arg index: {axis: symbol}}) also find the symbolic sizes.

    Sizes are fitted as multilinear polynomials of the symbols (``b``, ``8*b``,
    ``b*t``) from traces at the base sizes shifted by one in every subset of
    the symbols, then checked against one more trace with every symbol two
    larger; a size the fit does not predict (``t*t``) is refused.
    """
    import itertools

    from loom import _api as loom

    leaves, rebuild = _flatten_args(example_args)
    symbols: dict[str, tuple[int, int]] = {}
    for k, axes in dynamic.items():
        for axis, name in axes.items():
            symbols.setdefault(name, (k, axis))
    if len(symbols) > MAX_SYMBOLS:
        raise LoomError(f"loom.onnx.export: at most {MAX_SYMBOLS} dynamic axis names are supported, got "
                        f"{sorted(symbols)}")
    base_size = {s: max(2, leaves[k].shape[ax]) for s, (k, ax) in symbols.items()}

    def args_at(sizes: dict[str, int]) -> list:
        out = []
        for k, t in enumerate(leaves):
            if not dynamic.get(k):
                out.append(t)
                continue
            array = t.numpy()
            for axis, name in dynamic[k].items():
                array = _resize(array, axis, sizes[name])
            out.append(loom.from_numpy(np.array(array)))
        return out

    base_args = args_at(base_size) if symbols else leaves
    graph, externals = trace_once(fn, base_args, rebuild)
    nodes = list(graph)
    sym_attrs = {id(n): dict(n.attrs) for n in nodes}
    sym_shapes = {id(n): tuple(n.shape) for n in nodes}
    if not symbols:
        return Traced(graph, len(leaves), externals, sym_attrs, sym_shapes, {})
    names = sorted(symbols)
    subsets = [frozenset(c) for r in range(len(names) + 1) for c in itertools.combinations(names, r)]
    corners: dict[frozenset, list] = {frozenset(): nodes}
    for sub in subsets[1:]:
        variant, _ = trace_once(fn, args_at({s: base_size[s] + (s in sub) for s in names}), rebuild)
        corners[sub] = _same_structure(graph, nodes, variant)
    check_sizes = {s: base_size[s] + 2 for s in names}
    check_graph, _ = trace_once(fn, args_at(check_sizes), rebuild)
    check_nodes = _same_structure(graph, nodes, check_graph)
    fit = _Fit(subsets, base_size, check_sizes)
    for i, n in enumerate(nodes):
        shapes = {sub: corners[sub][i].shape for sub in subsets}
        sym_shapes[id(n)] = tuple(fit(n, "shape", {sub: v[d] for sub, v in shapes.items()}, check_nodes[i].shape[d])
                                  for d in range(len(n.shape)))
        if n.attrs:
            sym_attrs[id(n)] = {key: fit.tree(n, key, {sub: corners[sub][i].attrs[key] for sub in subsets},
                                              check_nodes[i].attrs[key]) for key in n.attrs}
        if n.op == "buffer" and any(isinstance(d, Dim) for d in sym_shapes[id(n)]):
            raise LoomError(f"loom.onnx.export: the constant %{n.id} ({n.dtype.name}{list(n.shape)}) has a size "
                            "that follows a dynamic axis, so it cannot be stored in the ONNX file; build it from "
                            "the inputs (e.g. with loom.arange / expand) or export with static shapes")
    return Traced(graph, len(leaves), externals, sym_attrs, sym_shapes, symbols)


class _Fit:
    """Multilinear fit of an integer over the symbols from its values at the corner traces."""

    def __init__(self, subsets: list[frozenset], base: dict[str, int], check: dict[str, int]) -> None:
        self.subsets, self.base, self.check = subsets, base, check

    def __call__(self, node, key: str, values: dict[frozenset, Any], checked: Any):
        first = values[frozenset()]
        if all(v == first for v in values.values()) and checked == first:
            return first
        if all(isinstance(v, float) and v.is_integer() for v in [*values.values(), checked]):
            values, checked = {k: int(v) for k, v in values.items()}, int(checked)  # A size as a float.
        if not all(_is_int(v) for v in [*values.values(), checked]):
            raise LoomError(f"loom.onnx.export: attr {key!r} of %{node.id} ({node.op}) is {first!r} and changes "
                            "with the dynamic axes; only integer sizes may follow a dynamic axis. Export with "
                            "static shapes")
        # g[T]: coefficient of prod_{s in T} (S_s - base_s) (Moebius inversion over the corners).
        g = {t: sum((-1) ** (len(t) - len(u)) * int(values[u]) for u in self.subsets if u <= t) for t in self.subsets}
        mono: dict[tuple, int] = {}
        for t, coef in g.items():
            if not coef:
                continue
            for v in self.subsets:  # prod (S_s - b_s) over T = sum over V in T of prod_V S * prod_{T-V} (-b).
                if v <= t:
                    c = coef
                    for s in t - v:
                        c *= -self.base[s]
                    mono[tuple(sorted(v))] = mono.get(tuple(sorted(v)), 0) + c
        const = mono.pop((), 0)
        dim = Dim(const, tuple((m, a) for m, a in sorted(mono.items()) if a))
        if dim.at(self.check) != checked:
            raise LoomError(f"loom.onnx.export: {key} of %{node.id} ({node.op}) is not a multilinear function of the "
                            f"dynamic axes (fitted {dim}, which predicts {dim.at(self.check)} at sizes {self.check}; "
                            f"the trace there has {checked}); export with static shapes")
        return dim.const if not dim.terms else dim

    def tree(self, node, key: str, values: dict[frozenset, Any], checked: Any):
        first = values[frozenset()]
        if isinstance(first, (tuple, list)):
            if not all(isinstance(v, (tuple, list)) and len(v) == len(first) for v in [*values.values(), checked]):
                raise LoomError(f"loom.onnx.export: attr {key!r} of %{node.id} ({node.op}) changes length with the "
                                "dynamic axes; export with static shapes")
            return tuple(self.tree(node, key, {s: v[i] for s, v in values.items()}, checked[i])
                         for i in range(len(first)))
        if isinstance(first, (Graph, str, type(None))) or hasattr(first, "category"):
            return first
        return self(node, key, values, checked)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _same_structure(base: Graph, nodes: list, variant: Graph) -> list:
    """The variant's nodes, in the base's order; refuses a graph whose structure differs."""
    other = list(variant)
    index = {n: i for i, n in enumerate(nodes)}
    vindex = {n: i for i, n in enumerate(other)}
    bad = None
    ok = len(nodes) == len(other)
    if ok:
        for a, b in zip(nodes, other):
            if a.op != b.op or [index[i] for i in a.inputs] != [vindex[i] for i in b.inputs] \
                    or set(a.attrs) != set(b.attrs) or a.dtype is not b.dtype:
                ok, bad = False, a
                break
    ok = ok and [index[o] for o in base.outputs] == [vindex[o] for o in variant.outputs]
    if not ok:
        where = f" (first difference at %{bad.id} {bad.op})" if bad is not None else ""
        raise LoomError("loom.onnx.export: the model's graph changes structure when a dynamic axis changes "
                        f"size{where}, so it cannot be exported with that axis dynamic; export it with static "
                        "shapes (no dynamic_axes)")
    return other


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
