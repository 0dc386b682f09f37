"""Lower a loom Graph (its primitives, with symbolic sizes) to an ONNX GraphProto.

One rule per primitive in `_RULES`. Sizes that follow a dynamic axis (`Dim`)
become int64 shape arithmetic on the run-time shape of the input that carries
the axis, so the ONNX model runs at any size of that axis.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from loom import dtypes as dt
from loom.errors import LoomError
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.ir.ops import PRIMITIVES
from loom.onnx._trace import Dim

ONNX_DTYPE = {dt.bool_: TensorProto.BOOL, dt.uint8: TensorProto.UINT8, dt.int8: TensorProto.INT8,
              dt.int16: TensorProto.INT16, dt.int32: TensorProto.INT32, dt.int64: TensorProto.INT64,
              dt.float16: TensorProto.FLOAT16, dt.bfloat16: TensorProto.BFLOAT16,
              dt.float32: TensorProto.FLOAT, dt.float64: TensorProto.DOUBLE}

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


class Lowering:
    """The ONNX nodes and initializers being built for one graph."""

    def __init__(self, opset: int, symbols: dict[str, tuple[str, int]] | None = None,
                 sym_attrs: dict[int, dict] | None = None, sym_shapes: dict[int, tuple] | None = None) -> None:
        self.opset = opset
        self.sym_shapes = sym_shapes or {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.symbols = symbols or {}  # symbol -> (ONNX input name, axis)
        self.sym_attrs = sym_attrs or {}
        self.names: dict[Node, str] = {}
        self._keep: list[Node] = []  # Proxy nodes whose ids key the symbolic tables.
        self._count = 0
        self._cache: dict[Any, str] = {}

    # ------------------------------------------------------------ helpers
    def fresh(self, hint: str = "t") -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def emit(self, op: str, inputs: list[str], hint: str = "t", outputs: int = 1, **attrs) -> Any:
        outs = [self.fresh(hint) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(op), **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, array: np.ndarray, name: str | None = None) -> str:
        """An initializer holding `array` (small int64 constants are shared)."""
        array = np.asarray(array)
        key = None
        if name is None and array.size <= 16:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in self._cache:
                return self._cache[key]
        name = name or self.fresh("c")
        self.initializers.append(numpy_helper.from_array(array, name))
        if key is not None:
            self._cache[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.array(values, dtype=np.int64))

    def dim(self, d) -> str:
        """A 1-element int64 tensor holding size `d` (an int or a Dim) at run time."""
        if not isinstance(d, Dim):
            return self.ints([d])
        key = ("dim", d)
        if key in self._cache:
            return self._cache[key]
        out = None
        for mono, coef in d.terms:
            term = None
            for sym in mono:
                value = self._symbol(sym)
                term = value if term is None else self.emit("Mul", [term, value], "dim")
            if coef != 1:
                term = self.emit("Mul", [term, self.ints([coef])], "dim")
            out = term if out is None else self.emit("Add", [out, term], "dim")
        if d.const:
            out = self.emit("Add", [out, self.ints([d.const])], "dim")
        self._cache[key] = out
        return out

    def _symbol(self, sym: str) -> str:
        """The run-time size of a dynamic symbol, read from the input that carries it."""
        key = ("sym", sym)
        if key not in self._cache:
            name, axis = self.symbols[sym]
            if self.opset >= 15:
                self._cache[key] = self.emit("Shape", [name], "dim", start=axis, end=axis + 1)
            else:
                shape = self.emit("Shape", [name], "shape")
                self._cache[key] = self.emit("Gather", [shape, self.ints([axis])], "dim")
        return self._cache[key]

    def shape(self, dims) -> str:
        """A 1-D int64 tensor holding the sizes `dims` (ints and Dims) at run time."""
        dims = tuple(dims)
        if not any(isinstance(d, Dim) for d in dims):
            return self.ints(list(dims))
        key = ("shape", dims)
        if key in self._cache:
            return self._cache[key]
        parts, run = [], []
        for d in dims:
            if isinstance(d, Dim):
                if run:
                    parts.append(self.ints(run))
                    run = []
                parts.append(self.dim(d))
            else:
                run.append(d)
        if run:
            parts.append(self.ints(run))
        out = parts[0] if len(parts) == 1 else self.emit("Concat", parts, "shape", axis=0)
        self._cache[key] = out
        return out

    def scalar(self, value, d: dt.DType) -> str:
        """A 0-d constant of loom dtype `d`."""
        array = np.array(PRIMITIVES["const"].impl({"value": value, "shape": (), "dtype": d}))
        if d is dt.bfloat16:
            name = self.fresh("c")
            self.initializers.append(tensor_proto(array, d, name))
            return name
        return self.const(array)

    def sym_shape(self, node: Node) -> tuple:
        return self.sym_shapes.get(id(node), tuple(node.shape))

    def attrs(self, node: Node) -> dict:
        return self.sym_attrs.get(id(node), node.attrs)

    # ------------------------------------------------------------ graphs
    def graph(self, g: Graph, inputs: dict[Node, str]) -> list[str]:
        """Lower the nodes of `g` the outputs need; `inputs` names its placeholders (and known values)."""
        names = dict(inputs)
        from loom.ir.graph import _dfs_order
        order = _dfs_order(g.outputs, lambda n: () if n in names else n.inputs)
        for node in order:
            if node in names:
                continue
            if node.op == "input":
                raise LoomError(f"loom.onnx: placeholder %{node.id} is not a graph input")
            names[node] = self.node(node, [names[i] for i in node.inputs])
        self.names.update(names)
        return [names[o] for o in g.outputs]

    def node(self, node: Node, ins: list[str]) -> str:
        rule = _RULES.get(node.op)
        if rule is None:
            raise LoomError(f"loom.onnx: no ONNX mapping for the primitive {node.op!r} (node %{node.id}, "
                            f"{node.dtype.name}{list(node.shape)}); ONNX export covers {sorted(SUPPORTED)}")
        shape = self.sym_shape(node)
        if node.op not in ("buffer", "const") and any(type(d) is int and d == 0 for d in shape) \
                and node.dtype is not dt.bfloat16:
            # No elements: any tensor of the right shape and type will do (and ONNX Runtime's
            # broadcasting of size-0 dims differs from loom's).
            zero = numpy_helper.from_array(np.zeros(1, node.dtype.np), "value")
            return self.emit("ConstantOfShape", [self.shape(shape)], value=zero)
        vi = 1 if node.op == "where" else 0
        d = node.inputs[vi].dtype if len(node.inputs) > vi else None
        wide = _WIDEN.get((node.op, d.name)) if d is not None else None
        if wide is None:
            return rule(self, node, ins)
        # ONNX Runtime has no kernel for this op and type: compute in a wider type, cast back.
        wdt = dt.from_name(wide)
        proxies = []
        for k, (i, name) in enumerate(zip(node.inputs, ins)):
            if i.dtype is d and k >= vi:
                ins[k] = self.emit("Cast", [name], to=ONNX_DTYPE[wdt])
                proxies.append(Node(i.op, (), i.attrs, tuple(i.shape), wdt))
            else:
                proxies.append(i)
        out_dtype = wdt if node.dtype is d else node.dtype
        proxy = Node(node.op, tuple(proxies), node.attrs, tuple(node.shape), out_dtype)
        self._keep.append(proxy)
        for table in (self.sym_attrs, self.sym_shapes):
            if id(node) in table:
                table[id(proxy)] = table[id(node)]
        for i, p in zip(node.inputs, proxies):
            if p is not i and id(i) in self.sym_shapes:
                self.sym_shapes[id(p)] = self.sym_shapes[id(i)]
                self._keep.append(p)
        out = rule(self, proxy, ins)
        return self.emit("Cast", [out], to=ONNX_DTYPE[node.dtype]) if out_dtype is not node.dtype else out


def tensor_proto(array: np.ndarray, d: dt.DType, name: str) -> onnx.TensorProto:
    """An initializer for a value of loom dtype `d` in loom's stored form."""
    if d is dt.bfloat16:
        t = helper.make_tensor(name, TensorProto.BFLOAT16, array.shape,
                               np.ascontiguousarray(array).view(np.uint16).tobytes(), raw=True)
        return t
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


