"""The IR Graph: verifier, editing/query API, capture from lazy tensors and reference runs."""
import numpy as np
import pytest

import loom
from loom.errors import DTypeError, GraphError, LoomIndexError, ShapeError
from loom.ir import Graph, to_json

F32, I64 = loom.float32, loom.int64


def rng_array(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def small_graph():
    """x[2,3], w[3,4] -> y = exp(x @ w); out = sum(y, axis 1); plus an unused neg node."""
    g = Graph()
    x = g.add_input((2, 3), F32, name="x")
    w = g.add_input((3, 4), F32, name="w")
    mm = g.add_node("matmul", [x, w], name="mm")
    y = g.add_node("exp", [mm], name="y")
    out = g.add_node("sum", [y], {"axes": (1,), "keepdim": False}, name="out")
    g.outputs = [out]
    return g, x, w, mm, y, out


def assert_rejected(g, edit, error=GraphError, match=None):
    """`edit` raises `error` and leaves the graph byte-for-byte as it was."""
    before = to_json(g)
    with pytest.raises(error, match=match):
        edit()
    assert to_json(g) == before
    g.verify()


# ---------------------------------------------------------------- order and verification

def test_topological_order_puts_inputs_first():
    g, x, w, mm, y, out = small_graph()
    order = g.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    assert len(order) == len(g) == 5
    for n in order:
        for i in n.inputs:
            assert pos[i] < pos[n]
    assert list(g) == order


def test_topological_order_follows_edges_not_insertion():
    g = Graph()
    x = g.add_input((3,), F32)
    a = g.add_node("neg", [x])
    b = g.add_node("exp", [x])
    g.set_input(a, 0, b)  # a now consumes b, which was added after it.
    order = g.topological_order()
    assert order.index(b) < order.index(a)
    g.verify()


def test_topological_order_is_iterative_on_long_chains():
    g = Graph()
    n = g.add_input((2,), F32)
    for _ in range(20000):  # Far deeper than Python's recursion limit.
        n = g.add_node("neg", [n])
    g.outputs = [n]
    assert len(g.topological_order()) == 20001
    g.verify()
    (r,) = g.run(np.array([1.0, -2.0], np.float32))
    assert r.tolist() == [1.0, -2.0]


def test_verify_accepts_a_valid_graph():
    g, *_ = small_graph()
    g.verify()


def test_verify_catches_dangling_input():
    g, x, w, mm, y, out = small_graph()
    foreign = Graph().add_input((2, 4), F32)
    y.inputs = (foreign,)
    with pytest.raises(GraphError, match="dangling"):
        g.verify()


def test_verify_catches_cycle():
    g, x, w, mm, y, out = small_graph()
    z = g.add_node("neg", [y])
    y.inputs = (z,)  # y -> z -> y
    with pytest.raises(GraphError, match="cycle"):
        g.verify()
    with pytest.raises(GraphError, match="cycle"):
        g.topological_order()


def test_verify_catches_shape_mismatch():
    g, x, w, mm, y, out = small_graph()
    y.shape = (4, 2)
    with pytest.raises(GraphError, match=r"float32\[4, 2\].*float32\[2, 4\]") as e:
        g.verify()
    assert isinstance(e.value, ShapeError)


def test_verify_catches_dtype_mismatch():
    g, x, w, mm, y, out = small_graph()
    y.dtype = loom.float64
    with pytest.raises(GraphError, match="float64") as e:
        g.verify()
    assert isinstance(e.value, DTypeError)


def test_verify_catches_inference_failure_and_unknown_op():
    g, x, w, mm, y, out = small_graph()
    out.attrs = {"axes": (5,), "keepdim": False}
    with pytest.raises(GraphError, match="axis 5 out of range"):
        g.verify()
    out.attrs = {"axes": (1,), "keepdim": False}
    g.verify()
    y.op = "no_such_op"
    with pytest.raises(GraphError, match="unknown op 'no_such_op'"):
        g.verify()


def test_verify_catches_foreign_output_and_bad_buffer():
    g, x, w, mm, y, out = small_graph()
    foreign = Graph().add_input((2,), F32)
    with pytest.raises(GraphError, match="does not belong"):
        g.outputs = [foreign]  # The setter refuses it outright.
    g._outputs.append(foreign)  # Corrupting the internals is caught by verify.
    with pytest.raises(GraphError, match="output 1"):
        g.verify()
    g._outputs.pop()
    c = g.add_constant(np.zeros((2, 2), np.float32))
    c.buffer = np.zeros((3,), np.float32)
    with pytest.raises(GraphError, match="buffer node"):
        g.verify()


def test_verify_catches_unlisted_placeholder():
    g, x, *_ = small_graph()
    g._inputs.remove(x)
    with pytest.raises(GraphError, match="not listed in graph.inputs"):
        g.verify()


# ---------------------------------------------------------------- building

def test_add_node_infers_shape_dtype_and_device():
    g, x, w, mm, y, out = small_graph()
    assert mm.shape == (2, 4) and mm.dtype is F32 and mm.device == "cpu"
    b = g.add_node("gt", [y, y])
    assert b.dtype is loom.bool and b.shape == (2, 4)
    c = g.add_node("cast", [b], {"dtype": "float64"})  # A dtype name is canonicalised.
    assert c.dtype is loom.float64 and c.attrs["dtype"] is loom.float64
    s = g.add_node("slice", [y], {"starts": [0, 1], "stops": [2, 4], "steps": [1, 2]})
    assert s.shape == (2, 2) and s.attrs["starts"] == (0, 1)  # Lists become tuples.


@pytest.mark.parametrize("op,inputs,attrs,error,match", [
    ("add", "x,w", None, ShapeError, "equal shapes"),
    ("matmul", "w,x", None, ShapeError, "cannot be multiplied"),
    ("no_such", "x", None, GraphError, "unknown primitive 'no_such'"),
    ("reshape", "x", None, GraphError, "needs attr 'shape'"),
    ("reshape", "x", {"shape": (7,)}, ShapeError, "cannot reshape"),
    ("neg", "x,w", None, GraphError, "expected 1 inputs"),
    ("input", "", {"shape": (1,), "dtype": F32}, GraphError, "add_input"),
    ("sum", "x", {"axes": (3,), "keepdim": False}, LoomIndexError, "out of range"),
])
def test_add_node_rejects_bad_nodes_and_leaves_graph_unchanged(op, inputs, attrs, error, match):
    g, x, w, *_ = small_graph()
    names = {"x": x, "w": w}
    ins = [names[k] for k in inputs.split(",") if k]
    assert_rejected(g, lambda: g.add_node(op, ins, attrs), error, match)
    assert len(g) == 5


def test_add_node_rejects_dangling_input():
    g, *_ = small_graph()
    foreign = Graph().add_input((2, 3), F32)
    assert_rejected(g, lambda: g.add_node("neg", [foreign]), GraphError, "does not belong")


def test_add_input_and_constants():
    g = Graph()
    x = g.add_input([2, 2], "float16", name="x")
    assert g.inputs == (x,) and x.op == "input" and x.dtype is loom.float16 and x.shape == (2, 2)
    c = g.add_constant(1.5, loom.float16, shape=(2, 2))
    assert c.op == "const" and c.attrs["value"] == 1.5 and c.shape == (2, 2)
    k = g.add_constant(3.0, I64)
    assert k.attrs["value"] == 3 and isinstance(k.attrs["value"], int)
    arr = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = g.add_constant(arr, loom.bfloat16)
    assert b.op == "buffer" and b.dtype is loom.bfloat16 and b.buffer.dtype == np.uint16
    assert not b.buffer.flags.writeable
    arr[0, 0] = 100.0  # The graph holds its own copy.
    t = g.add_constant(loom.tensor([[1, 2], [3, 4]]))
    assert t.dtype is I64 and t.buffer.tolist() == [[1, 2], [3, 4]]
    s = g.add_node("add", [g.add_node("cast", [b], {"dtype": "float16"}), c])
    g.outputs = [s]
    g.verify()
    (r,) = g.run(np.ones((2, 2), np.float16))
    assert r.tolist() == [[1.5, 2.5], [3.5, 4.5]]
    with pytest.raises(ShapeError, match="does not match"):
        g.add_constant(np.zeros(3), shape=(4,))
    with pytest.raises(ShapeError, match="non-negative"):
        g.add_input((-1, 2), F32)


# ---------------------------------------------------------------- editing

def test_remove_node_and_subgraph():
    g, x, w, mm, y, out = small_graph()
    dead = g.add_node("neg", [y])
    dead2 = g.add_node("exp", [dead])
    assert g.remove_node(dead2) == (dead2,)
    assert dead2 not in g and g.consumers(dead) == []
    extra = [g.add_node("tanh", [y])]
    extra.append(g.add_node("sin", [extra[0]]))
    g.remove_subgraph([dead] + extra)
    assert len(g) == 5 and g.consumers(y) == [out]
    g.verify()


def test_remove_node_with_consumers_is_rejected():
    g, x, w, mm, y, out = small_graph()
    assert_rejected(g, lambda: g.remove_node(mm), GraphError, "still consumed by")
    assert_rejected(g, lambda: g.remove_subgraph([mm]), GraphError, "still consumed by")


def test_remove_output_is_rejected_unless_forced():
    g, x, w, mm, y, out = small_graph()
    assert_rejected(g, lambda: g.remove_node(out), GraphError, "graph output")
    removed = g.remove_node(mm, force=True)
    assert set(removed) == {mm, y, out}
    assert g.outputs == () and len(g) == 2
    g.verify()


def test_remove_placeholder_drops_it_from_inputs():
    g = Graph()
    x, y = g.add_input((2,), F32), g.add_input((2,), F32)
    g.remove_node(x)
    assert g.inputs == (y,)
    g.verify()


def test_replace_rewires_consumers_and_outputs():
    g, x, w, mm, y, out = small_graph()
    xv, wv = rng_array(2, 3), rng_array(3, 4, seed=1)
    (before,) = g.run(xv, wv)
    t = g.add_node("tanh", [mm])
    g.replace(y, t)
    assert out.inputs == (t,) and g.consumers(y) == [] and g.consumers(t) == [out]
    g.replace(out, g.add_node("neg", [out]))  # Insert a node after the output.
    g.verify()
    (after,) = g.run(xv, wv)
    np.testing.assert_allclose(after.numpy(), -np.tanh(xv @ wv).sum(1), rtol=1e-5)
    assert not np.allclose(before.numpy(), after.numpy())


def test_replace_shape_mismatch_is_rejected():
    g, x, w, mm, y, out = small_graph()
    other = g.add_node("permute", [y], {"perm": (1, 0)})
    assert_rejected(g, lambda: g.replace(y, other), ShapeError, "shape and dtype must match")


def test_replace_dtype_mismatch_is_rejected():
    g, x, w, mm, y, out = small_graph()
    other = g.add_node("cast", [y], {"dtype": loom.float64})
    assert_rejected(g, lambda: g.replace(y, other), DTypeError, "shape and dtype must match")


def test_replace_that_would_make_a_cycle_is_rejected():
    g, x, w, mm, y, out = small_graph()
    z = g.add_node("neg", [g.add_node("exp", [y])])  # z depends on a consumer of y.
    assert_rejected(g, lambda: g.replace(y, z), GraphError, "cycle")


def test_set_input_rewires_one_input():
    g = Graph()
    a, b = g.add_input((3,), F32), g.add_input((3,), F32)
    s = g.add_node("mul", [a, a])
    g.outputs = [s]
    g.set_input(s, -1, b)
    assert s.inputs == (a, b) and g.consumers(a) == [s] and g.consumers(b) == [s]
    g.set_input(s, 0, b)
    assert g.consumers(a) == []
    (r,) = g.run([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    assert r.tolist() == [4.0, 4.0, 4.0]


def test_set_input_cycle_is_rejected():
    g, x, w, mm, y, out = small_graph()
    assert_rejected(g, lambda: g.set_input(y, 0, y), GraphError, "cycle")
    z = g.add_node("neg", [y])
    assert_rejected(g, lambda: g.set_input(y, 0, z), GraphError, "cycle")


def test_set_input_shape_or_dtype_change_is_rejected():
    g, x, w, mm, y, out = small_graph()
    x2 = g.add_input((5, 3), F32)
    assert_rejected(g, lambda: g.set_input(mm, 0, x2), ShapeError, "keep a node's shape")
    w64 = g.add_input((3, 4), loom.float64)
    assert_rejected(g, lambda: g.set_input(mm, 1, w64), DTypeError, "one dtype")
    z = g.add_input((2, 4), loom.float64)
    assert_rejected(g, lambda: g.set_input(y, 0, z), DTypeError, "keep a node's shape and dtype")
    w_bad = g.add_input((4, 4), F32)
    assert_rejected(g, lambda: g.set_input(mm, 1, w_bad), ShapeError, "cannot be multiplied")
    assert_rejected(g, lambda: g.set_input(mm, 2, x), LoomIndexError, "out of range")
    assert_rejected(g, lambda: g.set_input(mm, 0, Graph().add_input((2, 3), F32)), GraphError, "does not belong")


# ---------------------------------------------------------------- queries

def test_consumers_lists_each_consumer_once():
    g = Graph()
    x = g.add_input((2,), F32)
    sq = g.add_node("mul", [x, x])
    n = g.add_node("neg", [x])
    assert g.consumers(x) == [sq, n]
    assert g.consumers(n) == []


def test_find_by_op_name_and_predicate():
    g, x, w, mm, y, out = small_graph()
    g.add_node("exp", [out], name="y2")
    assert g.find(op="matmul") == [mm]
    assert [n.name for n in g.find(op="exp")] == ["y", "y2"]
    assert g.find(op=("input",)) == [x, w]
    assert g.find(name="out") == [out]
    assert g.find(predicate=lambda n: n.shape == (3, 4)) == [w]
    assert g.find(op="exp", predicate=lambda n: n.ndim == 1)[0].name == "y2"
    assert g.find(op="cos") == []
    assert len(g.find()) == len(g)


def test_len_iter_contains_and_str():
    g, x, w, mm, y, out = small_graph()
    assert len(g) == 5 and x in g and Graph().add_input((1,), F32) not in g
    text = str(g)
    assert "matmul" in text and "'out'" in text and "axes=(1,)" in text and "float32[2, 4]" in text
    assert text.strip().endswith(f"return %{out.id}\n}}".strip())
    assert "5 nodes" in repr(g)


def test_copy_is_independent():
    g, x, w, mm, y, out = small_graph()
    h = g.copy()
    assert to_json(h) == to_json(g)
    assert not set(h.topological_order()) & set(g.topological_order())
    h.remove_node(h.outputs[0], force=True)  # Editing the copy leaves the original alone.
    assert len(h) == 4 and len(g) == 5
    g.verify()


# ---------------------------------------------------------------- extract

def test_extract_subgraph_runs_like_the_original():
    g, x, w, mm, y, out = small_graph()
    bias = g.add_constant(np.full((2, 4), 0.5, np.float32), name="bias")
    z = g.add_node("add", [y, bias])
    g.outputs = [out, z]
    sub = g.extract([mm], [out, z])
    assert [n.op for n in sub.inputs] == ["input"] and sub.inputs[0].shape == (2, 4)
    assert sorted(n.op for n in sub) == ["add", "buffer", "exp", "input", "sum"]
    sub.verify()
    xv, wv = rng_array(2, 3), rng_array(3, 4, seed=1)
    full = g.run(xv, wv)
    part = sub.run((xv @ wv).astype(np.float32))
    for a, b in zip(full, part):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert len(g) == 7  # The source graph is untouched.


def test_extract_needs_every_placeholder_an_output_depends_on():
    g, x, w, mm, y, out = small_graph()
    with pytest.raises(GraphError, match="not among the given inputs"):
        g.extract([x], [out])
    sub = g.extract([x, w], [mm])
    assert len(sub) == 3 and sub.inputs[0].name == "x"


# ---------------------------------------------------------------- capture and run

def test_from_tensors_captures_pending_nodes():
    x = loom.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = loom.tensor([[0.5], [-1.0]])  # Not an input: becomes a constant.
    y = (x @ w).relu() + 1.0
    g = Graph.from_tensors(y, inputs=[x])
    assert g.inputs[0].shape == (2, 2)
    assert g.find(op="buffer")[0].buffer.tolist() == [[0.5], [-1.0]]
    (r,) = g.run(x)
    assert r.tolist() == y.tolist()
    x2 = np.array([[-1.0, 0.0], [2.0, -3.0]], np.float32)
    (r2,) = g.run(x2)
    assert r2.tolist() == ((loom.tensor(x2) @ w).relu() + 1.0).tolist()


def test_from_tensors_mlp_forward_and_backward_matches_eager():
    loom.manual_seed(0)
    x = loom.randn(8, 5)
    target = loom.randn(8, 3)
    w1 = loom.randn(5, 16, requires_grad=True)
    b1 = loom.zeros(16, requires_grad=True)
    w2 = loom.randn(16, 3, requires_grad=True)

    def step(x, target, w1, b1, w2):
        h = (x @ w1 + b1).tanh()
        loss = ((h @ w2 - target) ** 2).mean()
        gw1, gb1, gw2 = loom.autograd.grad(loss, [w1, b1, w2], create_graph=True)
        # A second-order term: the gradient of the gradient norm.
        (ggw1,) = loom.autograd.grad((gw1 * gw1).sum(), [w1], create_graph=True)
        return loss, gw1, gb1, gw2, ggw1

    outs = step(x, target, w1, b1, w2)
    g = Graph.from_tensors(outs, inputs=[x, target, w1, b1, w2])  # Captured before anything is realised.
    assert all(t._node.buffer is None for t in outs)
    assert {"matmul", "tanh", "sum", "permute"} <= {n.op for n in g}
    g.verify()
    got = g.run(x, target, w1, b1, w2)
    for a, b in zip(got, outs):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
    # New values flow through the placeholders: nothing was baked in.
    fresh = [loom.randn(8, 5), loom.randn(8, 3), loom.randn(5, 16, requires_grad=True),
             loom.randn(16, requires_grad=True), loom.randn(16, 3, requires_grad=True)]
    got = g.run(*[t.detach() for t in fresh])
    for a, b in zip(got, step(*fresh)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_from_tensors_rejects_bad_arguments():
    x = loom.tensor([1.0, 2.0])
    with pytest.raises(GraphError, match="must be a loom Tensor"):
        Graph.from_tensors([x.exp(), np.zeros(2)])
    with pytest.raises(GraphError, match="listed twice"):
        Graph.from_tensors(x.exp(), inputs=[x, x])


def test_run_checks_its_arguments():
    g, *_ = small_graph()
    with pytest.raises(GraphError, match="takes 2 inputs"):
        g.run(np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"input 1 expects float32\[3, 4\]"):
        g.run(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(DTypeError, match="float64"):
        g.run(np.zeros((2, 3), np.float64), np.zeros((3, 4), np.float32))
    (r,) = g.run([[0.0] * 3] * 2, np.zeros((3, 4), np.float32))  # Nested lists take the input's dtype.
    assert r.tolist() == [4.0, 4.0]


def test_run_results_do_not_alias_arguments():
    g = Graph()
    x = g.add_input((2, 2), F32)
    g.outputs = [g.add_node("reshape", [x], {"shape": (4,)}), x]
    xv = np.ones((2, 2), np.float32)
    r, same = g.run(xv)
    r.numpy()[0] = 5.0
    same.numpy()[0, 0] = 7.0
    assert xv.tolist() == [[1.0, 1.0], [1.0, 1.0]]
