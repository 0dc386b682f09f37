"""In-place reuse marks."""
import numpy as np

import loom
from loom.compiler import run_passes
from loom.compiler.passes.inplace import inplace, is_elementwise, reusable
from loom.ir import Graph
from tests.compiler.helpers import assert_same, values

F32, F64, BOOL = loom.float32, loom.float64, loom.bool


def test_single_consumer_intermediates_are_reused():
    g = Graph()
    x = g.add_input((4, 4), F32)
    a = g.add_node("exp", [x])            # Reads a graph input: no reuse.
    b = g.add_node("neg", [a])            # a has one consumer: reuse.
    c = g.add_node("add", [b, b])         # b read twice by one node: still reuse.
    d = g.add_node("tanh", [c])
    e = g.add_node("sin", [c])            # c has two consumers: no reuse for d or e.
    f = g.add_node("mul", [d, e])         # Reuses d (first legal input).
    g.outputs = [g.add_node("sum", [f], {"axes": (0,), "keepdim": False})]
    marks = inplace(g).meta["inplace"]
    assert marks == {b: 0, c: 0, f: 0}


def test_constants_inputs_outputs_and_size_changes_are_not_reused():
    g = Graph()
    x = g.add_input((4,), F32)
    k = g.add_constant(np.ones(4, np.float32))
    a = g.add_node("exp", [x])
    out1 = g.add_node("neg", [a])              # An output: gets its own array.
    b = g.add_node("exp", [k])                 # Reads a constant.
    c = g.add_node("cast", [g.add_node("sin", [x])], {"dtype": F64})   # Size changes.
    d = g.add_node("cos", [x])
    e = g.add_node("lt", [d, g.add_node("sin", [x])])  # bool from float: sizes differ.
    nb = g.add_node("neg", [b])
    g.outputs = [out1, g.add_node("sum", [nb], {"axes": (0,), "keepdim": False}), c, d, e]
    marks = inplace(g).meta["inplace"]
    assert a not in marks and out1 not in marks and b not in marks and c not in marks and e not in marks
    assert marks == {nb: 0}  # neg(b): b is an intermediate with one consumer.


def test_reductions_and_movement_are_not_elementwise():
    g = Graph()
    x = g.add_input((3, 3), F32)
    a = g.add_node("exp", [x])
    t = g.add_node("permute", [a], {"perm": (1, 0)})
    s = g.add_node("sum", [g.add_node("exp", [t])], {"axes": (1,), "keepdim": True})
    g.outputs = [g.add_node("neg", [s])]
    assert not is_elementwise(t) and not is_elementwise(s)
    marks = inplace(g).meta["inplace"]
    assert t not in marks and s not in marks


def test_fused_nodes_are_elementwise_only_when_their_body_is():
    g = Graph()
    x = g.add_input((8,), F32)
    mm = g.add_node("matmul", [g.add_node("reshape", [x], {"shape": (8, 1)}),
                               g.add_node("reshape", [x], {"shape": (1, 8)})])
    b = g.add_node("exp", [g.add_node("neg", [g.add_node("sin", [mm])])])  # Two consumers: ends a group.
    r = g.add_node("sum", [g.add_node("exp", [g.add_node("flip", [b], {"axes": (0,)})])],
                   {"axes": (1,), "keepdim": False})
    g.outputs = [g.add_node("neg", [r]), g.add_node("tanh", [b])]
    out = run_passes(g, ["fuse", "inplace"])
    fused = out.find(op="fused")
    assert len(fused) == 3
    elementwise = [n for n in fused if is_elementwise(n)]
    assert len(elementwise) == 2  # sin-neg-exp and tanh; flip-exp-sum-neg is not.
    (inner,) = [n for n in elementwise if n not in out.outputs]
    assert inner.inputs[0].op == "matmul"
    assert out.meta["inplace"] == {inner: 0}  # The output tanh gets its own array.
    v = values((8,))
    assert_same(out.run(v), g.run(v))