# ---------------------------------------------------------------- rules

def _simple(op: str):
    return lambda lw, n, ins: lw.emit(op, ins)


def _is_float(n: Node) -> bool:
    return n.inputs[0].dtype.is_floating_point


def _is_bool(n: Node) -> bool:
    return n.inputs[0].dtype is dt.bool_


def _one(lw: Lowering, n: Node) -> str:
    return lw.scalar(1, n.inputs[0].dtype)


def _buffer(lw: Lowering, n: Node, ins):
    name = lw.fresh("const")
    lw.initializers.append(tensor_proto(np.asarray(n.buffer), n.dtype, name))
    return name


def _const(lw: Lowering, n: Node, ins):
    a = lw.attrs(n)
    if isinstance(a["value"], Dim):  # A size used as a number (a mean's divisor): computed at run time.
        value = lw.emit("Cast", [lw.emit("Squeeze", [lw.dim(a["value"]), lw.ints([0])])], to=ONNX_DTYPE[n.dtype])
    else:
        value = lw.scalar(a["value"], n.dtype)
    shape = tuple(a["shape"])
    if not shape:
        return lw.emit("Identity", [value])
    return lw.emit("Expand", [value, lw.shape(shape)])


def _arange(lw: Lowering, n: Node, ins):
    a = lw.attrs(n)
    length = a["shape"][0]
    if not isinstance(length, Dim):
        return lw.const(PRIMITIVES["arange"].impl(n.attrs))
    # Range in float64 (or int64), then the node's type.
    wide = np.float64 if n.dtype.is_floating_point else np.int64
    start, step = lw.const(np.array(a["start"], wide)), lw.const(np.array(a["step"], wide))
    count = lw.emit("Cast", [lw.emit("Squeeze", [lw.dim(length), lw.ints([0])])],
                    to=TensorProto.DOUBLE if wide is np.float64 else TensorProto.INT64)
    limit = lw.emit("Add", [start, lw.emit("Mul", [count, step])])
    out = lw.emit("Range", [start, limit, step])
    return lw.emit("Cast", [out], to=ONNX_DTYPE[n.dtype])


