"""Shared tools for the compiler tests: value comparison and a random-graph strategy."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

import loom
from loom.compiler import passes_for_level, run_passes
from loom.ir import Graph

F32, F64 = loom.float32, loom.float64
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float64)


def values(shape, seed=0, dtype=np.float32, specials=0.2):
    """Random normal values with NaN/Inf/±0/±1 sprinkled in."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 2.0
    mask = rng.random(shape) < specials
    a = np.where(mask, rng.choice(SPECIALS, size=shape), a)
    return np.asarray(a, dtype=dtype)


def stored(t):
    """A result tensor's stored-form array (bfloat16 as its uint16 bits)."""
    return np.asarray(t._array())


def assert_same(got, want, exact=True, rtol=1e-6):
    """Outputs agree: shapes, dtypes, NaN positions and zero signs always; the rest bitwise or allclose."""
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype is w.dtype and tuple(g.shape) == tuple(w.shape), (k, g.dtype, w.dtype, g.shape, w.shape)
        a, b = stored(g), stored(w)
        if g.dtype.is_floating_point:
            fa, fb = np.asarray(g.float().numpy(), np.float64), np.asarray(w.float().numpy(), np.float64)
            nan = np.isnan(fb)
            assert np.array_equal(np.isnan(fa), nan), f"output {k}: NaN positions differ"
            zero = fb == 0
            assert np.array_equal(np.signbit(fa[zero]), np.signbit(fb[zero])), f"output {k}: zero signs differ"
            if exact:
                assert np.array_equal(np.where(nan, 0, fa), np.where(nan, 0, fb)), f"output {k}: values differ"
            else:
                np.testing.assert_allclose(fa[~nan], fb[~nan], rtol=rtol, atol=0, err_msg=f"output {k}")
        else:
            assert np.array_equal(a, b), f"output {k}: values differ"


def check_levels(graph, inputs, exact=True):
    """Every level's optimised graph computes what `graph` does; returns {level: optimised graph}."""
    want = graph.run(*inputs)
    out = {}
    for level in range(4):
        opt = run_passes(graph, passes_for_level(level))
        assert_same(opt.run(*inputs), want, exact=exact)
        out[level] = opt
    return out


def op_counts(graph):
    counts = {}
    for n in graph.topological_order():
        counts[n.op] = counts.get(n.op, 0) + 1
    return counts


# ---------------------------------------------------------------- random graphs

UNARY = ["neg", "exp", "log", "sqrt", "tanh", "abs", "sin", "recip", "floor", "sign", "expm1", "erf"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "atan2"]
COMPARE = ["lt", "le", "eq", "ne", "gt", "ge"]
CONSTS = [0.0, -0.0, 1.0, 2.0, 0.5, -1.0, math.nan, math.inf, -math.inf]
SHAPES = [(2, 3), (3,), (2, 3, 2), (1, 3), (4, 1), (3, 3), ()]
STEPS = (["unary"] * 3 + ["binary"] * 4 + ["where", "reduce", "reduce", "reshape", "permute", "expand",
                                              "slice", "flip", "pad", "matmul", "cast64", "cast32",
                                              "bait", "bait", "bait", "dup", "constexpr"])
BAITS = ["mul1", "add_negzero", "add_poszero", "sub_zero", "sub_negzero", "negneg", "permute_twice",
         "reshape_same", "cast_same", "cast_chain", "expand_same", "slice_full", "pad_zero", "flip_twice",
         "where_same", "sum_noaxes", "max_size1", "maximum_neginf"]


def _const(g, draw, like):
    return g.add_constant(draw(st.sampled_from(CONSTS)), like.dtype, shape=like.shape)