def test_stale_marks_are_dropped_by_later_passes():
    g = Graph()
    x = g.add_input((4,), F32)
    a = g.add_node("exp", [x])
    b = g.add_node("neg", [a])
    g.outputs = [g.add_node("sum", [b], {"axes": (0,), "keepdim": False})]
    out = run_passes(g, ["inplace"])
    assert len(out.meta["inplace"]) == 1
    out = run_passes(out, ["fuse"])  # b is fused away.
    assert out.meta["inplace"] == {}
    g2 = run_passes(g, ["inplace"])
    (node,) = g2.meta["inplace"]
    g2.outputs = list(g2.outputs) + [node.inputs[0]]  # The donor becomes an output: no longer legal.
    assert not reusable(g2, node, 0)
    assert run_passes(g2, ["prune"]).meta["inplace"] == {}


def test_marks_survive_copy():
    g = Graph()
    x = g.add_input((4,), F32)
    b = g.add_node("neg", [g.add_node("exp", [x])])
    g.outputs = [g.add_node("sum", [b], {"axes": (0,), "keepdim": False})]
    inplace(g)
    h = g.copy()
    (node,) = h.meta["inplace"]
    assert node in h and node not in g and node.op == "neg" and h.meta["inplace"][node] == 0


def test_inplace_does_not_change_values():
    g = Graph()
    x = g.add_input((4,), F32)
    a = g.add_node("exp", [x])
    b = g.add_node("mul", [a, a])
    g.outputs = [g.add_node("neg", [b])]
    out = run_passes(g, ["inplace"])
    v = values((4,))
    assert_same(out.run(v), g.run(v))


def test_a_fused_kernel_reading_a_reshaped_input_writes_over_it():
    """A reshape keeps each element's place in C order, so a kernel reading the (16, 8) matmul result as
    (2, 8, 8) may write its result there (the GELU backward over its incoming gradient); a permute may not."""
    for move, attrs, marked in (("reshape", {"shape": (2, 8, 8)}, True),
                                ("permute", {"perm": (1, 0)}, False)):
        g = Graph()
        x, w = g.add_input((16, 4), F32), g.add_input((4, 8), F32)
        mm = g.add_node("matmul", [x, w])
        moved = g.add_node(move, [mm], attrs)
        y = g.add_input(tuple(moved.shape), F32)
        e = g.add_node("mul", [g.add_node("tanh", [moved]), y])
        w2 = g.add_input((8, 2), F32)
        g.outputs = [g.add_node("matmul", [g.add_node("reshape", [e], {"shape": (16, 8)}), w2])]
        out = run_passes(g, ["fuse", "inplace"])
        (kernel,) = [n for n in out.find(op="fused") if n.inputs[0].op == "matmul"]
        assert is_elementwise(kernel) is marked
        assert out.meta["inplace"] == ({kernel: 0} if marked else {})
        plan = loom.compiler.plan_memory(out)
        assert (kernel in plan.shares) is marked
        v = [values((16, 4)), values((4, 8), seed=1), values(tuple(moved.shape), seed=2), values((8, 2), seed=3)]
        assert_same([loom.tensor(a) for a in loom.compiler.compile(g)(*v)], g.run(*v))


def test_a_bias_broadcast_over_a_matmul_result_is_added_in_place():
    """The kernel reads the matmul result element for element and the bias row through a broadcast: it may
    write over the matmul result, never over the bias (which is read at every row)."""
    g = Graph()
    x, w, bias = g.add_input((16, 4), F32), g.add_input((4, 8), F32), g.add_input((8,), F32)
    mm = g.add_node("matmul", [x, w])
    row = g.add_node("tanh", [bias])   # An intermediate, so only the broadcast keeps it from being a donor.
    wide = g.add_node("expand", [g.add_node("reshape", [row], {"shape": (1, 8)})], {"shape": (16, 8)})
    h = g.add_node("add", [mm, wide])
    g.outputs = [g.add_node("matmul", [h, g.add_input((8, 2), F32)])]
    out = run_passes(g, ["fuse", "inplace"])
    (kernel,) = [n for n in out.find(op="fused") if any(i.op == "matmul" for i in n.inputs)]
    k = next(k for k, i in enumerate(kernel.inputs) if i.op == "matmul")
    assert not is_elementwise(kernel) and reusable(out, kernel, k)
    assert all(not reusable(out, kernel, j) for j in range(len(kernel.inputs)) if j != k)
    assert out.meta["inplace"] == {kernel: k}
    v = [values((16, 4)), values((4, 8), seed=1), values((8,), seed=2), values((8, 2), seed=3)]
    assert_same([loom.tensor(a) for a in loom.compiler.compile(g)(*v)], g.run(*v))
