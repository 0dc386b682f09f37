"""Algebraic simplification: every rule exact, NaN/Inf/signed zeros included."""
import math

import numpy as np
import pytest

import loom
from loom.compiler import run_passes
from loom.compiler.passes.simplify import lossless, simplify
from loom.ir import Graph
from tests.compiler.helpers import assert_same, op_counts

F32, F64, I32, I64, BOOL = loom.float32, loom.float64, loom.int32, loom.int64, loom.bool
SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0], [-0.0, 1.0, -2.5, 3e38]], np.float32)


def run_rule(build, dtype=F32, shape=(2, 4), value=None, fast_math=False, exact=True):
    """Build out = build(g, x), simplify, check the values; return the simplified graph."""
    g = Graph()
    x = g.add_input(shape, dtype, name="x")
    g.outputs = [build(g, x)]
    out = simplify(g.copy(), fast_math=fast_math)
    out.verify()
    v = SPECIAL if value is None else value
    assert_same(out.run(v), g.run(v), exact=exact)
    return out


def c(g, value, like, dtype=None):
    return g.add_constant(value, dtype or like.dtype, shape=like.shape)


IDENTITIES = {
    "x*1": lambda g, x: g.add_node("mul", [x, c(g, 1.0, x)]),
    "1*x": lambda g, x: g.add_node("mul", [c(g, 1.0, x), x]),
    "x/1": lambda g, x: g.add_node("div", [x, c(g, 1.0, x)]),
    "x**1": lambda g, x: g.add_node("pow", [x, c(g, 1.0, x)]),
    "x+(-0)": lambda g, x: g.add_node("add", [x, c(g, -0.0, x)]),
    "(-0)+x": lambda g, x: g.add_node("add", [c(g, -0.0, x), x]),
    "x-0": lambda g, x: g.add_node("sub", [x, c(g, 0.0, x)]),
    "neg(neg x)": lambda g, x: g.add_node("neg", [g.add_node("neg", [x])]),
    "maximum(x,-inf)": lambda g, x: g.add_node("maximum", [x, c(g, -math.inf, x)]),
    "minimum(inf,x)": lambda g, x: g.add_node("minimum", [c(g, math.inf, x), x]),
    "permute twice": lambda g, x: g.add_node("permute", [g.add_node("permute", [x], {"perm": (1, 0)})],
                                             {"perm": (1, 0)}),
    "identity permute": lambda g, x: g.add_node("permute", [x], {"perm": (0, 1)}),
    "reshape chain": lambda g, x: g.add_node("reshape", [g.add_node("reshape", [x], {"shape": (8,)})],
                                             {"shape": (2, 4)}),
    "reshape same": lambda g, x: g.add_node("reshape", [x], {"shape": (2, 4)}),
    "expand same": lambda g, x: g.add_node("expand", [x], {"shape": (2, 4)}),
    "cast same": lambda g, x: g.add_node("cast", [x], {"dtype": F32}),
    "cast f64 and back": lambda g, x: g.add_node("cast", [g.add_node("cast", [x], {"dtype": F64})],
                                                 {"dtype": F32}),
    "full slice": lambda g, x: g.add_node("slice", [x], {"starts": (0, 0), "stops": (2, 4), "steps": (1, 1)}),
    "zero pad": lambda g, x: g.add_node("pad", [x], {"pads": ((0, 0), (0, 0)), "value": 7.0}),
    "double flip": lambda g, x: g.add_node("flip", [g.add_node("flip", [x], {"axes": (0, 1)})],
                                           {"axes": (1, 0)}),
    "flip nothing": lambda g, x: g.add_node("flip", [x], {"axes": ()}),
    "where(c,x,x)": lambda g, x: g.add_node("where", [g.add_node("gt", [x, c(g, 0.0, x)]), x, x]),
    "where(True,x,y)": lambda g, x: g.add_node("where", [c(g, True, x, BOOL), x, g.add_node("exp", [x])]),
    "max over no axes": lambda g, x: g.add_node("max", [x], {"axes": (), "keepdim": False}),
    "prod over no axes": lambda g, x: g.add_node("prod", [x], {"axes": (), "keepdim": True}),
}


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_identity_vanishes(name):
    out = run_rule(IDENTITIES[name])
    assert [n.op for n in out] == ["input"], out
    assert out.outputs[0] is out.inputs[0]