def _partner(g, draw, x, pool):
    """A second operand for x: another node of its shape and dtype, x itself, a const or a buffer."""
    same = [n for n in pool if tuple(n.shape) == tuple(x.shape) and n.dtype is x.dtype]
    choice = draw(st.sampled_from(["node", "node", "self", "const", "buffer"]))
    if choice == "node" and same:
        return draw(st.sampled_from(same))
    if choice == "self":
        return x
    if choice == "buffer":
        seed = draw(st.integers(0, 2**16))
        return g.add_constant(values(x.shape, seed, x.dtype.np), x.dtype)
    return _const(g, draw, x)


def _axes(draw, ndim):
    return tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), max_size=ndim)))) if ndim else ()


def _step(g, draw, kind, x, pool):
    nd, shape = len(x.shape), tuple(x.shape)
    if kind == "unary":
        return g.add_node(draw(st.sampled_from(UNARY)), [x])
    if kind == "binary":
        return g.add_node(draw(st.sampled_from(BINARY)), [x, _partner(g, draw, x, pool)])
    if kind == "where":
        c = g.add_node(draw(st.sampled_from(COMPARE)), [x, _partner(g, draw, x, pool)])
        return g.add_node("where", [c, x, _partner(g, draw, x, pool)])
    if kind == "reduce":
        op = draw(st.sampled_from(["sum", "sum", "max", "min", "prod"]))
        axes = _axes(draw, nd)
        if op in ("max", "min") and any(shape[a] == 0 for a in axes):
            op = "sum"  # max/min of an empty dim has no value: such a node is invalid.
        return g.add_node(op, [x], {"axes": axes, "keepdim": draw(st.booleans())})
    if kind == "reshape":
        n = math.prod(shape)
        target = draw(st.sampled_from([shape[::-1], (n,), (1,) + shape, shape + (1,)]))
        return g.add_node("reshape", [x], {"shape": target})
    if kind == "permute":
        return g.add_node("permute", [x], {"perm": tuple(draw(st.permutations(range(nd))))})
    if kind == "expand":
        if 1 not in shape:
            x = g.add_node("reshape", [x], {"shape": (1,) + shape})
            shape = (1,) + shape
        return g.add_node("expand", [x], {"shape": tuple(3 if s == 1 else s for s in shape)})
    if kind == "slice":
        starts, stops, steps = [], [], []
        for s in shape:
            a = draw(st.integers(0, s))
            b = draw(st.integers(a, s))
            starts.append(a), stops.append(b), steps.append(draw(st.integers(1, 2)))
        return g.add_node("slice", [x], {"starts": starts, "stops": stops, "steps": steps})
    if kind == "flip":
        return g.add_node("flip", [x], {"axes": _axes(draw, nd)})
    if kind == "pad" and nd:
        pads = [(draw(st.integers(0, 1)), draw(st.integers(0, 2))) for _ in shape]
        return g.add_node("pad", [x], {"pads": pads, "value": draw(st.sampled_from([0.0, 1.0, -math.inf]))})
    if kind == "matmul":
        if nd < 2:
            shape = (1,) * (2 - nd) + shape
            x, nd = g.add_node("reshape", [x], {"shape": shape}), 2
        other = g.add_node("permute", [x], {"perm": tuple(range(nd - 2)) + (nd - 1, nd - 2)})
        if draw(st.booleans()):
            other = g.add_constant(values(other.shape, draw(st.integers(0, 99)), x.dtype.np), x.dtype)
        return g.add_node("matmul", [x, other])
    if kind == "cast64":
        return g.add_node("cast", [x], {"dtype": F64})
    if kind == "cast32":
        return g.add_node("cast", [x], {"dtype": F32})
    if kind == "dup":  # The same computation twice: CSE merges it.
        op = draw(st.sampled_from(["exp", "neg", "tanh"]))
        a, b = g.add_node(op, [x]), g.add_node(op, [x])
        return g.add_node("add", [a, b])
    if kind == "constexpr":  # Constant subexpressions: folding computes them.
        c = g.add_node("exp", [_const(g, draw, x)])
        buf = g.add_constant(values(shape, draw(st.integers(0, 99)), x.dtype.np), x.dtype)
        c = g.add_node(draw(st.sampled_from(["add", "mul", "maximum"])), [c, g.add_node("neg", [buf])])
        return g.add_node("mul", [x, c])
    if kind == "pad":
        kind = "bait"
    bait = draw(st.sampled_from(BAITS))
    return _bait(g, bait, x)


