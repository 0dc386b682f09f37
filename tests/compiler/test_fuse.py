"""Fusion: grouping rules, the fused primitive and bitwise-equal reference evaluation."""
import numpy as np
import pytest
from hypothesis import given, settings

import loom
from loom.compiler.fuse import find_groups, fusible, fuse, run_body
from loom.errors import GraphError
from loom.ir import Graph
from tests.compiler.helpers import assert_same, op_counts, random_graphs, values

F32, I64, BF16, F16 = loom.float32, loom.int64, loom.bfloat16, loom.float16


def fused_nodes(g):
    return g.find(op="fused")


def body_ops(node):
    return [n.op for n in node.attrs["body"] if n.op != "input"]


def check(g, *inputs):
    out = fuse(g.copy())
    out.verify()
    for f in fused_nodes(out):
        body = f.attrs["body"]
        body.verify()
        assert len(body.outputs) == 1 and len(body.inputs) == len(f.inputs)
        for p, i in zip(body.inputs, f.inputs):
            assert p.shape == i.shape and p.dtype is i.dtype
    assert_same(out.run(*inputs), g.run(*inputs))  # Bitwise: the body runs the same reference ops.
    return out


def test_elementwise_chain_is_one_kernel_with_consts_inlined():
    g = Graph()
    x, y = g.add_input((3, 4), F32), g.add_input((3, 4), F32)
    two = g.add_constant(2.0, F32, shape=(3, 4))
    a = g.add_node("mul", [g.add_node("exp", [x]), two])
    b = g.add_node("where", [g.add_node("gt", [a, y]), a, g.add_node("cast", [g.add_node("cast", [y], {"dtype": I64})],
                                                                       {"dtype": F32})])
    g.outputs = [g.add_node("add", [b, two])]
    out = check(g, values((3, 4), 1), values((3, 4), 2))
    assert op_counts(out) == {"input": 2, "fused": 1}
    (f,) = fused_nodes(out)
    assert f.inputs == out.inputs
    assert sorted(body_ops(f)) == sorted(["exp", "const", "mul", "gt", "cast", "cast", "where", "add"])


def test_reduction_fuses_with_producers_and_elementwise_consumers():
    g = Graph()
    x = g.add_input((4, 5), F32)
    t = g.add_node("permute", [x], {"perm": (1, 0)})
    e = g.add_node("exp", [g.add_node("neg", [t])])
    s = g.add_node("sum", [e], {"axes": (1,), "keepdim": False})
    g.outputs = [g.add_node("log", [g.add_node("neg", [s])])]
    out = check(g, values((4, 5)))
    assert op_counts(out) == {"input": 1, "fused": 1}
    assert body_ops(fused_nodes(out)[0]) == ["permute", "neg", "exp", "sum", "neg", "log"]


def test_movement_after_a_reduction_starts_a_new_group():
    """A reduction permuted before its consumer: the consumer is a new kernel (it would re-run the sum)."""
    g = Graph()
    x = g.add_input((3, 4, 5), F32)
    s = g.add_node("sum", [x], {"axes": (2,), "keepdim": False})
    g.outputs = [g.add_node("neg", [g.add_node("permute", [s], {"perm": (1, 0)})])]
    out = check(g, values((3, 4, 5)))
    assert sorted(body_ops(f) for f in fused_nodes(out)) == [["permute", "neg"], ["sum"]]


def test_softmax_is_two_row_kernels():
    """Softmax: [max -> expand -> sub -> exp] and [sum -> expand -> div], each reducing a row then writing it;
    exp, read by both the sum and the divide, is computed once into memory rather than twice per element."""
    x = loom.tensor(values((3, 5), 4))
    y = loom.softmax(x, 1)
    g = Graph.from_tensors(y, inputs=[x])
    out = check(g, values((3, 5), 4))
    bodies = [body_ops(f) for f in fused_nodes(out)]
    assert bodies == [["max", "expand", "sub", "exp"], ["sum", "expand", "div"]], bodies
    np.testing.assert_array_equal(out.run(x)[0].numpy(), y.numpy())


