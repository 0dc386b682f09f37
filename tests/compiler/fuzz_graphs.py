"""Random valid graphs over the whole primitive set, for differential tests of the execution modes.

A graph is built from two seeds. The *structure* seed makes every structural
choice (ops, operands, axes, permutations, dtypes, which dims are which);
the *size* seed draws everything else: the size of each symbolic dim, slice
and pad parameters, gather/scatter indices, constants and the input data.
Shapes are tracked symbolically (a dim is a variable, a product of dims, a
literal 1 or a fresh dim made by slice/pad/gather), so operands are paired by
symbolic shape and one structure gives the same kernels at every size: the
C kernels of a pool of structures are built once and then serve thousands of
graphs.

Every value carries two facts that decide how results are compared:
`exact` (each mode must give the same bits: no transcendental function, no
reordered float sum on the way) and `bound` (a bound on its magnitude, so
transcendental ops are only fed well-conditioned inputs). Discontinuous ops
(floor, compare, casts to int, argsort, ...) only take exact inputs, so a
rounding difference upstream can never turn into a large difference.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

import loom
from loom.ir import Graph
from loom.ir.node import Node

F16, BF16, F32, F64 = loom.float16, loom.bfloat16, loom.float32, loom.float64
I32, I64, BOOL = loom.int32, loom.int64, loom.bool
FLOATS = (F32, F64)
INF = math.inf

# Transcendental functions: libm and NumPy may differ in the last bits.
INEXACT_UNARY = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "erf")


def _times(a: float, b: float) -> float:
    """a * b for magnitude bounds (0 times an unknown bound is 0, not NaN)."""
    return 0.0 if a == 0 or b == 0 else a * b


@dataclass
class Val:
    node: Node
    sym: tuple          # Symbolic shape: one token per dim.
    exact: bool         # Every mode must produce identical bits.
    bound: float        # |value| <= bound for finite inputs (INF: unknown).

    @property
    def dtype(self):
        return self.node.dtype


class GraphBuilder:
    """One random graph; `build()` returns (graph, input arrays, per-output exactness)."""

    def __init__(self, struct_seed: int, size_seed: int, n_ops: int | None = None):
        self.rs = random.Random(struct_seed)
        self.rz = random.Random(size_seed * 7919 + 17)
        self.np_rng = np.random.default_rng(size_seed)
        self.g = Graph()
        self.arrays: list[np.ndarray] = []
        self.vals: list[Val] = []
        self.fresh: dict[int, int] = {}
        self.n_vars = 4
        self.var_sizes = [self._var_size() for _ in range(self.n_vars)]
        if self.rz.random() < 0.15:  # Sometimes one long dim, so kernels meet longer loops.
            self.var_sizes[0] = self.rz.randint(6, 40)
        self.n_ops = n_ops if n_ops is not None else self.rs.randint(5, 14)

    # ------------------------------------------------------------ sizes
    def _var_size(self) -> int:
        r = self.rz.random()
        return 0 if r < 0.04 else 1 if r < 0.12 else self.rz.randint(2, 5)

    def size(self, tok) -> int:
        kind = tok[0]
        if kind == "v":
            return self.var_sizes[tok[1]]
        if kind == "one":
            return 1
        if kind == "f":
            return self.fresh[tok[1]]
        return self.size(tok[1]) * self.size(tok[2])  # ("m", a, b): a merged dim.

    def shape(self, sym) -> tuple[int, ...]:
        return tuple(self.size(t) for t in sym)

    def new_fresh(self, size: int) -> tuple:
        k = len(self.fresh)
        self.fresh[k] = size
        return ("f", k)

    def random_sym(self) -> tuple:
        rank = self.rs.choice([0, 1, 1, 2, 2, 2, 3, 3])
        return tuple(("v", self.rs.randrange(self.n_vars)) if self.rs.random() < 0.85 else ("one",)
                     for _ in range(rank))

    # ------------------------------------------------------------ leaves
    def data(self, shape, d) -> np.ndarray:
        rng = self.np_rng
        if d is BOOL:
            return rng.integers(0, 2, shape).astype(bool)
        if d.is_floating_point:
            a = (rng.integers(-400, 401, shape) / 100).astype(d.np)
            if a.size and rng.random() < 0.15:
                flat = a.reshape(-1)
                k = max(1, a.size // 6)
                flat[rng.integers(0, a.size, k)] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], d.np), k)
            return a
        return rng.integers(-20, 21, shape).astype(d.np)

    def input(self, sym, d) -> Val:
        shape = self.shape(sym)
        node = self.g.add_input(shape, d)
        a = self.data(shape, d)
        self.arrays.append(a)
        finite = not (d.is_floating_point and a.size and not np.isfinite(a).all())
        return self.add(Val(node, sym, True, 20.0 if finite else INF))

    def index_input(self, sym, n: int) -> Val:
        """An int64 input of symbolic shape `sym` holding indices in [-n, n)."""
        shape = self.shape(sym)
        node = self.g.add_input(shape, I64)
        self.arrays.append(self.np_rng.integers(-n, n, shape).astype(np.int64) if n else
                           np.zeros(shape, np.int64))
        return Val(node, sym, True, float(n))

    def const(self, sym, d, value=None) -> Val:
        if value is None:
            value = (self.rz.random() < 0.5) if d is BOOL else (
                round(self.rz.uniform(-3, 3), 2) if d.is_floating_point else self.rz.randint(-5, 5))
        node = self.g.add_node("const", [], {"value": value, "shape": self.shape(sym), "dtype": d})
        return Val(node, sym, True, abs(float(value)))

    def add(self, v: Val) -> Val:
        self.vals.append(v)
        return v

    def node(self, op, ins, attrs=None) -> Node:
        return self.g.add_node(op, [i.node for i in ins], attrs or {})

    # ------------------------------------------------------------ operands
    def pick(self, pred=lambda v: True) -> Val | None:
        options = [v for v in self.vals if pred(v)]
        if not options:
            return None
        # Favour recent values so graphs grow deep rather than wide.
        k = len(options)
        return options[min(k - 1, int(k * (1 - self.rs.random() ** 2)))]

    def partner(self, x: Val, d=None, exact_only=False) -> Val:
        """A value with x's symbolic shape (and dtype d): an existing one, a new input or a constant."""
        d = d or x.dtype
        if self.rs.random() < 0.55:
            v = self.pick(lambda v: v.sym == x.sym and v.dtype is d and v is not x and (v.exact or not exact_only))
            if v is not None:
                return v
        if self.rs.random() < 0.25:
            return self.const(x.sym, d)
        return self.input(x.sym, d)

    def safe_positive(self, x: Val) -> Val:
        """|x| + 1: a value >= 1 (a divisor or a log argument that cannot misbehave)."""
        one = self.const(x.sym, x.dtype, 1 if not x.dtype.is_floating_point else 1.0)
        return Val(self.node("add", [Val(self.node("abs", [x]), x.sym, x.exact, x.bound), one]), x.sym, x.exact,
                   x.bound + 1)

    def squash(self, x: Val, limit: float) -> Val:
        """x itself if |x| <= limit, else tanh(x) (in [-1, 1])."""
        if x.bound <= limit:
            return x
        return Val(self.node("tanh", [x]), x.sym, False, 1.0)

    # ------------------------------------------------------------ steps
    def step(self) -> None:
        kind = self.rs.choices(
            ["unary", "binary", "compare_where", "cast", "reduce", "movement", "matmul", "gather", "scatter",
             "argsort", "source"],
            [28, 20, 8, 6, 10, 20, 4, 4, 3, 2, 5])[0]
        getattr(self, "step_" + kind)()

    def step_source(self) -> None:
        r = self.rs.random()
        if r < 0.35:
            self.add(self.const(self.random_sym(), self.rs.choice([F32, F64, I64, BOOL])))
        elif r < 0.7:
            d = self.rs.choice([F32, F64, I32, I64])
            tok = ("v", self.rs.randrange(self.n_vars))
            start = self.rz.randint(-5, 5) if not d.is_floating_point else round(self.rz.uniform(-2, 2), 2)
            step = self.rz.choice([1, 2, -1, 3]) if not d.is_floating_point else self.rz.choice([0.5, 0.25, -1.5])
            n = self.size(tok)
            node = self.g.add_node("arange", [], {"start": start, "step": step, "shape": (n,), "dtype": d})
            self.add(Val(node, (tok,), True, abs(start) + abs(step) * n))
        else:
            d = self.rs.choice(FLOATS)
            sym = self.random_sym()
            node = self.g.add_node("rand", [], {"seed": self.rz.randrange(1 << 64), "shape": self.shape(sym),
                                                "dtype": d})
            self.add(Val(node, sym, True, 1.0))

    def step_unary(self) -> None:
        x = self.pick(lambda v: v.dtype is not BOOL)
        if x is None:
            return self.step_source()
        if not x.dtype.is_floating_point:
            op = self.rs.choice(["neg", "abs", "sign", "not"])
            return self.add(Val(self.node(op, [x]), x.sym, True, x.bound + 1))
        op = self.rs.choice(["neg", "abs", "floor", "ceil", "round", "trunc", "sign", "sqrt", "recip", "log",
                             "log1p", "exp", "expm1", "sin", "cos", "tan", "tanh", "erf"])
        if op in ("floor", "ceil", "round", "trunc", "sign") and not x.exact:
            op = "abs"
        if op in ("neg", "abs", "floor", "ceil", "round", "trunc", "sign"):
            return self.add(Val(self.node(op, [x]), x.sym, x.exact, x.bound + 1))
        if op == "sqrt":
            a = Val(self.node("abs", [x]), x.sym, x.exact, x.bound)
            return self.add(Val(self.node("sqrt", [a]), x.sym, x.exact, math.sqrt(x.bound)))
        if op == "recip":
            p = self.safe_positive(x)
            return self.add(Val(self.node("recip", [p]), x.sym, p.exact, 1.0))
        if op in ("log", "log1p"):
            p = self.safe_positive(x) if op == "log" else Val(self.node("abs", [x]), x.sym, x.exact, x.bound)
            return self.add(Val(self.node(op, [p]), x.sym, False, math.log1p(p.bound) + 1))
        if op in ("exp", "expm1"):
            s = self.squash(x, 8.0)
            return self.add(Val(self.node(op, [s]), x.sym, False, math.exp(s.bound) + 1))
        s = self.squash(x, 1.4 if op == "tan" else 30.0)
        return self.add(Val(self.node(op, [s]), x.sym, False, 8.0 if op == "tan" else 1.0))

    def step_binary(self) -> None:
        x = self.pick()
        if x is None:
            return self.step_source()
        d = x.dtype
        if d is BOOL:
            y = self.partner(x)
            op = self.rs.choice(["and", "or", "xor"])
            return self.add(Val(self.node(op, [x, y]), x.sym, True, 1.0))
        y = self.partner(x)
        exact = x.exact and y.exact
        ops = ["add", "sub", "mul", "maximum", "minimum", "div", "floordiv", "mod"]
        ops += ["pow", "atan2"] if d.is_floating_point else ["and", "or", "xor"]
        op = self.rs.choice(ops)
        if op in ("add", "sub"):
            return self.add(Val(self.node(op, [x, y]), x.sym, exact, x.bound + y.bound))
        if op == "mul":
            if _times(x.bound, y.bound) > (1e3 if d is F16 else 1e6) and d.is_floating_point:
                x, y = self.squash(x, 1.0), self.squash(y, 1.0)
            return self.add(Val(self.node(op, [x, y]), x.sym, x.exact and y.exact, _times(x.bound, y.bound)))
        if op in ("maximum", "minimum"):
            return self.add(Val(self.node(op, [x, y]), x.sym, exact, max(x.bound, y.bound)))
        if op in ("and", "or", "xor"):
            return self.add(Val(self.node(op, [x, y]), x.sym, True, INF))
        if op == "pow":
            base = self.safe_positive(x)
            e = Val(self.node("tanh", [y]), y.sym, False, 1.0)
            return self.add(Val(self.node("pow", [base, e]), x.sym, False, base.bound + 1))
        if op == "atan2":
            if not exact:  # Discontinuous where y < 0 and x crosses zero.
                return
            return self.add(Val(self.node("atan2", [x, y]), x.sym, False, 4.0))  # libm: last-bit differences.
        if d.is_floating_point:
            if op == "div":
                if y.exact:
                    return self.add(Val(self.node("div", [x, y]), x.sym, exact, INF))
                p = self.safe_positive(y)
                return self.add(Val(self.node("div", [x, p]), x.sym, False, x.bound))
            if not exact:  # floordiv and mod jump at multiples of the divisor.
                return
            return self.add(Val(self.node(op, [x, y]), x.sym, True, INF if op == "floordiv" else y.bound))
        p = self.safe_positive(y)  # Integer division by zero is an error the reference path raises.
        op = "floordiv" if op == "div" else op
        return self.add(Val(self.node(op, [x, p]), x.sym, True, x.bound))

    def step_compare_where(self) -> None:
        x = self.pick(lambda v: v.exact and v.dtype is not BOOL)
        if x is None:
            return self.step_source()
        y = self.partner(x, exact_only=True)
        op = self.rs.choice(["eq", "ne", "lt", "le", "gt", "ge"])
        c = self.add(Val(self.node(op, [x, y]), x.sym, True, 1.0))
        if self.rs.random() < 0.7:
            a = self.pick(lambda v: v.sym == x.sym and v.dtype is not BOOL) or x
            b = self.partner(a)
            self.add(Val(self.node("where", [c, a, b]), x.sym, a.exact and b.exact, max(a.bound, b.bound)))

    def step_cast(self) -> None:
        x = self.pick()
        if x is None:
            return self.step_source()
        src = x.dtype
        targets = [t for t in (F16, BF16, F32, F64, I32, I64, BOOL) if t is not src]
        d = self.rs.choice(targets)
        if d is BF16:  # Through bfloat16 and back: bfloat16 values are never graph inputs or outputs.
            back = src if src.is_floating_point else F32
            mid = Val(self.node("cast", [x], {"dtype": BF16}), x.sym, x.exact, x.bound)
            return self.add(Val(self.node("cast", [mid], {"dtype": back}), x.sym, x.exact, x.bound))
        if src.is_floating_point and not d.is_floating_point:
            if not x.exact:
                d = F64 if src is not F64 else F32
            elif d is not BOOL:
                # Out-of-range and NaN float-to-int conversions are undefined in C: clamp, and map NaN to 0.
                lim = self.const(x.sym, src, 1000.0)
                neg = self.const(x.sym, src, -1000.0)
                zero = self.const(x.sym, src, 0.0)
                clamped = self.node("maximum", [Val(self.node("minimum", [x, lim]), x.sym, True, 1000.0), neg])
                ok = self.node("eq", [x, x])
                x = Val(self.g.add_node("where", [ok, clamped, zero.node]), x.sym, True, 1000.0)
        exact = x.exact and not (src is F64 and d is F32 and not x.exact)
        bound = 1.0 if d is BOOL else x.bound
        self.add(Val(self.node("cast", [x], {"dtype": d}), x.sym, exact, bound))

    def step_reduce(self) -> None:
        x = self.pick(lambda v: len(v.sym) >= 1)
        if x is None:
            return self.step_unary()
        d = x.dtype
        ops = ["max", "min"] if d is BOOL else ["sum", "prod", "max", "min"]
        op = self.rs.choice(ops)
        rank = len(x.sym)
        axes = tuple(self.rs.sample(range(rank), self.rs.randint(1, rank)))  # Unsorted axes are valid too.
        if self.rs.random() < 0.7:
            axes = tuple(sorted(axes))
        keep = self.rs.random() < 0.4
        if op in ("max", "min") and any(self.size(x.sym[a]) == 0 for a in axes):
            op = "sum" if d is not BOOL else None
            if op is None:
                return
        if op == "prod" and d.is_floating_point:
            x = self.squash(x, 1.0)
        sym = tuple(("one",) if i in axes else t for i, t in enumerate(x.sym) if keep or i not in axes)
        n = math.prod(self.size(x.sym[a]) for a in axes) if axes else 1
        exact = x.exact and (op in ("max", "min") or not d.is_floating_point)
        prod_bound = math.exp(min(700.0, max(n, 1) * math.log(x.bound))) if x.bound > 1 else 1.0
        bound = {"sum": _times(x.bound, max(n, 1)), "prod": prod_bound}.get(op, x.bound)
        if op in ("sum", "prod") and not d.is_floating_point:
            bound = INF
        self.add(Val(self.node(op, [x], {"axes": axes, "keepdim": keep}), sym, exact, bound))

    def step_movement(self) -> None:
        x = self.pick()
        if x is None:
            return self.step_source()
        rank = len(x.sym)
        op = self.rs.choice(["reshape", "permute", "expand", "pad", "slice", "flip"])
        if op == "permute" and rank >= 2:
            perm = list(range(rank))
            self.rs.shuffle(perm)
            sym = tuple(x.sym[p] for p in perm)
            return self.add(Val(self.node("permute", [x], {"perm": tuple(perm)}), sym, x.exact, x.bound))
        if op == "flip" and rank >= 1:
            axes = tuple(self.rs.sample(range(rank), self.rs.randint(1, rank)))
            return self.add(Val(self.node("flip", [x], {"axes": axes}), x.sym, x.exact, x.bound))
        if op == "expand" and ("one",) in x.sym:
            sym = tuple(("v", self.rs.randrange(self.n_vars)) if t == ("one",) and self.rs.random() < 0.8 else t
                        for t in x.sym)
            return self.add(Val(self.node("expand", [x], {"shape": self.shape(sym)}), sym, x.exact, x.bound))
        if op == "pad":  # A 0-d value takes an empty pads list.
            pads, sym = [], []
            for t in x.sym:
                if self.rs.random() < 0.5:
                    lo, hi = self.rz.randint(0, 2), self.rz.randint(0, 2)
                    pads.append((lo, hi))
                    sym.append(self.new_fresh(self.size(t) + lo + hi))
                else:
                    pads.append((0, 0))
                    sym.append(t)
            d = x.dtype
            value = (self.rz.random() < 0.5) if d is BOOL else (
                round(self.rz.uniform(-3, 3), 2) if d.is_floating_point else self.rz.randint(-3, 3))
            node = self.node("pad", [x], {"pads": tuple(pads), "value": value})
            return self.add(Val(node, tuple(sym), x.exact, max(x.bound, abs(float(value)))))
        if op == "slice":
            starts, stops, steps, sym = [], [], [], []
            for t in x.sym:
                n = self.size(t)
                if self.rs.random() < 0.6:
                    a, b, c = self.rz.randint(0, n), self.rz.randint(0, n), self.rz.randint(1, 3)
                    sym.append(self.new_fresh(max(0, (b - a + c - 1) // c)))
                else:
                    a, b, c = 0, n, 1
                    sym.append(t)
                starts.append(a)
                stops.append(b)
                steps.append(c)
            node = self.node("slice", [x], {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)})
            return self.add(Val(node, tuple(sym), x.exact, x.bound))
        # Reshape: merge two adjacent dims, split a merged one, or add/drop a 1.
        sym = list(x.sym)
        r = self.rs.random()
        merged = [i for i, t in enumerate(sym) if t[0] == "m"]
        if merged and r < 0.3:
            i = self.rs.choice(merged)
            sym[i:i + 1] = [sym[i][1], sym[i][2]]
        elif rank >= 2 and r < 0.65:
            i = self.rs.randrange(rank - 1)
            sym[i:i + 2] = [("m", sym[i], sym[i + 1])]
        elif ("one",) in sym and r < 0.8:
            sym.remove(("one",))
        else:
            sym.insert(self.rs.randint(0, rank), ("one",))
        sym = tuple(sym)
        return self.add(Val(self.node("reshape", [x], {"shape": self.shape(sym)}), sym, x.exact, x.bound))

    def step_matmul(self) -> None:
        x = self.pick(lambda v: len(v.sym) >= 2 and v.dtype is not BOOL)
        if x is None:
            return self.step_movement()
        if x.dtype.is_floating_point:
            x = self.squash(x, 100.0)
        k_tok = x.sym[-1]
        b_tok = ("v", self.rs.randrange(self.n_vars))
        ysym = x.sym[:-2] + (k_tok, b_tok)
        y = self.partner(Val(x.node, ysym, x.exact, x.bound), x.dtype) if self.rs.random() < 0.5 else \
            self.input(ysym, x.dtype)
        if y.dtype.is_floating_point:
            y = self.squash(y, 100.0)
        exact = not x.dtype.is_floating_point
        k = self.size(k_tok)
        bound = _times(_times(x.bound, y.bound), max(k, 1)) if x.dtype.is_floating_point else INF
        self.add(Val(self.node("matmul", [x, y]), x.sym[:-1] + (b_tok,), exact, bound))

    def step_gather(self) -> None:
        x = self.pick(lambda v: len(v.sym) >= 1)
        if x is None:
            return self.step_source()
        axis = self.rs.randrange(len(x.sym))
        n = self.size(x.sym[axis])
        out_tok = self.new_fresh(self.rz.randint(0, 4) if n else 0)
        sym = x.sym[:axis] + (out_tok,) + x.sym[axis + 1:]
        idx = self.index_input(sym, n)
        self.add(Val(self.node("gather", [x, idx], {"axis": axis}), sym, x.exact, x.bound))

    def step_scatter(self) -> None:
        base = self.pick(lambda v: len(v.sym) >= 1 and v.dtype is not BOOL)
        if base is None:
            return self.step_source()
        axis = self.rs.randrange(len(base.sym))
        n = self.size(base.sym[axis])
        tok = self.new_fresh(self.rz.randint(0, 4) if n else 0)
        sym = base.sym[:axis] + (tok,) + base.sym[axis + 1:]
        idx = self.index_input(sym, n)
        src = self.input(sym, base.dtype)
        exact = base.exact and src.exact and not base.dtype.is_floating_point  # Float sums of duplicates reorder.
        bound = base.bound + _times(src.bound, max(self.size(tok), 1))
        self.add(Val(self.node("scatter_add", [base, idx, src], {"axis": axis}), base.sym, exact, bound))

    def step_argsort(self) -> None:
        x = self.pick(lambda v: v.exact and len(v.sym) >= 1)
        if x is None:
            return self.step_source()
        axis = self.rs.randrange(len(x.sym))
        node = self.node("argsort", [x], {"axis": axis, "descending": self.rs.random() < 0.5})
        self.add(Val(node, x.sym, True, float(self.size(x.sym[axis]))))

    # ------------------------------------------------------------ the graph
    def build(self) -> tuple[Graph, list[np.ndarray], list]:
        self.input(self.random_sym(), self.rs.choice([F32, F32, F64, F16, I32, I64, BOOL]))
        if self.rs.random() < 0.5:
            self.input(self.random_sym(), self.rs.choice([F32, F64, I64]))
        for _ in range(self.n_ops):
            self.step()
        computed = [v for v in self.vals if v.node.op != "input"] or self.vals
        outs = [computed[-1]] + [computed[self.rs.randrange(len(computed))] for _ in range(self.rs.randint(0, 2))]
        outs = list({id(v): v for v in outs}.values())
        self.g.outputs = [v.node for v in outs]
        # An inexact output may carry the rounding errors of a narrower float type upstream (a cast).
        present = {n.dtype for n in self.g}
        coarse = next(d.name for d in (BF16, F16, F32, F64) if d in present or d is F64)
        return self.g, self.arrays, [True if v.exact else coarse for v in outs]


def make_graph(struct_seed: int, size_seed: int) -> tuple[Graph, list[np.ndarray], list]:
    """The random graph for (structure, size) seeds, its input arrays and, per output, True if it must
    match bit for bit, else the name of the float type whose rounding bounds its error."""
    return GraphBuilder(struct_seed, size_seed).build()
