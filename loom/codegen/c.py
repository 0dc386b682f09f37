"""Render a fused body (a `loom.ir.Graph`) as one C kernel.

The kernel computes the body's single output over a *loop space*: the output
dims ("O", at least one) followed, when the body reduces, by the reduced dims
("R"). Every read of a graph input is a *leaf*: the input with the movement
ops between it and its consumer applied by NumPy at call time (views, so no
copy unless a reshape needs one), read through per-loop-dim strides. Movement
ops above a reduction or a pad become affine maps from the loop indices to
that node's coordinates; a pad becomes a *guard* (the padded value outside
the source range, the source subtree evaluated inside it only).

Nothing size-dependent is in the source: loop sizes, strides, offsets, guard
coefficients, constants and pad values are all kernel arguments packed into
one int64 array (`ArgLayout`), so a new batch size reuses the same kernel.
Only the structure (ops, dtypes, ranks, which ops sit where) shapes the text,
and the cache keys kernels by a hash of that text.

Semantics follow the NumPy reference (`loom.runtime.reference`) exactly for
arithmetic, comparisons, casts, floor division/modulo and NaN propagation;
transcendental functions come from libm (or glibc's libmvec in vectorised
loops) and agree with NumPy to a few ulp. Half precision (float16, bfloat16)
loads half, computes in float32 and stores half (`loom.codegen.half`): the
reference rounds after every op, a kernel once at the end.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from loom import dtypes as dt
from loom.ir import ops
from loom.ir.graph import Graph
from loom.ir.node import Node

from . import half

FORMAT_VERSION = 3
TILE = 256          # Output elements per accumulator tile when reducing over outer dims.
# Broadcast leaves per phase whose every hoisted/not-hoisted combination gets its own inner loop; beyond
# that one more loop hoists them all (channel-wise values broadcast along a row all at once).
BCAST_SLOTS = 2
BLOCK = 1024        # Float32 sums add in float within blocks this long (then in double), like NumPy's pairwise.

CTYPE = {dt.float32: "float", dt.float64: "double", dt.int64: "int64_t", dt.int32: "int32_t",
         dt.int16: "int16_t", dt.int8: "int8_t", dt.uint8: "uint8_t", dt.bool_: "uint8_t"}
CTYPE.update(half.CTYPES)  # Only inputs, views and casts: `half.widen` computes the rest in float32.
_SUFFIX = {dt.float32: "f", dt.float64: ""}
_INT_LIMITS = {dt.int64: ("INT64_MIN", "INT64_MAX"), dt.int32: ("INT32_MIN", "INT32_MAX"),
               dt.int16: ("INT16_MIN", "INT16_MAX"), dt.int8: ("INT8_MIN", "INT8_MAX"),
               dt.uint8: ("0", "255"), dt.bool_: ("0", "1")}
_REDUCE = ("sum", "prod", "max", "min")
_AFFINE_MOVES = ("permute", "expand", "slice", "flip", "reshape")
_ELEMENTWISE = ("unary", "binary", "compare", "ternary")
_INT_DIVISION = {"div": "div", "floordiv": "floor_divide", "mod": "remainder"}
_LIBM_UNARY = ("sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh")
# Functions that get SIMD variants from libmvec when it is available (see build.py).
MVEC_FUNCS = ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "pow", "atan2")


class Unsupported(Exception):
    """The body cannot be rendered; it runs on the reference path. The message says why."""


# ---------------------------------------------------------------- the static plan

@dataclass
class Ctx:
    """Coordinates of a node as an affine map of the loop indices: coords = A @ idx + b."""

    A: np.ndarray
    b: np.ndarray
    key: tuple
    phase: str = "post"        # "post": output loop dims only; "pre": inside the reduction.
    bcast: bool = False        # An expand lies on the way (structural: may give zero strides).
    sliced: bool = False       # A slice lies on the way (not every element is evaluated).
    guarded: bool = False      # Inside a pad guard.


@dataclass
class Leaf:
    """One read of graph input `input` through the NumPy movement `chain` (bottom first)."""

    input: int
    chain: tuple[Node, ...]
    A: np.ndarray
    b: np.ndarray
    dtype: dt.DType
    phase: str
    slot: int = -1             # Broadcast slot in its phase (-1: none).


@dataclass
class Guard:
    """A pad: the source subtree is evaluated where 0 <= A @ idx + b < sizes in every dim."""

    A: np.ndarray
    b: np.ndarray
    sizes: tuple[int, ...]
    phase: str
    first_dim: int = 0         # Index of its first row in the flattened guard-dim arrays.
    padded: tuple[bool, ...] = ()  # Per dim: padded at all (an unpadded dim's test always passes).


@dataclass
class Acc:
    op: str
    dtype: dt.DType


@dataclass
class KernelSpec:
    """Everything needed to compile a body and to call the result."""

    source: str
    out_shape: tuple[int, ...]
    out_dtype: dt.DType
    n_o: int
    n_r: int
    loop_sizes: tuple[int, ...]
    leaves: list[Leaf]
    guards: list[Guard]
    consts: list[int]          # Raw 64-bit patterns, in slot order.
    accs: list[Acc]
    divisions: list[str]       # Error-flag bit k -> public op name of that integer division.
    uses_mvec: bool = False
    layout: ArgLayout = field(default=None)  # type: ignore[assignment]
    row: bool = False          # Holds a row reduction (run_R can reduce each row once).


@dataclass
class ArgLayout:
    """Offsets of each field in the int64 argument array (mirrors the C struct)."""

    n_o: int
    n_r: int
    n_leaves: int
    n_gdims: int
    n_consts: int

    @property
    def n_loop(self) -> int:
        return self.n_o + self.n_r

    def fields(self) -> list[tuple[str, int]]:
        L = self.n_loop
        return [("par_min", 1), ("mode", 1), ("fast_a", 1), ("bm_a", 1), ("fast_b", 1), ("bm_b", 1),
                ("fast_post", 1), ("bm_post", 1),
                ("n", L), ("lo", max(1, self.n_leaves)), ("ls", max(1, self.n_leaves) * L), ("os", self.n_o),
                ("gn", max(1, self.n_gdims)), ("gb", max(1, self.n_gdims)), ("gc", max(1, self.n_gdims) * L),
                ("cb", max(1, self.n_consts))]

    def offsets(self) -> dict[str, tuple[int, int]]:
        out, pos = {}, 0
        for name, size in self.fields():
            out[name] = (pos, size)
            pos += size
        return out

    @property
    def size(self) -> int:
        return sum(s for _, s in self.fields())

    def c_struct(self) -> str:
        L = self.n_loop
        nl, ng = max(1, self.n_leaves), max(1, self.n_gdims)
        return ("typedef struct {\n  int64_t par_min, mode, fast_a, bm_a, fast_b, bm_b, fast_post, bm_post;\n"
                f"  int64_t n[{L}];\n  int64_t lo[{nl}];\n  int64_t ls[{nl}][{L}];\n  int64_t os[{self.n_o}];\n"
                f"  int64_t gn[{ng}];\n  int64_t gb[{ng}];\n  int64_t gc[{ng}][{L}];\n"
                f"  int64_t cb[{max(1, self.n_consts)}];\n}} K;\n")


# ---------------------------------------------------------------- scalar bits

def scalar_bits(value, d: dt.DType) -> int:
    """The 64-bit pattern a kernel argument carries for a scalar of dtype `d` (already in `d`)."""
    v = np.asarray(value, dtype=d.np).reshape(())
    if d is dt.float32:
        return int(v.view(np.int32))
    if d is dt.float64:
        return int(v.view(np.int64))
    return int(v.astype(np.int64))


def const_value(node: Node):
    """The value a ``const`` node holds, exactly as the reference computes it."""
    return ops.PRIMITIVES["const"].impl(dict(node.attrs, shape=()))


def pad_value(node: Node):
    """The value NumPy's pad writes for a pad node (its cast of the attr to the dtype)."""
    return np.pad(np.zeros(1, node.dtype.np), 1, constant_values=node.attrs.get("value", 0))[0]