def test_only_last_axis_reductions_broadcast_back_make_row_kernels():
    g = Graph()
    x = g.add_input((4, 6), F32)
    m0 = g.add_node("max", [x], {"axes": (0,), "keepdim": True})   # Along the columns: no row kernel.
    m1 = g.add_node("max", [x], {"axes": (1,), "keepdim": False})  # No keepdim: reshaped, no row kernel.
    a = g.add_node("sub", [x, g.add_node("expand", [m0], {"shape": (4, 6)})])
    b = g.add_node("expand", [g.add_node("reshape", [m1], {"shape": (4, 1)})], {"shape": (4, 6)})
    g.outputs = [g.add_node("add", [a, b])]
    out = check(g, values((4, 6)))
    for f in fused_nodes(out):
        ops = body_ops(f)
        assert not ({"max"} & set(ops) and {"expand", "add"} & set(ops)), ops


def test_root_movement_and_library_nodes_stay_unfused():
    g = Graph()
    x = g.add_input((4, 4), F32)
    i = g.add_input((4, 4), I64)
    mm = g.add_node("matmul", [g.add_node("exp", [x]), x])
    ga = g.add_node("gather", [g.add_node("neg", [mm]), i], {"axis": 1})
    srt = g.add_node("argsort", [ga], {"axis": 1, "descending": False})
    r = g.add_node("rand", [], {"seed": 1, "shape": (4, 4), "dtype": F32})
    t = g.add_node("permute", [g.add_node("add", [ga, r])], {"perm": (1, 0)})
    g.outputs = [t, srt]
    idx = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 1, 1], [0, 0, 3, 3]], np.int64)
    out = check(g, values((4, 4)), idx)
    ops = op_counts(out)
    assert ops["matmul"] == ops["gather"] == ops["argsort"] == ops["rand"] == ops["permute"] == 1
    assert ops["fused"] == 3  # exp; neg; add.


def test_shared_values_and_outputs_end_groups():
    g = Graph()
    x = g.add_input((6,), F32)
    a = g.add_node("exp", [x])
    b = g.add_node("neg", [a])       # Output and consumed: ends its group.
    c = g.add_node("sin", [b])
    d = g.add_node("cos", [b])
    g.outputs = [b, g.add_node("add", [c, d])]
    out = check(g, values((6,)))
    assert op_counts(out) == {"input": 1, "fused": 2}
    first, second = fused_nodes(out)
    assert body_ops(first) == ["exp", "neg"] and sorted(body_ops(second)) == ["add", "cos", "sin"]
    assert second.inputs == (first,)


def test_two_reductions_make_two_kernels():
    g = Graph()
    x = g.add_input((4, 6), F32)
    s = g.add_node("sum", [g.add_node("exp", [x])], {"axes": (1,), "keepdim": False})
    m = g.add_node("max", [g.add_node("reshape", [s], {"shape": (2, 2)})], {"axes": (0,), "keepdim": False})
    g.outputs = [g.add_node("neg", [m])]
    out = check(g, values((4, 6)))
    assert [body_ops(f) for f in fused_nodes(out)] == [["exp", "sum"], ["reshape", "max", "neg"]]


def test_integer_division_stays_on_the_checked_path():
    g = Graph()
    x, y = g.add_input((3,), I64), g.add_input((3,), I64)
    q = g.add_node("floordiv", [g.add_node("neg", [x]), y])
    g.outputs = [g.add_node("abs", [q])]
    assert fusible(q) is None
    out = check(g, np.array([7, -7, 3], np.int64), np.array([2, 3, -1], np.int64))
    assert op_counts(out) == {"input": 2, "fused": 2, "floordiv": 1}


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_half_precision_bodies_match_bitwise(dtype):
    g = Graph()
    x = g.add_input((2, 8), dtype)
    e = g.add_node("mul", [g.add_node("exp", [x]), g.add_constant(0.3, dtype, shape=(2, 8))])
    g.outputs = [g.add_node("sum", [e], {"axes": (1,), "keepdim": True})]
    v = values((2, 8), 7)
    v = v if dtype is BF16 else v.astype(np.float16)
    out = check(g, v)
    assert op_counts(out) == {"input": 1, "fused": 1}