def _rand(lw: Lowering, n: Node, ins):
    a = lw.attrs(n)
    zeros = lw.emit("ConstantOfShape", [lw.shape(a["shape"])],
                    value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
    return lw.emit("RandomUniformLike", [zeros], dtype=ONNX_DTYPE[n.dtype], low=0.0, high=1.0)


def _cast(lw: Lowering, n: Node, ins):
    src, dst = n.inputs[0].dtype, n.dtype
    x = ins[0]
    if dst.category == 1 and src.is_floating_point:
        # loom truncates toward zero; ONNX leaves float -> int rounding to the runtime.
        x = _trunc_value(lw, x)
    return lw.emit("Cast", [x], to=ONNX_DTYPE[dst])


def _trunc_value(lw: Lowering, x: str) -> str:
    return lw.emit("Mul", [lw.emit("Sign", [x]), lw.emit("Floor", [lw.emit("Abs", [x])])])


def _trunc(lw, n, ins):
    return _trunc_value(lw, ins[0]) if _is_float(n) else lw.emit("Identity", ins)


def _rounding(op):
    return lambda lw, n, ins: lw.emit(op, ins) if _is_float(n) else lw.emit("Identity", ins)


def _not(lw, n, ins):
    if _is_bool(n):
        return lw.emit("Not", ins)
    _need(lw, n, 18, "BitwiseNot")
    return lw.emit("BitwiseNot", ins)


def _need(lw: Lowering, n: Node, opset: int, op: str) -> None:
    if lw.opset < opset:
        raise LoomError(f"loom.onnx: node %{n.id} ({n.op} on {n.inputs[0].dtype.name}) needs ONNX {op}, "
                        f"available from opset {opset}; export with opset={opset} or higher")


def _logical_or(logical, arith):
    return lambda lw, n, ins: lw.emit(logical if _is_bool(n) else arith, ins)


def _bitwise(logical, bitwise):
    def rule(lw, n, ins):
        if _is_bool(n):
            return lw.emit(logical, ins)
        _need(lw, n, 18, bitwise)
        return lw.emit(bitwise, ins)
    return rule


def _int_floor_div(lw, x, y):
    """Floor division of integers: (x - mod(x, y)) / y divides exactly."""
    r = lw.emit("Mod", [x, y], fmod=0)
    return lw.emit("Div", [lw.emit("Sub", [x, r]), y])


def _div(lw, n, ins):
    if _is_float(n):
        return lw.emit("Div", ins)
    return _int_floor_div(lw, *ins)


def _float_floordiv(lw, x: str, y: str, d: dt.DType) -> str:
    """NumPy's float floor division (fmod-based, snapped), as loom's reference computes it."""
    zero, one, half = lw.scalar(0, d), lw.scalar(1, d), lw.scalar(0.5, d)
    mod = lw.emit("Mod", [x, y], fmod=1)
    div = lw.emit("Div", [lw.emit("Sub", [x, mod]), y])
    other_sign = lw.emit("Xor", [lw.emit("Less", [y, zero]), lw.emit("Less", [mod, zero])])
    adjust = lw.emit("And", [lw.emit("Not", [lw.emit("Equal", [mod, zero])]), other_sign])
    div = lw.emit("Where", [adjust, lw.emit("Sub", [div, one]), div])
    floor = lw.emit("Floor", [div])
    floor = lw.emit("Where", [lw.emit("Greater", [lw.emit("Sub", [div, floor]), half]),
                              lw.emit("Add", [floor, one]), floor])
    quotient = lw.emit("Div", [x, y])
    signed_zero = lw.emit("Where", [lw.emit("Less", [quotient, zero]), lw.scalar(-0.0, d), zero])
    floor = lw.emit("Where", [lw.emit("Equal", [div, zero]), signed_zero, floor])
    return lw.emit("Where", [lw.emit("Equal", [y, zero]), quotient, floor])


def _floordiv(lw, n, ins):
    if _is_float(n):
        return _float_floordiv(lw, *ins, n.dtype)
    return _int_floor_div(lw, *ins)


def _mod(lw, n, ins):
    if not _is_float(n):
        return lw.emit("Mod", ins, fmod=0)  # Python's sign rule for integers.
    x, y = ins
    zero = lw.scalar(0, n.dtype)
    r = lw.emit("Mod", [x, y], fmod=1)  # C fmod, exact; then the divisor's sign.
    other_sign = lw.emit("Xor", [lw.emit("Less", [r, zero]), lw.emit("Less", [y, zero])])
    adjust = lw.emit("And", [lw.emit("Not", [lw.emit("Equal", [r, zero])]), other_sign])
    return lw.emit("Where", [adjust, lw.emit("Add", [r, y]), r])


def _atan2(lw, n, ins):
    """atan2(y, x) from Atan and the quadrant (signed zeros follow the sign bit only through y's sign)."""
    y, x = ins
    d = n.dtype
    zero, pi, half_pi = lw.scalar(0, d), lw.scalar(math.pi, d), lw.scalar(math.pi / 2, d)
    base = lw.emit("Atan", [lw.emit("Div", [y, x])])
    # The sign bit: -0.0 counts as negative (1 / -0.0 is -inf).
    y_neg = lw.emit("Or", [lw.emit("Less", [y, zero]), lw.emit("Less", [lw.emit("Reciprocal", [y]), zero])])
    x_neg = lw.emit("Or", [lw.emit("Less", [x, zero]), lw.emit("Less", [lw.emit("Reciprocal", [x]), zero])])
    shifted = lw.emit("Where", [y_neg, lw.emit("Sub", [base, pi]), lw.emit("Add", [base, pi])])
    out = lw.emit("Where", [x_neg, shifted, base])
    # x = +-0: +-pi/2 by y's sign; at the origin +-0 or +-pi by the sign bits, as C's atan2.
    origin = lw.emit("Where", [x_neg, lw.emit("Where", [y_neg, lw.emit("Neg", [pi]), pi]), y])
    vertical = lw.emit("Where", [lw.emit("Greater", [y, zero]), half_pi,
                                 lw.emit("Where", [lw.emit("Less", [y, zero]), lw.emit("Neg", [half_pi]), y])])
    on_axis = lw.emit("Where", [lw.emit("Equal", [y, zero]), origin, vertical])
    out = lw.emit("Where", [lw.emit("Equal", [x, zero]), on_axis, out])
    both_inf = lw.emit("And", [lw.emit("IsInf", [x]), lw.emit("IsInf", [y])])
    quarter = lw.emit("Where", [x_neg, lw.scalar(3 * math.pi / 4, d), lw.scalar(math.pi / 4, d)])
    quarter = lw.emit("Where", [y_neg, lw.emit("Neg", [quarter]), quarter])
    return lw.emit("Where", [both_inf, quarter, out])


def _ne(lw, n, ins):
    return lw.emit("Not", [lw.emit("Equal", ins)])


def _log1p(lw, n, ins):
    return lw.emit("Log", [lw.emit("Add", [ins[0], _one(lw, n)])])


def _expm1(lw, n, ins):
    return lw.emit("Sub", [lw.emit("Exp", ins), _one(lw, n)])


def _sign(lw, n, ins):
    out = lw.emit("Sign", ins)
    if _is_float(n):  # sign(NaN) is 0 in loom.
        out = lw.emit("Where", [lw.emit("IsNaN", ins), lw.scalar(0, n.dtype), out])
    return out


def _reduce(op: str):
    def rule(lw: Lowering, n: Node, ins):
        a = n.attrs
        axes = list(a["axes"])
        if not axes or not n.inputs[0].shape:
            return lw.emit("Identity", ins)
        keep = int(bool(a.get("keepdim", False)))
        x = ins[0]
        src = n.inputs[0].dtype
        if src is dt.bool_:
            x = lw.emit("Cast", [x], to=TensorProto.INT64)
        out = _reduced(lw, op, x, axes, keep)
        if src is dt.bool_:
            out = lw.emit("Cast", [out], to=TensorProto.BOOL)
        elif src.is_floating_point and op in ("ReduceMax", "ReduceMin"):
            # ONNX Runtime's max/min reductions may skip NaN; loom's propagate it.
            nan = lw.emit("Cast", [lw.emit("IsNaN", [x])], to=ONNX_DTYPE[src])
            any_nan = lw.emit("Cast", [_reduced(lw, "ReduceMax", nan, axes, keep)], to=TensorProto.BOOL)
            out = lw.emit("Where", [any_nan, lw.scalar(math.nan, src), out])
        return out
    return rule


def _reduced(lw: Lowering, op: str, x: str, axes: list, keep: int) -> str:
    if op == "ReduceSum" or lw.opset >= 18:
        return lw.emit(op, [x, lw.ints(axes)], keepdims=keep)
    return lw.emit(op, [x], axes=axes, keepdims=keep)


def _reshape(lw, n, ins):
    return lw.emit("Reshape", [ins[0], lw.shape(lw.attrs(n)["shape"])])


def _expand(lw, n, ins):
    return lw.emit("Expand", [ins[0], lw.shape(lw.attrs(n)["shape"])])


def _pad(lw, n, ins):
    a = lw.attrs(n)
    pads = [tuple(p) for p in a["pads"]]
    if not pads or all(lo == 0 and hi == 0 for lo, hi in pads):
        return lw.emit("Identity", ins)
    pad_shape = lw.shape([lo for lo, _ in pads] + [hi for _, hi in pads])
    value = lw.scalar(a.get("value", 0), n.dtype)
    return lw.emit("Pad", [ins[0], pad_shape, value], mode="constant")


def _slice(lw, n, ins):
    a = lw.attrs(n)
    shape = lw.sym_shape(n.inputs[0])
    axes, starts, stops, steps = [], [], [], []
    for ax, (s, b, c) in enumerate(zip(a["starts"], a["stops"], a["steps"])):
        to_end = b == shape[ax]
        if s == 0 and c == 1 and to_end:
            continue  # The whole dim.
        axes.append(ax)
        starts.append(s)
        stops.append(_INT64_MAX if to_end else b)
        steps.append(c)
    if not axes:
        return lw.emit("Identity", ins)
    return lw.emit("Slice", [ins[0], lw.shape(starts), lw.shape(stops), lw.ints(axes), lw.ints(steps)])


def _flip(lw, n, ins):
    axes = list(n.attrs["axes"])
    if not axes:
        return lw.emit("Identity", ins)
    k = len(axes)
    return lw.emit("Slice", [ins[0], lw.ints([-1] * k), lw.ints([_INT64_MIN] * k), lw.ints(axes),
                             lw.ints([-1] * k)])


def _gather(lw, n, ins):
    if not n.inputs[0].shape:
        return lw.emit("Identity", [ins[0]])
    idx = ins[1] if n.inputs[1].dtype is dt.int64 else lw.emit("Cast", [ins[1]], to=TensorProto.INT64)
    return lw.emit("GatherElements", [ins[0], idx], axis=n.attrs["axis"])


def _scatter_add(lw, n, ins):
    base, idx, src = ins
    nb, ni, ns = n.inputs
    if not nb.shape:
        return lw.emit("Or" if nb.dtype is dt.bool_ else "Add", [base, src])
    _need(lw, n, 16, "ScatterElements(reduction='add')")
    if ni.dtype is not dt.int64:
        idx = lw.emit("Cast", [idx], to=TensorProto.INT64)
    if tuple(ns.shape) != tuple(ni.shape):
        src = lw.emit("Slice", [src, lw.ints([0] * len(ni.shape)), lw.shape(lw.sym_shape(ni)),
                                lw.ints(list(range(len(ni.shape))))])
    return lw.emit("ScatterElements", [base, idx, src], axis=n.attrs["axis"], reduction="add")


def _argsort(lw, n, ins):
    x = n.inputs[0]
    if not x.shape:
        return lw.const(np.zeros((), np.int64))
    ax = n.attrs["axis"]
    k = lw.dim(lw.sym_shape(x)[ax])
    _, idx = lw.emit("TopK", [ins[0], k], outputs=2, axis=ax, largest=int(bool(n.attrs.get("descending"))),
                     sorted=1)
    return idx


def _fused(lw: Lowering, n: Node, ins):
    body: Graph = n.attrs["body"]
    return lw.graph(body, dict(zip(body.inputs, ins)))[0]


def _onnx_pads(padding) -> list[int]:
    """loom's conv/pool padding (top, bottom, left, right; or one int or a pair) as ONNX pads (begins, ends)."""
    if isinstance(padding, (int, np.integer)):
        return [int(padding)] * 4
    p = [int(e) for e in padding]
    if len(p) == 2:
        return [p[0], p[1], p[0], p[1]]
    return [p[0], p[2], p[1], p[3]]


def _pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, (int, np.integer)) else [int(e) for e in v]