@pytest.mark.parametrize("name,build,ops", [
    ("x+0.0 keeps: -0.0+0.0 is +0.0", lambda g, x: g.add_node("add", [x, c(g, 0.0, x)]), "add"),
    ("x-(-0.0) keeps", lambda g, x: g.add_node("sub", [x, c(g, -0.0, x)]), "sub"),
    ("x*0 keeps: NaN, Inf, -0.0", lambda g, x: g.add_node("mul", [x, c(g, 0.0, x)]), "mul"),
    ("x*-1 keeps", lambda g, x: g.add_node("mul", [x, c(g, -1.0, x)]), "mul"),
    ("0-x keeps", lambda g, x: g.add_node("sub", [c(g, 0.0, x), x]), "sub"),
    ("1/x keeps", lambda g, x: g.add_node("div", [c(g, 1.0, x), x]), "div"),
    ("x**0 keeps", lambda g, x: g.add_node("pow", [x, c(g, 0.0, x)]), "pow"),
    ("maximum(x, inf) keeps", lambda g, x: g.add_node("maximum", [x, c(g, math.inf, x)]), "maximum"),
    ("float sum over no axes keeps: -0.0 becomes +0.0",
     lambda g, x: g.add_node("sum", [x], {"axes": (), "keepdim": False}), "sum"),
    ("float sum over a size-1 axis keeps",
     lambda g, x: g.add_node("sum", [g.add_node("reshape", [x], {"shape": (2, 4, 1)})],
                             {"axes": (2,), "keepdim": False}), "sum"),
    ("exp(log x) keeps without fast math", lambda g, x: g.add_node("exp", [g.add_node("log", [x])]), "log"),
    ("log(exp x) keeps without fast math", lambda g, x: g.add_node("log", [g.add_node("exp", [x])]), "exp"),
    ("lossy cast chain keeps", lambda g, x: g.add_node("cast", [g.add_node("cast", [x], {"dtype": I32})],
                                                        {"dtype": F32}), "cast"),
    ("partial slice keeps", lambda g, x: g.add_node("slice", [x], {"starts": (0, 1), "stops": (2, 4),
                                                                    "steps": (1, 1)}), "slice"),
])
def test_inexact_identities_are_left_alone(name, build, ops):
    out = run_rule(build)
    assert ops in op_counts(out), name


def test_the_kept_rules_really_are_inexact():
    """The reference path shows why: each of these changes some special value."""
    x = SPECIAL
    assert np.signbit((x + np.float32(0.0))[1, 0]) != np.signbit(x[1, 0])
    with np.errstate(invalid="ignore"):
        assert np.isnan((x * np.float32(0.0))[0, 1])
    assert np.signbit(np.sum(np.float32(-0.0), axis=())) == 0 and np.signbit(np.float32(-0.0))


def test_fast_math_applies_the_inexact_rules():
    for build in (lambda g, x: g.add_node("exp", [g.add_node("log", [x])]),
                  lambda g, x: g.add_node("log", [g.add_node("exp", [x])])):
        out = run_rule(build, value=np.array([[0.5, 1.0, 2.0, 3.0]] * 2, np.float32), fast_math=True,
                       exact=False)
        assert [n.op for n in out] == ["input"]
    g = Graph()
    x = g.add_input((3,), F32)
    g.outputs = [g.add_node("exp", [g.add_node("log", [x])])]
    assert len(run_passes(g, ["simplify_fast_math"])) == 1


@pytest.mark.parametrize("dtype,zero", [(I32, 0), (I64, 0)])
def test_integer_zeros_of_either_kind_vanish(dtype, zero):
    v = np.array([[0, -1, 7, 2**30], [5, -5, 0, 1]], dtype.np)
    for op, first in (("add", True), ("add", False), ("sub", True), ("or", True), ("xor", False)):
        def build(g, x, op=op, first=first):
            z = c(g, zero, x)
            return g.add_node(op, [x, z] if first else [z, x])
        out = run_rule(build, dtype=dtype, value=v)
        assert [n.op for n in out] == ["input"], op


def test_bool_identities():
    v = np.array([[True, False, True, False]] * 2)
    for op, value in (("and", True), ("or", False), ("xor", False), ("mul", True)):
        out = run_rule(lambda g, x, op=op, value=value: g.add_node(op, [c(g, value, x), x]), dtype=BOOL, value=v)
        assert [n.op for n in out] == ["input"], op
    out = run_rule(lambda g, x: g.add_node("not", [g.add_node("not", [x])]), dtype=BOOL, value=v)
    assert [n.op for n in out] == ["input"]


def test_integer_sum_over_no_axes_vanishes():
    v = np.arange(8, dtype=np.int64).reshape(2, 4)
    out = run_rule(lambda g, x: g.add_node("sum", [x], {"axes": (), "keepdim": False}), dtype=I64, value=v)
    assert [n.op for n in out] == ["input"]