def test_special_values_pass_through_kernels():
    g = Graph()
    x = g.add_input((2, 4), F32)
    y = g.add_node("maximum", [g.add_node("mul", [x, x]), g.add_node("neg", [x])])
    g.outputs = [g.add_node("min", [g.add_node("add", [y, g.add_constant(-0.0, F32, shape=(2, 4))])],
                            {"axes": (1,), "keepdim": False})]
    v = np.array([[np.nan, 0.0, -0.0, 1.0], [np.inf, -np.inf, -0.0, -0.0]], np.float32)
    check(g, v)


def test_fused_primitive_checks_its_inputs():
    g = Graph()
    x = g.add_input((3,), F32)
    g.outputs = [g.add_node("exp", [x])]
    out = fuse(g.copy())
    (f,) = fused_nodes(out)
    body = f.attrs["body"]
    with pytest.raises(GraphError, match="the body expects"):
        out.add_node("fused", [out.add_input((4,), F32)], {"body": body})
    with pytest.raises(GraphError, match="expects float32"):
        out.add_node("fused", [out.add_input((3,), loom.float64)], {"body": body})
    with pytest.raises(GraphError, match="takes 1 inputs, got 0"):
        out.add_node("fused", [], {"body": body})
    np.testing.assert_array_equal(run_body(body, [np.zeros(3, np.float32)]), np.ones(3, np.float32))


def test_fused_graphs_copy_and_refuse_without_crashing():
    g = Graph()
    x = g.add_input((3,), F32)
    g.outputs = [g.add_node("exp", [g.add_node("neg", [x])])]
    out = fuse(g.copy())
    h = out.copy()
    v = values((3,))
    assert_same(h.run(v), g.run(v))
    assert "fused" in str(h)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(random_graphs())
def test_groups_obey_the_rules_on_random_graphs(case):
    g, inputs = case
    outputs = set(g.outputs)
    for members in find_groups(g):
        inside = set(members)
        root = members[-1]
        for m in members[:-1]:
            assert m not in outputs and all(c in inside for c in g.consumers(m))
        reductions = [m for m in members if fusible(m) == "reduce"]
        assert len(reductions) <= 1
        assert fusible(root) in ("elementwise", "reduce")
        if reductions:  # Only elementwise nodes between the reduction and the root (or a row broadcast).
            r = reductions[0]
            stack = list(g.consumers(r))
            while stack:
                c = stack.pop()
                if c in inside:
                    row = c.op == "expand" and r in c.inputs and r.attrs.get("keepdim") and \
                        tuple(c.shape) == tuple(r.inputs[0].shape) and \
                        tuple(a % r.inputs[0].ndim for a in r.attrs["axes"]) == (r.inputs[0].ndim - 1,)
                    assert fusible(c) == "elementwise" or row
                    stack.extend(g.consumers(c))
    check(g, *inputs)


def test_expensive_ops_are_not_recomputed_per_broadcast_copy():
    """Layer-norm shape: x * expand(1 / sqrt(var + eps)); the sqrt runs on the (n, 1) shape only."""
    g = Graph()
    x = g.add_input((4, 64), F32)
    var = g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": (1,), "keepdim": True})
    eps = g.add_constant(1e-5, F32, shape=(4, 1))
    inv = g.add_node("recip", [g.add_node("sqrt", [g.add_node("add", [var, eps])])])
    scale = g.add_node("expand", [inv], {"shape": (4, 64)})
    cheap = g.add_node("expand", [g.add_node("neg", [g.add_input((4, 1), F32)])], {"shape": (4, 64)})
    g.outputs = [g.add_node("add", [g.add_node("mul", [x, scale]), cheap])]
    out = check(g, values((4, 64)), values((4, 1), 2))
    bodies = [body_ops(f) for f in fused_nodes(out)]
    assert bodies == [["mul", "sum", "const", "add", "sqrt", "recip"], ["expand", "mul", "neg", "expand", "add"]]