def _conv2d(lw: Lowering, n: Node, ins):
    """The conv2d library primitive (inputs x, w; attrs stride, padding, dilation, groups) as ONNX Conv."""
    a = n.attrs
    return lw.emit("Conv", ins[:2], strides=_pair(a.get("stride", 1)), pads=_onnx_pads(a.get("padding", 0)),
                   dilations=_pair(a.get("dilation", 1)), group=int(a.get("groups", 1)))


def _conv2d_input_grad(lw: Lowering, n: Node, ins):
    """conv2d_input_grad (grad_y, w) -> grad_x: the transposed convolution, ONNX ConvTranspose.

    The output size is fixed by ``input_size``: whatever a strided convolution
    dropped at the end comes back as ``output_padding``.
    """
    a = n.attrs
    gy, w = n.inputs
    s, d, pads = _pair(a["stride"]), _pair(a["dilation"]), _onnx_pads(a["padding"])
    k, out = tuple(w.shape[2:]), tuple(a["input_size"])
    ho = tuple(gy.shape[2:])
    extra = [out[i] - (s[i] * (ho[i] - 1) + d[i] * (k[i] - 1) + 1 - pads[i] - pads[i + 2]) for i in range(2)]
    return lw.emit("ConvTranspose", ins[:2], strides=s, pads=pads, dilations=d, group=int(a["groups"]),
                   output_padding=extra)