def _node(g, op, x, **attrs):
    return g.add_node(op, [x], attrs)


def test_rewrites_that_leave_a_cheaper_node():
    cases = {
        "permute chain composes": (lambda g, x: _node(g, "permute", _node(g, "permute", x, perm=(1, 2, 0)),
                                                      perm=(0, 2, 1)), ["input", "permute"]),
        "reshape chain collapses": (lambda g, x: _node(g, "reshape", _node(g, "reshape", x, shape=(24,)),
                                                       shape=(4, 6)), ["input", "reshape"]),
        "flips cancel pairwise": (lambda g, x: _node(g, "flip", _node(g, "flip", x, axes=(0, 1)), axes=(1, 2)),
                                  ["input", "flip"]),
        "flip of size-1 axes only": (lambda g, x: _node(g, "flip", _node(g, "reshape", x, shape=(2, 3, 4, 1)),
                                                        axes=(3,)), ["input", "reshape"]),
        "abs(neg x)": (lambda g, x: _node(g, "abs", _node(g, "neg", x)), ["input", "abs"]),
        "abs(abs x)": (lambda g, x: _node(g, "abs", _node(g, "abs", x)), ["input", "abs"]),
        "max over a size-1 axis": (lambda g, x: _node(g, "max", _node(g, "reshape", x, shape=(2, 1, 12)),
                                                      axes=(1,), keepdim=False), ["input", "reshape"]),
        "expand chain": (lambda g, x: _node(g, "expand", _node(g, "expand", _node(g, "reshape", x, shape=(1, 2, 3, 4)),
                                                               shape=(1, 2, 3, 4)), shape=(5, 2, 3, 4)),
                         ["input", "reshape", "expand"]),
    }
    v = np.concatenate([SPECIAL.reshape(-1)] * 3).reshape(2, 3, 4)
    for name, (build, ops) in cases.items():
        out = run_rule(build, shape=(2, 3, 4), value=v)
        assert [n.op for n in out] == ops, name
    out = run_rule(cases["permute chain composes"][0], shape=(2, 3, 4), value=v)
    assert out.outputs[0].attrs["perm"] == (1, 0, 2)


def test_cast_chains_collapse_only_when_lossless():
    g = Graph()
    x = g.add_input((4,), I32)
    wide = g.add_node("cast", [x], {"dtype": F64})  # Exact for every int32.
    g.outputs = [g.add_node("cast", [wide], {"dtype": F32})]
    out = simplify(g.copy())
    assert [n.op for n in out] == ["input", "cast"] and out.outputs[0].inputs[0] is out.inputs[0]
    v = np.array([2**31 - 1, -2**31, 16777217, -3], np.int32)  # 16777217 rounds in float32.
    assert_same(out.run(v), g.run(v))
    assert lossless(loom.int8, loom.bfloat16) and lossless(loom.uint8, loom.int16)
    assert lossless(loom.float16, F32) and lossless(BOOL, loom.int8) and lossless(loom.bfloat16, F64)
    assert not lossless(I32, F32) and not lossless(loom.int16, loom.float16)
    assert not lossless(F32, I64) and not lossless(loom.int8, loom.uint8) and not lossless(F32, BOOL)
    assert not lossless(loom.float16, loom.bfloat16) and not lossless(loom.uint8, loom.int8)


def test_constants_found_through_broadcasts_and_small_buffers():
    g = Graph()
    x = g.add_input((2, 3), F32)
    one = g.add_node("expand", [g.add_constant(1.0, F32, shape=(1, 1))], {"shape": (2, 3)})
    also_one = g.add_constant(np.ones((2, 3), np.float32))
    not_one = g.add_constant(np.array([[1, 1, 1], [1, 1, 2]], np.float32))
    g.outputs = [g.add_node("mul", [g.add_node("mul", [x, one]), also_one]), g.add_node("mul", [x, not_one])]
    out = simplify(g.copy())
    assert op_counts(out) == {"input": 1, "buffer": 1, "mul": 1}
    v = SPECIAL[:, :3]
    assert_same(out.run(v), g.run(v))


def test_outputs_that_simplify_to_inputs_still_run_and_do_not_alias():
    g = Graph()
    x = g.add_input((3,), F32)
    g.outputs = [g.add_node("mul", [x, c(g, 1.0, x)]), x]
    out = simplify(g.copy())
    v = np.array([1.0, np.nan, -0.0], np.float32)
    r = out.run(v)
    assert_same(r, g.run(v))
    assert not np.shares_memory(r[0].numpy(), v)