def _stats_graph(shared_op="sub"):
    """Batch-norm shape: c = x - expand(m) read by a reduction and by the output's kernel."""
    g = Graph()
    x, m = g.add_input((4, 3, 5), F32), g.add_input((1, 3, 1), F32)
    big = g.add_node("expand", [m], {"shape": (4, 3, 5)})
    c = g.add_node(shared_op, [x, big])
    var = g.add_node("sum", [g.add_node("mul", [c, c])], {"axes": (0, 2), "keepdim": True})
    scale = g.add_node("expand", [var], {"shape": (4, 3, 5)})
    g.outputs = [g.add_node("mul", [c, scale])]
    return g, (values((4, 3, 5)), values((1, 3, 1), 2))


def test_cheap_shared_values_are_recomputed_in_each_kernel():
    """x - mean feeds the variance and the normalised output: both kernels compute it, none stores it."""
    g, inputs = _stats_graph()
    out = check(g, *inputs)
    assert op_counts(out) == {"input": 2, "fused": 2}
    reduce_kernel, out_kernel = fused_nodes(out)
    assert body_ops(reduce_kernel).count("sub") == 1 and body_ops(out_kernel).count("sub") == 1
    assert set(reduce_kernel.inputs) == set(out.inputs)  # Reads x and m, not a stored x - m.
    # The shared expand is copied too: no standalone broadcast copy between the kernels.
    assert all(n.op in ("input", "fused") for n in out)


def test_full_shape_constants_read_no_memory_when_recomputing():
    """GELU's 1 + tanh(..) (a const of the full shape) read by the forward product and by the backward: both
    kernels add the 1 themselves instead of reading a stored 1 + t."""
    g = Graph()
    x, gy = g.add_input((4, 6), F32), g.add_input((4, 6), F32)
    t = g.add_node("tanh", [x])
    u = g.add_node("add", [t, g.add_constant(1.0, F32, shape=(4, 6))])
    y = g.add_node("mul", [x, u])
    dx = g.add_node("mul", [gy, g.add_node("mul", [u, t])])
    g.outputs = [y, dx]
    out = check(g, values((4, 6)), values((4, 6), 2))
    bodies = [body_ops(f) for f in fused_nodes(out)]
    assert bodies == [["tanh"], ["const", "add", "mul"], ["const", "add", "mul", "mul"]]


def test_shared_values_stay_stored_when_recomputing_costs_more():
    g, inputs = _stats_graph("atan2")  # An expensive op: computed once beats once per reader.
    g2 = Graph()  # Two full-size inputs: each reader would read twice the bytes of the stored value.
    x, y = g2.add_input((4, 3, 5), F32), g2.add_input((4, 3, 5), F32)
    s = g2.add_node("add", [x, y])
    total = g2.add_node("sum", [s], {"axes": (0, 2), "keepdim": True})
    g2.outputs = [g2.add_node("mul", [s, g2.add_node("expand", [total], {"shape": (4, 3, 5)})])]
    for graph, ins in ((g, inputs), (g2, (values((4, 3, 5)), values((4, 3, 5), 3)))):
        from loom.compiler.fuse import recompute_cheap
        assert recompute_cheap(graph.copy()) == 0
        assert op_counts(check(graph, *ins))["fused"] == 3  # The shared value is its own kernel.


def test_recomputation_is_bounded_by_its_op_budget():
    from loom.compiler.fuse import RECOMPUTE_OPS, recompute_cheap
    for n_ops, kernels in ((RECOMPUTE_OPS, 2), (RECOMPUTE_OPS + 1, 3)):  # Within the budget; one op too many.
        g = Graph()
        x = g.add_input((4, 6), F32)
        v = x
        for _ in range(n_ops):
            v = g.add_node("neg", [v])
        a = g.add_node("sum", [v], {"axes": (0,), "keepdim": True})
        g.outputs = [g.add_node("mul", [v, g.add_node("expand", [a], {"shape": (4, 6)})])]
        assert recompute_cheap(g.copy()) == (kernels == 2)
        assert op_counts(check(g, values((4, 6))))["fused"] == kernels