def _conv2d_weight_grad(lw: Lowering, n: Node, ins):
    """conv2d_weight_grad (x, grad_y) -> grad_w: itself a convolution, with batch and channels swapped.

    ``gw[o, c, i, j] = sum over n, y, x of gy[n, o, y, x] * x[n, c, i*d + y*s - p, j*d + x*s - p]``: ONNX Conv
    of x transposed to (C, N, H, W) with grad_y transposed to (O, N, Ho, Wo) as the kernel, stride and
    dilation exchanged, the same pads; the result (C, O, ...) is cut to the kernel size and transposed.
    Grouped convolutions would need the groups split apart first and are refused.
    """
    a = n.attrs
    x, gy = n.inputs
    if int(a["groups"]) != 1:
        raise LoomError(f"loom.onnx: conv2d_weight_grad with groups={a['groups']} (x {list(x.shape)}, grad_y "
                        f"{list(gy.shape)}) has no ONNX lowering yet; only groups=1 does")
    s, d, pads = _pair(a["stride"]), _pair(a["dilation"]), _onnx_pads(a["padding"])
    k = [int(v) for v in a["kernel_size"]]
    xt = lw.emit("Transpose", [ins[0]], perm=[1, 0, 2, 3])
    gt = lw.emit("Transpose", [ins[1]], perm=[1, 0, 2, 3])
    full = lw.emit("Conv", [xt, gt], strides=d, pads=pads, dilations=s, group=1)
    cut = lw.emit("Slice", [full, lw.ints([0, 0]), lw.ints(k), lw.ints([2, 3])])
    return lw.emit("Transpose", [cut], perm=[1, 0, 2, 3])