# ---------------------------------------------------------------- affine maps through movement ops

def _move_map(m: Node, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Coordinates of m's input given m's output coordinates (A, b); None if not affine."""
    src, dst = tuple(m.inputs[0].shape), tuple(m.shape)
    at = m.attrs
    L = A.shape[1]
    if m.op == "permute":
        A2, b2 = np.zeros((len(src), L), np.int64), np.zeros(len(src), np.int64)
        for i, p in enumerate(at["perm"]):
            A2[p], b2[p] = A[i], b[i]
        return A2, b2
    if m.op == "expand":
        A2, b2 = A.copy(), b.copy()
        for d, s in enumerate(src):
            if s == 1:
                A2[d], b2[d] = 0, 0
        return A2, b2
    if m.op == "slice":
        st = np.array(at["starts"], np.int64).reshape(-1)
        sp = np.array(at["steps"], np.int64).reshape(-1)
        return A * sp[:, None], st + sp * b
    if m.op == "flip":
        A2, b2 = A.copy(), b.copy()
        for ax in at["axes"]:
            A2[ax], b2[ax] = -A[ax], (src[ax] - 1) - b[ax]
        return A2, b2
    if m.op == "reshape":
        return _reshape_map(src, dst, A, b)
    return None


def _reshape_map(src, dst, A, b):
    """A reshape is affine (consumer -> producer coordinates) when each source dim splits into dst dims."""
    L = A.shape[1]
    A2, b2 = np.zeros((len(src), L), np.int64), np.zeros(len(src), np.int64)
    if math.prod(src) == 0:
        return A2, b2
    j = 0
    for d, s in enumerate(src):
        if s == 1:
            continue
        while j < len(dst) and dst[j] == 1:
            j += 1
        group, prod = [], 1
        while prod < s and j < len(dst):
            if dst[j] != 1:
                group.append(j)
                prod *= dst[j]
            j += 1
        if prod != s:
            return None
        scale = 1
        for e in reversed(group):
            A2[d] += A[e] * scale
            b2[d] += b[e] * scale
            scale *= dst[e]
    return A2, b2


# ---------------------------------------------------------------- C expressions per op

def _fn(name: str, d: dt.DType) -> str:
    return name + _SUFFIX[d]


def unary_expr(op: str, d: dt.DType, x: str) -> str:
    T = CTYPE[d]
    if d.is_floating_point:
        if op == "neg":
            return f"(-{x})"
        if op == "recip":
            return f"(({T})1 / {x})"
        if op in _LIBM_UNARY:
            return f"{_fn(op, d)}({x})"
        if op == "erf":  # SciPy's float32 erf runs in double and rounds once; so do we.
            return f"(float)erf((double){x})" if d is dt.float32 else f"erf({x})"
        if op == "abs":
            return f"{_fn('fabs', d)}({x})"
        if op == "sign":
            return f"({x} > 0 ? ({T})1 : ({x} < 0 ? ({T})-1 : ({T})0))"
        if op in ("floor", "ceil", "trunc"):
            return f"{_fn(op, d)}({x})"
        if op == "round":
            return f"{_fn('nearbyint', d)}({x})"
        raise Unsupported(f"{op} on {d.name}")
    if op in ("floor", "ceil", "round", "trunc"):
        return x
    if d is dt.bool_:
        if op == "not":
            return f"(uint8_t)(!{x})"
        raise Unsupported(f"{op} on bool")
    if op == "neg":
        return f"({T})(-{x})"
    if op == "abs":
        return f"({T})({x} < 0 ? -{x} : {x})"
    if op == "sign":
        return f"({T})(({x} > 0) - ({x} < 0))"
    if op == "not":
        return f"({T})(~{x})"
    raise Unsupported(f"{op} on {d.name}")


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_BITS = {"and": "&", "or": "|", "xor": "^"}


def binary_expr(op: str, d: dt.DType, x: str, y: str) -> str:
    """A binary op on two values of dtype `d` (integer division is rendered by the walker)."""
    T = CTYPE[d]
    if op in _CMP:
        return f"(uint8_t)({x} {_CMP[op]} {y})"
    if d is dt.bool_:
        table = {"add": "|", "mul": "&", "maximum": "|", "minimum": "&", **_BITS}
        if op in table:
            return f"(uint8_t)({x} {table[op]} {y})"
        raise Unsupported(f"{op} on bool")
    if d.is_floating_point:
        if op in _ARITH:
            return f"({x} {_ARITH[op]} {y})"
        if op == "div":
            return f"({x} / {y})"
        if op == "pow":
            return f"{_fn('pow', d)}({x}, {y})"
        if op == "atan2":
            return f"{_fn('atan2', d)}({x}, {y})"
        if op == "maximum":  # NaN wins, as np.maximum; ties take the second operand, as NumPy's SIMD loop.
            return f"(({x} > {y} || {x} != {x}) ? {x} : {y})"
        if op == "minimum":
            return f"(({x} < {y} || {x} != {x}) ? {x} : {y})"
        if op == "floordiv":
            return f"loom_floordiv_{_fname(d)}({x}, {y})"
        if op == "mod":
            return f"loom_mod_{_fname(d)}({x}, {y})"
        raise Unsupported(f"{op} on {d.name}")
    if op in _ARITH:
        return f"({T})({x} {_ARITH[op]} {y})"
    if op in _BITS:
        return f"({T})({x} {_BITS[op]} {y})"
    if op == "maximum":
        return f"({x} > {y} ? {x} : {y})"
    if op == "minimum":
        return f"({x} < {y} ? {x} : {y})"
    if op == "pow":
        return f"({T})loom_ipow_{'u' if d is dt.uint8 else 's'}((int64_t){x}, (int64_t){y})"
    raise Unsupported(f"{op} on {d.name}")


def _fname(d: dt.DType) -> str:
    return {dt.float32: "f32", dt.float64: "f64"}[d]


def cast_expr(src: dt.DType, dst: dt.DType, x: str) -> str:
    if src is dst:
        return x
    conv = half.cast_expr(src, dst, x)
    if conv is not None:
        return conv
    if src in half.HALF or dst in half.HALF:
        raise Unsupported(f"cast from {src.name} to {dst.name}")
    if dst is dt.bool_:
        return f"(uint8_t)({x} != 0)"
    # C conversions: float -> int truncates toward zero (out-of-range values are undefined, as in NumPy).
    return f"({CTYPE[dst]}){x}"


# ---------------------------------------------------------------- the walker

@dataclass
class _Block:
    lines: list = field(default_factory=list)


class _Walker:
    """Walks the body from its output, emitting SSA statements per phase."""

    def __init__(self, body: Graph):
        self.body = body
        self.pos = {n: k for k, n in enumerate(body.inputs)}
        self.leaves: list[Leaf] = []
        self.guards: list[Guard] = []
        self.accs: list[Acc] = []
        self.consts: list[int] = []
        self.const_types: list[dt.DType] = []
        self.const_slot: dict[Node, int] = {}
        self.memo: dict[tuple, str] = {}
        self.leaf_memo: dict[tuple, int] = {}
        self.var = 0
        self.pre = _Block()
        self.post = _Block()
        self.acc_updates: list[tuple[int, str]] = []  # (acc index, element var)
        self.division_bits: dict[Node, int] = {}
        topo = body.topological_order()
        divs = [n for n in topo if n.op in _INT_DIVISION and not n.dtype.is_floating_point]
        if len(divs) > 31:
            raise Unsupported("more than 31 integer divisions in one body")
        self.division_bits = {n: k for k, n in enumerate(divs)}
        self.divisions = [_INT_DIVISION[n.op] for n in divs]
        self.uses_mvec = False
        self.row_reduce = False  # A reduction broadcast back along its (last) axis: see reduce().
        self._set_loop_space(topo)

    # ------------------------------------------------------------ loop space
    def _set_loop_space(self, topo: list[Node]) -> None:
        out = self.body.outputs[0]
        self.out_shape = tuple(out.shape)
        self.n_o = max(1, len(out.shape))
        o_sizes = tuple(out.shape) if out.shape else (1,)
        reduces = [n for n in topo if n.op in _REDUCE]
        r_sizes: tuple[int, ...] = ()
        for r in reduces:
            axes = self._axes(r)
            sizes = tuple(r.inputs[0].shape[a] for a in axes) if axes else (1,)
            if not r_sizes:
                r_sizes = sizes
            elif sizes != r_sizes:
                raise Unsupported("reductions over different index spaces in one body")
        self.n_r = len(r_sizes)
        self.loop_sizes = o_sizes + r_sizes

    @staticmethod
    def _axes(r: Node) -> tuple[int, ...]:
        axes = tuple(r.attrs["axes"])
        if r.inputs[0].ndim == 0:
            return ()
        return axes

    def new_var(self) -> str:
        self.var += 1
        return f"v{self.var}"

    def const(self, value_bits: int, d: dt.DType) -> str:
        self.consts.append(value_bits)
        self.const_types.append(d)
        return f"c{len(self.consts) - 1}"

    # ------------------------------------------------------------ walking
    def run(self) -> str:
        L = self.n_o + self.n_r
        out = self.body.outputs[0]
        A = np.zeros((out.ndim, L), np.int64)
        for i in range(out.ndim):
            A[i, i] = 1
        ctx = Ctx(A, np.zeros(out.ndim, np.int64), ("out",))
        return self.as_var(self.walk(out, ctx, (), self.post), out.dtype, self.post)

    def as_var(self, expr: str, d: dt.DType, blk: _Block) -> str:
        """A statement-level variable for `expr` (a leaf read or a constant is an expression)."""
        return expr if re.fullmatch(r"v\d+", expr) else self.emit(blk, d, expr)

    def walk(self, node: Node, ctx: Ctx, pending: tuple[Node, ...], blk: _Block) -> str:
        key = (node, ctx.key, tuple(m.id for m in pending))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        prim = ops.PRIMITIVES.get(node.op)
        kind = prim.kind if prim is not None else None
        if node.dtype not in CTYPE or (node.dtype in half.HALF and node.op not in ("input", "cast", *_AFFINE_MOVES)):
            raise Unsupported(f"dtype {node.dtype.name} ({node.op})")
        if node.op == "input":
            res = self.leaf(node, ctx, pending, blk)
        elif node.op == "const":
            slot = self.const_slot.get(node)
            if slot is None:
                self.const(scalar_bits(const_value(node), node.dtype), node.dtype)
                slot = self.const_slot[node] = len(self.consts) - 1
            res = f"c{slot}"
        elif node.op == "pad":
            res = self.pad(node, ctx, pending, blk)
        elif node.op in _AFFINE_MOVES:
            res = self.walk(node.inputs[0], ctx, pending + (node,), blk)
        elif node.op in _REDUCE:
            res = self.reduce(node, ctx, pending, blk)
        elif kind in _ELEMENTWISE:
            res = self.elementwise(node, ctx, pending, blk)
        else:
            raise Unsupported(f"op {node.op!r} inside a kernel body")
        self.memo[key] = res
        return res

    def flush(self, ctx: Ctx, pending: tuple[Node, ...], what: str) -> Ctx | None:
        """Fold pending movement ops into the context; None if one is not affine."""
        A, b = ctx.A, ctx.b
        bcast, sliced = ctx.bcast, ctx.sliced
        for m in pending:
            r = _move_map(m, A, b)
            if r is None:
                return None
            A, b = r
            bcast |= m.op == "expand"
            sliced |= m.op == "slice"
        return Ctx(A, b, (ctx.key, tuple(m.id for m in pending), what), ctx.phase, bcast, sliced, ctx.guarded)

    def leaf(self, node: Node, ctx: Ctx, pending: tuple[Node, ...], blk: _Block) -> str:
        chain = tuple(reversed(pending))
        key = (node, tuple(m.id for m in chain), ctx.key)
        k = self.leaf_memo.get(key)
        if k is None:
            # The leaf's own coordinates are the top of the chain's, i.e. the context's.
            k = len(self.leaves)
            self.leaves.append(Leaf(self.pos[node], chain, ctx.A, ctx.b, node.dtype, ctx.phase))
            bcast = ctx.bcast or any(m.op == "expand" for m in chain)
            if bcast and not ctx.guarded:
                self.leaves[k].slot = sum(1 for lf in self.leaves if lf.phase == ctx.phase and lf.slot >= 0)
            self.leaf_memo[key] = k
        return self.emit(blk, node.dtype, f"@L{k}@")

    def emit(self, blk: _Block, d: dt.DType, expr: str) -> str:
        v = self.new_var()
        blk.lines.append(f"const {CTYPE[d]} {v} = {expr};")
        return v

    def elementwise(self, node: Node, ctx: Ctx, pending, blk: _Block) -> str:
        if node in self.division_bits and (ctx.sliced or any(m.op == "slice" for m in pending)):
            raise Unsupported("integer division under a slice (the reference checks every divisor)")
        args = [self.walk(i, ctx, pending, blk) for i in node.inputs]
        op, d = node.op, node.dtype
        if node.op == "cast":
            return self.emit(blk, d, cast_expr(node.inputs[0].dtype, d, args[0]))
        if node.op == "where":
            return self.emit(blk, d, f"({args[0]} ? {args[1]} : {args[2]})")
        ind = node.inputs[0].dtype
        if ind not in CTYPE:
            raise Unsupported(f"dtype {ind.name} ({op})")
        if len(args) == 1:
            if ind.is_floating_point and op in _LIBM_UNARY + ("erf",) and op in MVEC_FUNCS:
                self.uses_mvec = True
            return self.emit(blk, d, unary_expr(op, ind, args[0]))
        if node in self.division_bits:
            return self.int_division(node, args, blk)
        if op == "div" and not ind.is_floating_point:
            raise Unsupported(f"div on {ind.name}")
        if op == "atan2" and not ind.is_floating_point:
            raise Unsupported(f"atan2 on {ind.name}")
        if ind.is_floating_point and op in ("pow", "atan2"):
            self.uses_mvec = True
        return self.emit(blk, d, binary_expr(op, ind, args[0], args[1]))

    def int_division(self, node: Node, args: list[str], blk: _Block) -> str:
        d = node.inputs[0].dtype
        if d is dt.bool_:
            raise Unsupported(f"{node.op} on bool")
        T = CTYPE[d]
        bit = self.division_bits[node]
        x, y = args
        safe = self.emit(blk, d, f"({y} == 0 ? ({T})1 : {y})")
        blk.lines.append(f"zf |= (int32_t)({y} == 0) << {bit};")
        fn = "loom_imod" if node.op == "mod" else "loom_ifloordiv"
        sign = "u" if d is dt.uint8 else "s"
        return self.emit(blk, node.dtype, f"({T}){fn}_{sign}((int64_t){x}, (int64_t){safe}, {_bits(d)})")

    def pad(self, node: Node, ctx: Ctx, pending, blk: _Block) -> str:
        flushed = self.flush(ctx, pending, ("pad", id(node)))
        if flushed is None:
            if self._pure_movement(node):  # NumPy materialises the pad with the rest of the chain.
                return self.walk(node.inputs[0], ctx, pending + (node,), blk)
            raise Unsupported("a reshape that merges dims above a pad")
        lo = np.array([p[0] for p in node.attrs["pads"]], np.int64).reshape(-1)
        src = node.inputs[0]
        g = len(self.guards)
        first = sum(len(x.sizes) for x in self.guards)
        padded = tuple(bool(p[0] or p[1]) for p in node.attrs["pads"])
        self.guards.append(Guard(flushed.A, flushed.b - lo, tuple(src.shape), ctx.phase, first, padded))
        inner = Ctx(flushed.A, flushed.b - lo, flushed.key + ("in",), ctx.phase, flushed.bcast, flushed.sliced,
                    True)
        pv = self.const(scalar_bits(pad_value(node), node.dtype), node.dtype)
        v = self.new_var()
        T = CTYPE[node.dtype]
        sub = _Block()
        sv = self.walk(src, inner, (), sub)
        blk.lines.append(f"{T} {v};")
        blk.lines.append(f"if (@G{g}@) {{")
        blk.lines.append(sub)
        blk.lines.append(f"  {v} = {sv};")
        blk.lines.append(f"}} else {{ {v} = {pv}; }}")
        return v

    def _pure_movement(self, node: Node) -> bool:
        while node.op in _AFFINE_MOVES or node.op == "pad":
            node = node.inputs[0]
        return node.op == "input"

    def reduce(self, node: Node, ctx: Ctx, pending, blk: _Block) -> str:
        if ctx.phase != "post":
            raise Unsupported("a reduction inside another reduction")
        if ctx.guarded:
            raise Unsupported("a reduction inside a pad")
        x = node.inputs[0]
        axes = self._axes(node)
        keep = node.attrs.get("keepdim", False)
        # A last-axis reduction broadcast back along that axis (softmax's sum, layer_norm's mean) is a row
        # kernel: the planner has it reduce each row once and then write the row (mode 2, run_R).
        row = (not ctx.bcast and len(pending) == 1 and pending[0].op == "expand" and keep and x.ndim > 0
               and tuple(a % x.ndim for a in axes) == (x.ndim - 1,) and tuple(pending[0].shape) == tuple(x.shape))
        if not row and (ctx.bcast or any(m.op == "expand" for m in pending)):
            raise Unsupported("a broadcast reduction (it would be recomputed for every element)")
        self.row_reduce |= row
        flushed = self.flush(ctx, pending, ("reduce", id(node)))
        if flushed is None:
            raise Unsupported("a reshape that merges dims above a reduction")
        L = self.n_o + self.n_r
        A = np.zeros((x.ndim, L), np.int64)
        b = np.zeros(x.ndim, np.int64)
        j = 0
        for d in range(x.ndim):
            if d in axes:
                A[d, self.n_o + axes.index(d)] = 1
                if keep:
                    j += 1
            else:
                A[d], b[d] = flushed.A[j], flushed.b[j]
                j += 1
        a = len(self.accs)
        self.accs.append(Acc(node.op, node.dtype))
        inner = Ctx(A, b, flushed.key + ("acc", a), "pre", False, flushed.sliced, flushed.guarded)
        ev = self.as_var(self.walk(x, inner, (), self.pre), x.dtype, self.pre)
        self.acc_updates.append((a, ev))
        return f"r{a}"


def bcast_masks(n: int) -> list[int]:
    """The broadcast masks (bit s: slot s is broadcast along the inner dim) a phase with `n` slots has loops for."""
    masks = list(range(1 << min(n, BCAST_SLOTS)))
    return masks + [(1 << n) - 1] if n > BCAST_SLOTS else masks


def _bits(d: dt.DType) -> int:
    return 8 * d.itemsize


# ---------------------------------------------------------------- source assembly

_HELPERS = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>

""" + half.HELPERS + r"""
static inline int loom_in(int64_t c, int64_t n) { return (uint64_t)c < (uint64_t)n; }
static inline int64_t loom_fdiv(int64_t x, int64_t d) { return x >= 0 ? x / d : -((-x + d - 1) / d); }
/* Narrow [*lo, *hi) to the i with 0 <= b + i * a < n: a guard tested once per run, not per element. */
static inline void loom_span(int64_t b, int64_t a, int64_t n, int64_t *lo, int64_t *hi) {
  int64_t l, h;
  if (a == 0) { if (!loom_in(b, n)) *hi = *lo; return; }
  if (a > 0) { l = -loom_fdiv(b, a); h = loom_fdiv(n - 1 - b, a) + 1; }
  else { l = -loom_fdiv(n - 1 - b, -a); h = loom_fdiv(b, -a) + 1; }
  if (l > *lo) *lo = l;
  if (h < *hi) *hi = h;
  if (*hi < *lo) *hi = *lo;
}
static inline int64_t loom_dot(const int64_t *a, const int64_t *b, int n) {
  int64_t s = 0; for (int d = 0; d < n; d++) s += a[d] * b[d]; return s;
}
static inline float loom_f32(int64_t b) { int32_t i = (int32_t)b; float f; memcpy(&f, &i, 4); return f; }
static inline double loom_f64(int64_t b) { double f; memcpy(&f, &b, 8); return f; }

/* NumPy's float floor division (npy_divmod): Python semantics, a / 0 gives inf or nan. */
#define LOOM_FLOORDIV(NAME, T, FMOD, FLOOR, COPYSIGN) \
static inline T NAME(T a, T b) { \
  if (b == 0) return a / b; \
  T mod = FMOD(a, b); T div = (a - mod) / b; \
  if (mod != 0) { if ((b < 0) != (mod < 0)) div -= 1; } \
  T fl; \
  if (div != 0) { fl = FLOOR(div); if (div - fl > (T)0.5) fl += 1; } \
  else { fl = COPYSIGN((T)0, a / b); } \
  return fl; }
LOOM_FLOORDIV(loom_floordiv_f32, float, fmodf, floorf, copysignf)
LOOM_FLOORDIV(loom_floordiv_f64, double, fmod, floor, copysign)
/* PyTorch's remainder: C fmod moved by one divisor when a nonzero result has the wrong sign. */
static inline float loom_mod_f32(float a, float b) {
  float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double loom_mod_f64(double a, double b) {
  double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }

/* Integer floor division and modulo (divisor nonzero) of values of `bits` bits, wrapping like NumPy. */
static inline int64_t loom_wrap(int64_t v, int bits) {
  if (bits == 64) return v;
  uint64_t m = ((uint64_t)1 << bits) - 1, u = (uint64_t)v & m;
  return (u >> (bits - 1)) ? (int64_t)(u | ~m) : (int64_t)u;
}
static inline int64_t loom_ifloordiv_s(int64_t a, int64_t b, int bits) {
  if (b == -1) return loom_wrap((int64_t)(0 - (uint64_t)a), bits);
  int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }
static inline int64_t loom_imod_s(int64_t a, int64_t b, int bits) {
  (void)bits; if (b == -1) return 0;
  int64_t r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline int64_t loom_ifloordiv_u(int64_t a, int64_t b, int bits) { (void)bits; return a / b; }
static inline int64_t loom_imod_u(int64_t a, int64_t b, int bits) { (void)bits; return a % b; }
/* Integer power with wrap-around; a negative exponent gives 1/x truncated (0 unless x is +-1). */
static inline int64_t loom_ipow_s(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);
  uint64_t r = 1, b = (uint64_t)x; while (y) { if (y & 1) r *= b; b *= b; y >>= 1; } return (int64_t)r; }
static inline int64_t loom_ipow_u(int64_t x, int64_t y) {
  uint64_t r = 1, b = (uint64_t)x; while (y > 0) { if (y & 1) r *= b; b *= b; y >>= 1; } return (int64_t)r; }
"""

# The call path used from Python: the arrays arrive as one tuple object and each data pointer is read at
# fixed offsets of CPython's tuple and NumPy's array structs (checked at import by loom.codegen.kernel),
# which costs far less than asking NumPy for pointers. Misaligned data (-2) or an output overlapping an
# input other than element for element (-1) is refused before any work; Python then retries with copies.
_OBJECT_ENTRY = r"""
int64_t loom_last_team(void) { return __atomic_load_n(&loom_team, __ATOMIC_RELAXED); }

int32_t loom_call(const char *objs, const int64_t *meta, int64_t nthreads) {
  const int64_t item_off = meta[0], data_off = meta[1], nslot = meta[2], nobj = meta[3];
  const int64_t *slot = meta + 4, *info = slot + 2 * nslot, *kmeta = info + 4 * nobj;
  char *data[nobj];
  for (int64_t o = 0; o < nobj; o++) {
    const char *obj = *(const char *const *)(objs + item_off + 8 * o);
    data[o] = *(char *const *)(obj + data_off);
    if ((uintptr_t)data[o] % (uintptr_t)info[4 * o + 3]) return -2;
  }
  const char *lo0 = data[0] + info[0], *hi0 = data[0] + info[1];
  for (int64_t o = 1; o < nobj && hi0 > lo0; o++) {
    const char *lo = data[o] + info[4 * o], *hi = data[o] + info[4 * o + 1];
    if (hi > lo && lo < hi0 && lo0 < hi && !(info[4 * o + 2] && data[o] == data[0])) return -1;
  }
  void *ptrs[nslot];
  for (int64_t s = 0; s < nslot; s++) ptrs[s] = data[slot[2 * s]] + slot[2 * s + 1];
  int32_t err = 0;
  loom_kernel(ptrs, kmeta, &err, nthreads < 1 ? 1 : nthreads);
  return err;
}
"""

_MVEC_DECLS_TEMPLATE = """
#ifdef LOOM_MVEC
{decls}
#endif
"""


def mvec_decls() -> str:
    """OpenMP SIMD declarations that let gcc call glibc's libmvec from vectorised loops."""
    lines = []
    for f in MVEC_FUNCS:
        two = f in ("pow", "atan2")
        for T, s in (("float", "f"), ("double", "")):
            args = f"{T}, {T}" if two else T
            lines.append(f"#pragma omp declare simd notinbranch\nextern {T} {f}{s}({args});")
    return _MVEC_DECLS_TEMPLATE.format(decls="\n".join(lines))


def _indent(lines, depth: int) -> list[str]:
    out = []
    for ln in lines:
        if isinstance(ln, _Block):
            out += _indent(ln.lines, depth + 1)
        else:
            out.append("  " * depth + ln)
    return out


_MARK = re.compile(r"@([LG])(\d+)@")


def _subst(text: str, leaf, guard) -> str:
    return _MARK.sub(lambda m: leaf(int(m.group(2))) if m.group(1) == "L" else guard(int(m.group(2))), text)


class _Source:
    """Assembles the kernel's C text from the walker's statements."""

    def __init__(self, w: _Walker, out_var: str):
        self.w = w
        self.out_var = out_var
        self.n_o, self.n_r = w.n_o, w.n_r
        self.L = w.n_o + w.n_r
        self.layout = ArgLayout(w.n_o, w.n_r, len(w.leaves), sum(len(g.sizes) for g in w.guards), len(w.consts))
        self.has_div = bool(w.division_bits)

    # ---------------------------------------------------------------- pieces
    def leaves_of(self, phase: str) -> list[int]:
        return [k for k, lf in enumerate(self.w.leaves) if lf.phase == phase]

    def guards_of(self, phase: str) -> list[int]:
        return [g for g, x in enumerate(self.w.guards) if x.phase == phase]

    def typed_ptrs(self, phases) -> list[str]:
        lines = []
        for k, lf in enumerate(self.w.leaves):
            if lf.phase in phases:
                lines.append(f"const {CTYPE[lf.dtype]} *P{k} = (const {CTYPE[lf.dtype]} *)ptrs[{k + 1}];")
        return lines

    def consts(self) -> list[str]:
        lines = []
        for j, d in enumerate(self.w.const_types):
            conv = {dt.float32: f"loom_f32(k->cb[{j}])", dt.float64: f"loom_f64(k->cb[{j}])"}.get(
                d, f"({CTYPE[d]})k->cb[{j}]")
            lines.append(f"const {CTYPE[d]} c{j} = {conv};")
        return lines

    def run_setup(self, phase: str, inner: str, dims: str, spans: bool = True) -> list[str]:
        """Per-run offsets: leaf offsets/inner strides, and each guard's span of inner indices (`spans`) or
        its per-dim bases (for code that tests it at one point)."""
        lines = []
        for k in self.leaves_of(phase):
            lines.append(f"const int64_t o{k} = k->lo[{k}] + loom_dot(ix, k->ls[{k}], {dims}); "
                         f"const int64_t s{k} = k->ls[{k}][{inner}]; (void)s{k};")
        for g in self.guards_of(phase):
            gd = self.w.guards[g]
            if spans:  # Dims with gn < 0 are not padded (see Kernel._plan): nothing to test.
                i0, i1 = gd.first_dim, gd.first_dim + len(gd.sizes)
                lines.append(f"int64_t gl{g} = 0, gh{g} = INT64_MAX; for (int r_ = {i0}; r_ < {i1}; r_++) "
                             f"if (k->gn[r_] >= 0) loom_span(k->gb[r_] + loom_dot(ix, k->gc[r_], {dims}), "
                             f"k->gc[r_][{inner}], k->gn[r_], &gl{g}, &gh{g});")
                continue
            for r in range(len(gd.sizes)):
                i = gd.first_dim + r
                lines.append(f"const int64_t gb{g}_{r} = k->gb[{i}] + loom_dot(ix, k->gc[{i}], {dims}); "
                             f"const int64_t gn{g}_{r} = k->gn[{i}];")
        return lines

    def guard_expr(self, g: int, idx: str | None) -> str:
        gd = self.w.guards[g]
        if not gd.sizes:
            return "1"
        if idx is not None:  # The run's span of in-range indices (see loom_span).
            return f"({idx} >= gl{g} && {idx} < gh{g})"
        return "(" + " && ".join(f"(gn{g}_{r} < 0 || loom_in(gb{g}_{r}, gn{g}_{r}))"
                                 for r in range(len(gd.sizes))) + ")"

    def body_text(self, blk: _Block, leaf_access, idx: str | None, depth: int) -> list[str]:
        text = "\n".join(_indent(blk.lines, depth))
        text = _subst(text, leaf_access, lambda g: self.guard_expr(g, idx))
        return text.split("\n") if text else []

    def variants(self, phase: str, blk: _Block, loop_head: str, tail: list[str], pragma: str, idx: str,
                 fast_flag: str, bm_flag: str, depth: int, wrap: tuple[list[str], list[str]] = ([], [])
                 ) -> list[str]:
        """The inner loop in its contiguous variants (one per broadcast mask) and the generic strided one.

        `wrap` gives lines around the loop (a blocking loop, say), repeated in every variant.
        """
        leaves = self.leaves_of(phase)
        slotted = [k for k in leaves if self.w.leaves[k].slot >= 0]
        pad = "  " * depth

        def loop(access, body_tail, d: int) -> list[str]:
            p = "  " * d
            w = len(wrap[0]) > 0
            lines = [p + x for x in wrap[0]]
            q = p + ("  " if w else "")
            lines += [f"{q}{pragma}", f"{q}{loop_head} {{"]
            lines += self.body_text(blk, access, idx, d + 1 + w)
            lines += [f"{q}  {t}" for t in body_tail] + [f"{q}}}"]
            return lines + [p + x for x in wrap[1]]

        out = [f"{pad}if (k->{fast_flag}) {{", f"{pad}  switch (k->{bm_flag}) {{"]
        for mask in bcast_masks(len(slotted)):
            hoisted = {k for k in slotted if mask >> self.w.leaves[k].slot & 1}
            out.append(f"{pad}  case {mask}: {{")
            for k in sorted(hoisted):
                out.append(f"{pad}    const {CTYPE[self.w.leaves[k].dtype]} h{k} = P{k}[o{k}];")

            def access(k, hoisted=hoisted):
                return f"h{k}" if k in hoisted else f"P{k}[o{k} + {idx}]"
            out += loop(access, tail[0], depth + 2)
            out.append(f"{pad}  }} break;")
        out.append(f"{pad}  }}")
        out.append(f"{pad}}} else {{")
        out += loop(lambda k: f"P{k}[o{k} + {idx} * s{k}]", tail[1], depth + 1)
        out.append(f"{pad}}}")
        return out

    # ---------------------------------------------------------------- accumulators
    def acc_type(self, a: Acc) -> str:
        if a.op == "sum":
            return "double" if a.dtype.is_floating_point else "int64_t"
        if a.op == "prod":
            return CTYPE[a.dtype] if a.dtype.is_floating_point else "int64_t"
        return CTYPE[a.dtype]

    def acc_init(self, a: Acc) -> str:
        if a.op in ("sum", "prod"):
            return "0" if a.op == "sum" else "1"
        lo, hi = ("-INFINITY", "INFINITY") if a.dtype.is_floating_point else _INT_LIMITS[a.dtype]
        return lo if a.op == "max" else hi

    def acc_update(self, a: Acc, acc: str, v: str, flag: str | None) -> list[str]:
        T = self.acc_type(a)
        if a.op == "sum":
            return [f"{acc} += ({T}){v};"]
        if a.op == "prod":
            return [f"{acc} *= ({T}){v};"]
        cmp = ">" if a.op == "max" else "<"
        if a.dtype.is_floating_point:
            if flag is None:  # Sticky NaN: once NaN, no comparison replaces it.
                return [f"{acc} = ({v} {cmp} {acc} || {v} != {v}) ? {v} : {acc};"]
            return [f"{flag} |= ({v} != {v});", f"{acc} = {v} {cmp} {acc} ? {v} : {acc};"]
        return [f"{acc} = {v} {cmp} {acc} ? {v} : {acc};"]

    def acc_final(self, a: Acc, acc: str, flag: str | None) -> str:
        d = a.dtype
        if d is dt.bool_:
            return f"(uint8_t)({acc} != 0)"
        if a.op in ("max", "min") and d.is_floating_point and flag is not None:
            return f"({flag} ? ({CTYPE[d]})NAN : {acc})"
        return f"({CTYPE[d]}){acc}"

    def blocked(self) -> list[int]:
        """Float32 sums: added in float within blocks of BLOCK elements, the block sums in double."""
        return [i for i, a in enumerate(self.w.accs) if a.op == "sum" and a.dtype is dt.float32]

    def reduction_clause(self, flags: bool) -> str:
        parts = []
        blocked = self.blocked() if flags else []
        for i, a in enumerate(self.w.accs):
            op = {"sum": "+", "prod": "*", "max": "max", "min": "min"}[a.op]
            parts.append(f"reduction({op}:{'b' if i in blocked else 'a'}{i})")
            if flags and a.op in ("max", "min") and a.dtype.is_floating_point:
                parts.append(f"reduction(|:f{i})")
        if self.has_div:
            parts.append("reduction(|:zf)")
        return " ".join(parts)

    # ---------------------------------------------------------------- functions
    def render(self) -> str:
        w = self.w
        NO = self.n_o
        src = [f"/* loom kernel, format {FORMAT_VERSION}: {NO} output dims, {self.n_r} reduced dims, "
               f"{len(w.leaves)} leaves, {len(w.guards)} guards, {len(w.accs)} accumulators */",
               _HELPERS, mvec_decls() if w.uses_mvec else "", self.layout.c_struct()]
        if w.accs:
            src += self.render_reduce()
        else:
            src += self.render_elementwise()
        return "\n".join(src) + "\n"

    def unravel(self, var: str, lo: int, hi: int) -> str:
        return (f"{{ int64_t t_ = {var}; for (int d = {hi - 1}; d >= {lo}; d--) "
                f"{{ ix[d] = t_ % k->n[d]; t_ /= k->n[d]; }} }}")

    def store(self, var: str, idx: str = "i") -> list[list[str]]:
        return [[f"OUT[oo + {idx}] = {var};"], [f"OUT[oo + {idx} * osi] = {var};"]]

    def render_elementwise(self) -> list[str]:
        NO, L = self.n_o, self.L
        T = CTYPE[self.w.body.outputs[0].dtype]
        # One copy of each run_* (noinline) serves the serial call and every thread, so a result never depends
        # on the thread count through differently vectorised inlined copies.
        lines = ["__attribute__((noinline)) static void run_elem(const K *k, void **ptrs, int64_t lo, int64_t hi, "
                 "int32_t *zfp) {",
                 f"  {T} *OUT = ({T} *)ptrs[0];", *["  " + x for x in self.typed_ptrs(("post",))],
                 *["  " + x for x in self.consts()],
                 f"  int32_t zf = 0; int64_t ix[{L}] = {{0}};", "  " + self.unravel("lo", 0, NO),
                 "  int64_t o = lo;", "  while (o < hi) {",
                 f"    int64_t len = k->n[{NO - 1}] - ix[{NO - 1}]; if (len > hi - o) len = hi - o;",
                 *["    " + x for x in self.run_setup("post", str(NO - 1), str(NO))],
                 f"    const int64_t oo = loom_dot(ix, k->os, {NO}), osi = k->os[{NO - 1}]; (void)osi;"]
        pragma = "#pragma omp simd " + ("reduction(|:zf)" if self.has_div else "")
        lines += self.variants("post", self.w.post, "for (int64_t i = 0; i < len; i++)",
                               self.store(self.out_var),
                               pragma, "i", "fast_post", "bm_post", 2)
        lines += [f"    o += len; ix[{NO - 1}] += len;",
                  f"    for (int d = {NO - 1}; d > 0 && ix[d] >= k->n[d]; d--) {{ ix[d] = 0; ix[d - 1]++; }}",
                  "  }", "  *zfp |= zf;", "}", ""]
        lines += self.entry(elementwise=True)
        return lines

    def acc_struct(self) -> list[str]:
        fields = []
        for i, a in enumerate(self.w.accs):
            fields.append(f"{self.acc_type(a)} a{i}; int32_t f{i};")
        init = " ".join(f"A->a{i} = {self.acc_init(a)}; A->f{i} = 0;" for i, a in enumerate(self.w.accs))
        merge = []
        for i, a in enumerate(self.w.accs):
            if a.op == "sum":
                merge.append(f"A->a{i} += B->a{i};")
            elif a.op == "prod":
                merge.append(f"A->a{i} *= B->a{i};")
            else:
                cmp = ">" if a.op == "max" else "<"
                merge.append(f"A->f{i} |= B->f{i}; A->a{i} = B->a{i} {cmp} A->a{i} ? B->a{i} : A->a{i};")
        return ["typedef struct { " + " ".join(fields) + " } Acc;",
                f"static inline void acc_init(Acc *A) {{ {init} }}",
                f"static inline void acc_merge(Acc *A, const Acc *B) {{ {' '.join(merge)} }}", ""]

    def pre_tail(self, indexed: bool, flags: bool) -> list[str]:
        lines = []
        blocked = self.blocked() if flags else []
        for a, ev in self.w.acc_updates:
            if a in blocked:
                lines.append(f"b{a} += {ev};")
                continue
            acc = f"a{a}[t]" if indexed else f"a{a}"
            lines += self.acc_update(self.w.accs[a], acc, ev, f"f{a}" if flags else None)
        return lines

    def render_reduce(self) -> list[str]:
        NO, L = self.n_o, self.L
        w = self.w
        T = CTYPE[w.body.outputs[0].dtype]
        lines = self.acc_struct()
        # Accumulate over the flat reduced range [rlo, rhi) for the output index in ix[0:NO].
        # Not inlined: inlined into its callers gcc failed to vectorise its loop (2.5x slower on short rows).
        lines += ["__attribute__((noinline)) static void red_part(const K *k, void **ptrs, int64_t *ix, int64_t rlo, "
                  "int64_t rhi, Acc *A, int32_t *zfp) {",
                  "  if (rlo >= rhi) return;", *["  " + x for x in self.typed_ptrs(("pre",))],
                  *["  " + x for x in self.consts()], "  int32_t zf = 0;"]
        for i, a in enumerate(w.accs):
            lines.append(f"  {self.acc_type(a)} a{i} = A->a{i}; int32_t f{i} = A->f{i}; (void)f{i};")
        lines += [f"  if (rlo == 0) {{ for (int d = {NO}; d < {L}; d++) ix[d] = 0; }} else "
                  + self.unravel("rlo", NO, L),
                  "  int64_t r = rlo;", "  while (r < rhi) {",
                  f"    int64_t len = k->n[{L - 1}] - ix[{L - 1}]; if (len > rhi - r) len = rhi - r;",
                  *["    " + x for x in self.run_setup("pre", str(L - 1), str(L))]]
        tail = self.pre_tail(False, True)
        blocked = self.blocked()
        wrap: tuple[list[str], list[str]] = ([], [])
        head = "for (int64_t i = 0; i < len; i++)"
        if blocked:
            head = "for (int64_t i = c_; i < ce_; i++)"
            wrap = ([f"for (int64_t c_ = 0; c_ < len; c_ += {BLOCK}) {{",
                     f"  const int64_t ce_ = len - c_ < {BLOCK} ? len : c_ + {BLOCK};",
                     "  " + " ".join(f"float b{i} = 0.0f;" for i in blocked)],
                    ["  " + " ".join(f"a{i} += (double)b{i};" for i in blocked), "}"])
        lines += self.variants("pre", w.pre, head, [tail, tail], "#pragma omp simd " + self.reduction_clause(True),
                               "i", "fast_a", "bm_a", 2, wrap)
        lines += [f"    r += len; ix[{L - 1}] += len;",
                  f"    for (int d = {L - 1}; d > {NO} && ix[d] >= k->n[d]; d--) {{ ix[d] = 0; ix[d - 1]++; }}",
                  "  }"]
        for i, _ in enumerate(w.accs):
            lines.append(f"  A->a{i} = a{i}; A->f{i} = f{i};")
        lines += ["  *zfp |= zf;", "}", ""]
        # The elementwise tail for one output element.
        lines += ["static inline void post_one(const K *k, void **ptrs, const int64_t *ix, const Acc *A, "
                  "int32_t *zfp) {",
                  f"  {T} *OUT = ({T} *)ptrs[0];", *["  " + x for x in self.typed_ptrs(("post",))],
                  *["  " + x for x in self.consts()], "  int32_t zf = 0;"]
        for i, a in enumerate(w.accs):
            lines.append(f"  const {CTYPE[a.dtype]} r{i} = {self.acc_final(a, f'A->a{i}', f'A->f{i}')};")
        lines += ["  " + x for x in self.run_setup("post", "0", str(NO), spans=False)]
        lines += self.body_text(w.post, lambda k: f"P{k}[o{k}]", None, 1)
        lines += [f"  OUT[loom_dot(ix, k->os, {NO})] = {self.out_var};", "  *zfp |= zf;", "}", ""]
        # Mode A: each output element reduces its whole range (contiguous reduced dims).
        lines += ["__attribute__((noinline)) static void run_A(const K *k, void **ptrs, int64_t lo, int64_t hi, "
                  "int64_t RT, int32_t *zfp) {",
                  f"  int64_t ix[{L}] = {{0}};", "  " + self.unravel("lo", 0, NO),
                  "  for (int64_t o = lo; o < hi; o++) {",
                  "    Acc A; acc_init(&A); red_part(k, ptrs, ix, 0, RT, &A, zfp); post_one(k, ptrs, ix, &A, zfp);",
                  f"    for (int d = {NO - 1}; d >= 0; d--) {{ if (++ix[d] < k->n[d]) break; ix[d] = 0; }}",
                  "  }", "}", ""]
        lines += self.render_mode_b()
        if w.row_reduce:
            lines += self.render_mode_r()
        lines += self.entry(elementwise=False)
        return lines

    def render_mode_r(self) -> list[str]:
        """Mode 2, rows: where the reduction does not depend on the innermost output index (a row
        reduction broadcast back along the row), reduce once per run of that index, then write the run."""
        NO, L = self.n_o, self.L
        w = self.w
        T = CTYPE[w.body.outputs[0].dtype]
        lines = ["__attribute__((noinline)) static void run_R(const K *k, void **ptrs, int64_t lo, int64_t hi, "
                 "int64_t RT, int32_t *zfp) {",
                 f"  {T} *OUT = ({T} *)ptrs[0];", *["  " + x for x in self.typed_ptrs(("post",))],
                 *["  " + x for x in self.consts()], "  int32_t zf = 0;",
                 f"  int64_t ix[{L}] = {{0}};", "  " + self.unravel("lo", 0, NO), "  int64_t o = lo;",
                 "  while (o < hi) {",
                 f"    int64_t len = k->n[{NO - 1}] - ix[{NO - 1}]; if (len > hi - o) len = hi - o;",
                 "    Acc A; acc_init(&A); red_part(k, ptrs, ix, 0, RT, &A, zfp);"]
        for i, a in enumerate(w.accs):
            lines.append(f"    const {CTYPE[a.dtype]} r{i} = {self.acc_final(a, f'A.a{i}', f'A.f{i}')};")
        lines += ["    " + x for x in self.run_setup("post", str(NO - 1), str(NO))]
        lines.append(f"    const int64_t oo = loom_dot(ix, k->os, {NO}), osi = k->os[{NO - 1}]; (void)osi;")
        pragma = "#pragma omp simd " + ("reduction(|:zf)" if self.has_div else "")
        lines += self.variants("post", w.post, "for (int64_t i = 0; i < len; i++)", self.store(self.out_var),
                               pragma, "i", "fast_post", "bm_post", 2)
        lines += [f"    o += len; ix[{NO - 1}] += len;",
                  f"    for (int d = {NO - 1}; d > 0 && ix[d] >= k->n[d]; d--) {{ ix[d] = 0; ix[d - 1]++; }}",
                  "  }", "  *zfp |= zf;", "}", ""]
        return lines

    def render_mode_b(self) -> list[str]:
        """Mode B: tiles of the innermost output dim accumulate together while the reduced dims advance."""
        NO, L = self.n_o, self.L
        w = self.w
        T = CTYPE[w.body.outputs[0].dtype]
        lines = ["__attribute__((noinline)) static void run_B(const K *k, void **ptrs, int64_t lo, int64_t hi, "
                 "int64_t RT, int32_t *zfp) {",
                 f"  {T} *OUT = ({T} *)ptrs[0];", *["  " + x for x in self.typed_ptrs(("pre", "post"))],
                 *["  " + x for x in self.consts()], "  int32_t zf = 0;",
                 f"  int64_t ix[{L}] = {{0}};", "  " + self.unravel("lo", 0, NO), "  int64_t o = lo;",
                 "  while (o < hi) {",
                 f"    int64_t len = k->n[{NO - 1}] - ix[{NO - 1}]; if (len > hi - o) len = hi - o;",
                 f"    const int64_t base = ix[{NO - 1}];",
                 f"    for (int64_t t0 = 0; t0 < len; t0 += {TILE}) {{",
                 f"      const int64_t tn = len - t0 < {TILE} ? len - t0 : {TILE};",
                 f"      ix[{NO - 1}] = base + t0;"]
        for i, a in enumerate(w.accs):
            lines.append(f"      {self.acc_type(a)} a{i}[{TILE}];")
            lines.append(f"      for (int64_t t = 0; t < tn; t++) a{i}[t] = {self.acc_init(a)};")
        lines += [f"      for (int d = {NO}; d < {L}; d++) ix[d] = 0;",
                  "      for (int64_t r = 0; r < RT; r++) {",
                  *["        " + x for x in self.run_setup("pre", str(NO - 1), str(L))]]
        tail = self.pre_tail(True, False)
        pragma = "#pragma omp simd" + (" reduction(|:zf)" if self.has_div else "")
        lines += self.variants("pre", w.pre, "for (int64_t t = 0; t < tn; t++)", [tail, tail], pragma, "t",
                               "fast_b", "bm_b", 4)
        lines += [f"        for (int d = {L - 1}; d >= {NO}; d--) {{ if (++ix[d] < k->n[d]) break; ix[d] = 0; }}",
                  "      }",
                  *["      " + x for x in self.run_setup("post", str(NO - 1), str(NO))],
                  f"      const int64_t oo = loom_dot(ix, k->os, {NO}), osi = k->os[{NO - 1}]; (void)osi;"]
        finals = [f"const {CTYPE[a.dtype]} r{i} = {self.acc_final(a, f'a{i}[t]', None)};"
                  for i, a in enumerate(w.accs)]
        post = _Block(finals + list(w.post.lines))
        lines += self.variants("post", post, "for (int64_t t = 0; t < tn; t++)", self.store(self.out_var, "t"),
                               pragma, "t",
                               "fast_post", "bm_post", 3)
        lines += ["    }", f"    ix[{NO - 1}] = base;",
                  f"    o += len; ix[{NO - 1}] += len;",
                  f"    for (int d = {NO - 1}; d > 0 && ix[d] >= k->n[d]; d--) {{ ix[d] = 0; ix[d - 1]++; }}",
                  "  }", "  *zfp |= zf;", "}", ""]
        return lines

    def entry(self, elementwise: bool) -> list[str]:
        NO, L = self.n_o, self.L
        lines = ["static int64_t loom_team;  /* Size of the last call's thread team, for loom_last_team. */",
                 "static void loom_kernel(void **ptrs, const int64_t *meta, int32_t *err, int64_t nthreads) {",
                 "  K kk; memcpy(&kk, meta, sizeof kk); const K *k = &kk;",
                 f"  int64_t OT = 1; for (int d = 0; d < {NO}; d++) OT *= k->n[d];",
                 f"  int64_t RT = 1; for (int d = {NO}; d < {L}; d++) RT *= k->n[d];",
                 "  if (OT == 0) return;",
                 "  const int64_t work = OT * (RT > 0 ? RT : 1);",
                 "  int nthr = work >= k->par_min ? (int)nthreads : 1;",
                 "  int32_t zf = 0;",
                 "  if (nthr <= 1) __atomic_store_n(&loom_team, 1, __ATOMIC_RELAXED);"]
        if elementwise:
            lines += ["  if (nthr <= 1) run_elem(k, ptrs, 0, OT, &zf);",
                      "  else {", "    #pragma omp parallel num_threads(nthr) reduction(|:zf)", "    {",
                      "      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();",
                      "      if (t == 0) __atomic_store_n(&loom_team, nt, __ATOMIC_RELAXED);",
                      "      run_elem(k, ptrs, OT * t / nt, OT * (t + 1) / nt, &zf);", "    }", "  }"]
        else:
            lines += ["  if (nthr > 1 && OT < nthr) {",
                      "    /* Few outputs: split each reduction across the threads and merge the partials. */",
                      f"    int64_t ix[{L}] = {{0}};",
                      "    for (int64_t o = 0; o < OT; o++) {",
                      "      Acc part[nthr]; for (int t = 0; t < nthr; t++) acc_init(&part[t]);",
                      "      #pragma omp parallel num_threads(nthr) reduction(|:zf)", "      {",
                      "        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();",
                      "        if (t == 0) __atomic_store_n(&loom_team, nt, __ATOMIC_RELAXED);",
                      f"        int64_t jx[{L}]; memcpy(jx, ix, sizeof jx);",
                      "        red_part(k, ptrs, jx, RT * t / nt, RT * (t + 1) / nt, &part[t], &zf);", "      }",
                      "      Acc tot; acc_init(&tot); for (int t = 0; t < nthr; t++) acc_merge(&tot, &part[t]);",
                      "      post_one(k, ptrs, ix, &tot, &zf);",
                      f"      for (int d = {NO - 1}; d >= 0; d--) {{ if (++ix[d] < k->n[d]) break; ix[d] = 0; }}",
                      "    }",
                      "  } else if (nthr <= 1) {",
                      *(["    if (k->mode == 2) run_R(k, ptrs, 0, OT, RT, &zf); else"] if self.w.row_reduce else []),
                      "    if (k->mode == 1) run_B(k, ptrs, 0, OT, RT, &zf); else run_A(k, ptrs, 0, OT, RT, &zf);",
                      "  } else {",
                      "    #pragma omp parallel num_threads(nthr) reduction(|:zf)", "    {",
                      "      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();",
                      "      if (t == 0) __atomic_store_n(&loom_team, nt, __ATOMIC_RELAXED);",
                      *(["      if (k->mode == 2) run_R(k, ptrs, OT * t / nt, OT * (t + 1) / nt, RT, &zf); else"]
                        if self.w.row_reduce else []),
                      "      if (k->mode == 1) run_B(k, ptrs, OT * t / nt, OT * (t + 1) / nt, RT, &zf);",
                      "      else run_A(k, ptrs, OT * t / nt, OT * (t + 1) / nt, RT, &zf);", "    }", "  }"]
        lines += ["  if (zf) *err = zf;", "}", "", _OBJECT_ENTRY]
        return lines


# ---------------------------------------------------------------- entry point

def render(body: Graph) -> KernelSpec:
    """Render `body` (placeholders -> one output) as a C kernel; raise `Unsupported` if it cannot be.

    Examples
    --------
    >>> import loom
    >>> from loom.ir import Graph
    >>> g = Graph()
    >>> x = g.add_input((4, 3), loom.float32)
    >>> g.outputs = [g.add_node("sum", [g.add_node("exp", [x])], {"axes": (1,), "keepdim": False})]
    >>> spec = render(g)
    >>> spec.n_o, spec.n_r, len(spec.leaves), "expf(" in spec.source
    (1, 1, 1, True)
    """
    if len(body.outputs) != 1:
        raise Unsupported(f"a kernel body has one output, this one has {len(body.outputs)}")
    body = half.widen(body)
    out = body.outputs[0]
    if out.dtype not in CTYPE:
        raise Unsupported(f"output dtype {out.dtype.name}")
    for n in body.topological_order():
        if n.dtype.category == 3:  # No complex C types: those nodes run on the reference path.
            raise Unsupported(f"complex dtype {n.dtype.name} ({n.op})")
    w = _Walker(body)
    out_var = w.run()
    if w.accs:
        for a in w.accs:
            if a.dtype not in CTYPE:
                raise Unsupported(f"reduction dtype {a.dtype.name}")
    s = _Source(w, out_var)
    spec = KernelSpec(s.render(), w.out_shape, out.dtype, w.n_o, w.n_r, w.loop_sizes, w.leaves, w.guards,
                      w.consts, w.accs, w.divisions, w.uses_mvec, s.layout, w.row_reduce)
    return spec
