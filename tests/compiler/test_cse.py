"""Common-subexpression elimination."""
import math

import numpy as np

import loom
from loom.compiler import run_passes
from loom.ir import Graph
from tests.compiler.helpers import assert_same, op_counts, values

F32 = loom.float32


def test_identical_nodes_merge_and_chains_follow():
    g = Graph()
    x = g.add_input((2, 3), F32)
    a1, a2 = g.add_node("exp", [x]), g.add_node("exp", [x])
    b1, b2 = g.add_node("neg", [a1]), g.add_node("neg", [a2])  # Equal only once a1, a2 merge.
    g.outputs = [g.add_node("sub", [b1, b2]), b2]
    out = run_passes(g, ["cse"])
    assert op_counts(out) == {"input": 1, "exp": 1, "neg": 1, "sub": 1}
    sub, neg = out.outputs
    assert sub.inputs[0] is sub.inputs[1] is neg
    v = values((2, 3))
    assert_same(out.run(v), g.run(v))


def test_commutative_inputs_merge_but_not_others():
    g = Graph()
    x, y = g.add_input((3,), F32), g.add_input((3,), F32)
    outs = [g.add_node(op, ins) for op, ins in [("add", [x, y]), ("add", [y, x]), ("mul", [x, y]),
                                                ("mul", [y, x]), ("sub", [x, y]), ("sub", [y, x]),
                                                ("maximum", [x, y]), ("maximum", [y, x])]]
    g.outputs = outs
    out = run_passes(g, ["cse"])
    assert op_counts(out) == {"input": 2, "add": 1, "mul": 1, "sub": 2, "maximum": 2}
    v, w = values((3,), 1), values((3,), 2)
    assert_same(out.run(v, w), g.run(v, w))


def test_attrs_must_be_exactly_equal():
    g = Graph()
    x = g.add_input((2, 3), F32)
    s1 = g.add_node("sum", [x], {"axes": (1,), "keepdim": False})
    s2 = g.add_node("sum", [x], {"axes": (1,), "keepdim": False})
    s3 = g.add_node("sum", [x], {"axes": (1,), "keepdim": True})
    s4 = g.add_node("sum", [x], {"axes": (0,), "keepdim": False})
    p1 = g.add_node("pad", [x], {"pads": [(0, 1), (0, 0)], "value": 0.0})
    p2 = g.add_node("pad", [x], {"pads": [(0, 1), (0, 0)], "value": -0.0})  # -0.0 is not 0.0.
    p3 = g.add_node("pad", [x], {"pads": [(0, 1), (0, 0)], "value": math.nan})
    p4 = g.add_node("pad", [x], {"pads": [(0, 1), (0, 0)], "value": math.nan})  # NaN attrs are equal.
    g.outputs = [s1, s2, s3, s4, p1, p2, p3, p4]
    out = run_passes(g, ["cse"])
    assert op_counts(out) == {"input": 1, "sum": 3, "pad": 3}
    v = values((2, 3))
    assert_same(out.run(v), g.run(v))


def test_constants_merge_by_value_including_signed_zero_and_nan():
    g = Graph()
    x = g.add_input((3,), F32)
    consts = [g.add_constant(v, F32, shape=(3,)) for v in (0.0, 0.0, -0.0, math.nan, math.nan, 1.0)]
    bufs = [g.add_constant(np.array(v, np.float32)) for v in ([1, 2, 3], [1, 2, 3], [1, 2, 4],
                                                                [-0.0, 0, 0], [0.0, 0, 0])]
    other_shape = g.add_constant(np.array([[1, 2, 3]], np.float32))
    g.outputs = [g.add_node("add", [x, c]) for c in consts + bufs] + [other_shape]
    out = run_passes(g, ["cse"])
    assert op_counts(out)["const"] == 4  # 0.0, -0.0, nan, 1.0
    assert op_counts(out)["buffer"] == 5  # [1,2,3] once, [1,2,4], [-0,0,0], [0,0,0], the 2-d one.
    assert op_counts(out)["add"] == 8
    v = values((3,))
    assert_same(out.run(v), g.run(v))


def test_rand_merges_only_with_equal_seed():
    g = Graph()
    x = g.add_input((4,), F32)
    attrs = lambda seed: {"seed": seed, "shape": (4,), "dtype": F32}  # noqa: E731
    r1, r2, r3 = (g.add_node("rand", [], attrs(s)) for s in (7, 7, 8))
    g.outputs = [g.add_node("add", [x, r]) for r in (r1, r2, r3)]
    out = run_passes(g, ["cse"])
    assert op_counts(out)["rand"] == 2
    seeds = sorted(n.attrs["seed"] for n in out.find(op="rand"))
    assert seeds == [7, 8]
    v = values((4,))
    got, want = out.run(v), g.run(v)
    assert_same(got, want)
    assert not np.array_equal(got[0].numpy(), got[2].numpy())


def test_graph_inputs_never_merge():
    g = Graph()
    x, y = g.add_input((3,), F32), g.add_input((3,), F32)
    g.outputs = [g.add_node("exp", [x]), g.add_node("exp", [y])]
    out = run_passes(g, ["cse"])
    assert op_counts(out) == {"input": 2, "exp": 2}


def test_output_duplicates_become_one_node():
    g = Graph()
    x = g.add_input((3,), F32)
    a, b = g.add_node("exp", [x]), g.add_node("exp", [x])
    g.outputs = [a, b]
    out = run_passes(g, ["cse"])
    assert out.outputs[0] is out.outputs[1] and len(out) == 2
    v = values((3,))
    assert_same(out.run(v), g.run(v))