def _max_pool2d_index(lw: Lowering, n: Node, ins):
    """max_pool2d_index: ONNX MaxPool's Indices output (flat over N, C, H, W) taken modulo H*W.

    Ties pick the first maximum in both; a window holding NaN follows ONNX Runtime (see docs/onnx.md).
    """
    a = n.attrs
    x = n.inputs[0]
    _, idx = lw.emit("MaxPool", ins[:1], outputs=2, kernel_shape=_pair(a["kernel_size"]), strides=_pair(a["stride"]),
                     pads=_onnx_pads(a["padding"]), dilations=_pair(a["dilation"]))
    return lw.emit("Mod", [idx, lw.ints(int(x.shape[2]) * int(x.shape[3]))])


def _onnx_conv(lw: Lowering, n: Node, ins):
    """A convolution recorded whole while tracing for export (`loom.onnx._trace.native_convs`)."""
    a = n.attrs
    return lw.emit("Conv", ins, strides=list(a["strides"]), pads=list(a["pads"]), dilations=list(a["dilations"]),
                   group=int(a["group"]))


def _onnx_maxpool(lw: Lowering, n: Node, ins):
    """A max pooling recorded whole while tracing for export (`loom.onnx._trace.native_convs`)."""
    a = n.attrs
    return lw.emit("MaxPool", ins, kernel_shape=list(a["kernel_shape"]), strides=list(a["strides"]),
                   pads=list(a["pads"]), dilations=list(a["dilations"]))