def _bait(g, bait, x):
    """A node that computes x (or something simple of it) in a roundabout way, for simplify."""
    shape, nd = tuple(x.shape), len(x.shape)
    c = lambda v: g.add_constant(v, x.dtype, shape=shape)  # noqa: E731
    if bait == "mul1":
        return g.add_node("mul", [c(1.0), x])
    if bait == "add_negzero":
        return g.add_node("add", [x, c(-0.0)])
    if bait == "add_poszero":  # Not an identity: -0.0 + 0.0 is +0.0.
        return g.add_node("add", [x, c(0.0)])
    if bait == "sub_zero":
        return g.add_node("sub", [x, c(0.0)])
    if bait == "sub_negzero":  # Not an identity either.
        return g.add_node("sub", [x, c(-0.0)])
    if bait == "negneg":
        return g.add_node("neg", [g.add_node("neg", [x])])
    if bait == "permute_twice" and nd >= 2:
        p = tuple(range(1, nd)) + (0,)
        return g.add_node("permute", [g.add_node("permute", [x], {"perm": p})], {"perm": p})
    if bait == "reshape_same":
        return g.add_node("reshape", [g.add_node("reshape", [x], {"shape": (math.prod(shape),)})],
                          {"shape": shape})
    if bait == "cast_same":
        return g.add_node("cast", [x], {"dtype": x.dtype})
    if bait == "cast_chain":
        wide = g.add_node("cast", [x], {"dtype": F64})
        return g.add_node("cast", [wide], {"dtype": x.dtype})
    if bait == "expand_same":
        return g.add_node("expand", [x], {"shape": shape})
    if bait == "slice_full":
        return g.add_node("slice", [x], {"starts": [0] * nd, "stops": list(shape), "steps": [1] * nd})
    if bait == "pad_zero":
        return g.add_node("pad", [x], {"pads": [(0, 0)] * nd, "value": 3.0})
    if bait == "flip_twice" and nd:
        once = g.add_node("flip", [x], {"axes": (0,)})
        return g.add_node("flip", [once], {"axes": (0,)})
    if bait == "where_same":
        cond = g.add_node("gt", [x, c(0.0)])
        return g.add_node("where", [cond, x, x])
    if bait == "sum_noaxes":  # Not an identity for floats: the sum adds to +0.0.
        return g.add_node("sum", [x], {"axes": (), "keepdim": False})
    if bait == "max_size1" and nd:
        x1 = g.add_node("reshape", [x], {"shape": shape + (1,)})
        return g.add_node("max", [x1], {"axes": (nd,), "keepdim": False})
    if bait == "maximum_neginf":
        return g.add_node("maximum", [x, c(-math.inf)])
    return g.add_node("neg", [g.add_node("neg", [x])])


@st.composite
def random_graphs(draw, max_steps=12):
    """(graph, input arrays): a random mix of elementwise, reduce, movement and matmul nodes."""
    g = Graph()
    pool = []
    inputs = []
    for k in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(SHAPES))
        pool.append(g.add_input(shape, F32, name=f"x{k}"))
        inputs.append(values(shape, seed=draw(st.integers(0, 2**16))))
    for _ in range(draw(st.integers(1, max_steps))):
        x = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(STEPS))
        if kind == "cast32" and x.dtype is F32 or kind == "cast64" and x.dtype is F64:
            kind = "unary"
        pool.append(_step(g, draw, kind, x, pool))
    n_out = draw(st.integers(1, min(3, len(pool))))
    outs = [pool[-1]] + draw(st.lists(st.sampled_from(pool), max_size=n_out - 1))
    g.outputs = outs
    g.verify()
    return g, inputs