_RULES: dict[str, Callable] = {
    "buffer": _buffer,
    "onnx_conv": _onnx_conv,
    "onnx_maxpool": _onnx_maxpool,
    "const": _const,
    "arange": _arange,
    "rand": _rand,
    "cast": _cast,
    "neg": _simple("Neg"),
    "recip": _simple("Reciprocal"),
    "sqrt": _simple("Sqrt"),
    "exp": _simple("Exp"),
    "log": _simple("Log"),
    "log1p": _log1p,
    "expm1": _expm1,
    "sin": _simple("Sin"),
    "cos": _simple("Cos"),
    "tan": _simple("Tan"),
    "tanh": _simple("Tanh"),
    "erf": _simple("Erf"),
    "abs": _simple("Abs"),
    "sign": _sign,
    "floor": _rounding("Floor"),
    "ceil": _rounding("Ceil"),
    "round": _rounding("Round"),
    "trunc": _trunc,
    "not": _not,
    "add": _logical_or("Or", "Add"),
    "sub": _simple("Sub"),
    "mul": _logical_or("And", "Mul"),
    "div": _div,
    "pow": _simple("Pow"),
    "maximum": _logical_or("Or", "Max"),
    "minimum": _logical_or("And", "Min"),
    "floordiv": _floordiv,
    "mod": _mod,
    "atan2": _atan2,
    "eq": _simple("Equal"),
    "ne": _ne,
    "lt": _simple("Less"),
    "le": _simple("LessOrEqual"),
    "gt": _simple("Greater"),
    "ge": _simple("GreaterOrEqual"),
    "and": _bitwise("And", "BitwiseAnd"),
    "or": _bitwise("Or", "BitwiseOr"),
    "xor": _bitwise("Xor", "BitwiseXor"),
    "where": _simple("Where"),
    "sum": _reduce("ReduceSum"),
    "prod": _reduce("ReduceProd"),
    "max": _reduce("ReduceMax"),
    "min": _reduce("ReduceMin"),
    "reshape": _reshape,
    "permute": lambda lw, n, ins: lw.emit("Transpose", ins, perm=list(n.attrs["perm"])),
    "expand": _expand,
    "pad": _pad,
    "slice": _slice,
    "flip": _flip,
    "gather": _gather,
    "scatter_add": _scatter_add,
    "matmul": _simple("MatMul"),
    "argsort": _argsort,
    "check": lambda lw, n, ins: lw.emit("Identity", ins),  # Run-time bounds checks are loom's own.
    "fused": _fused,
    "conv2d": _conv2d,
    "conv2d_input_grad": _conv2d_input_grad,
    "conv2d_weight_grad": _conv2d_weight_grad,
    "max_pool2d_index": _max_pool2d_index,
}

SUPPORTED = frozenset(_RULES) | {"input"}

# (primitive, input dtype) -> the dtype it computes in, where ONNX Runtime's CPU kernels lack the
# input's type (probed on onnxruntime 1.32). Integer results wrap on the cast back, as loom's do;
# float64 erf/tan lose precision to float32.
_WIDEN: dict[tuple[str, str], str] = {
    **{(op, "bool"): "int32" for op in ("lt", "le", "gt", "ge", "where")},
    **{(op, t): "int32" for op in ("pow", "sum", "prod") for t in ("uint8", "int8", "int16")},
    **{(op, "int16"): "int32" for op in ("maximum", "minimum", "where", "max", "min", "pad")},
    **{(op, "float64"): "float32" for op in ("erf", "tan")},
    ("scatter_add", "float16"): "float32",
    ("neg", "uint8"): "int32",
    **{("argsort", t): "int32" for t in ("bool", "uint8", "int8", "int16")},
}
