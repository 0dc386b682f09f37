"""The XLA plugin on whole graphs: fused and loop subgraphs, run-time errors, random graphs, training."""
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax", reason="the XLA plugin needs jax (pip install jax==0.10.2)")

import loom  # noqa: E402
import loom.nn as nn  # noqa: E402
import loom.nn.functional as F  # noqa: E402
from loom.compiler import passes_for_level, run_passes  # noqa: E402
from loom.compiler.plugins import get_plugin  # noqa: E402
from loom.compiler.plugins.xla import XlaExecutable, compile_graph  # noqa: E402
from loom.errors import GraphError, LoomError, LoomIndexError, LoomZeroDivisionError  # noqa: E402
from loom.ir import Graph, ops  # noqa: E402
from tests.compiler.helpers import random_graphs  # noqa: E402
from tests.compiler.plugins.helpers import compare, one_node, stored  # noqa: E402

# Derandomized: the same 300 graphs every run, so CI does not depend on what a random search happens to hit.
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _chain(d=loom.float32, shape=(4, 5)):
    """exp(x) * y + 1 summed over the last axis, then tanh: one fusable group with a reduction."""
    g = Graph()
    x, y = g.add_input(shape, d, name="x"), g.add_input(shape, d, name="y")
    one = g.add_constant(1.0, d, shape=shape)
    s = g.add_node("sum", [g.add_node("add", [g.add_node("mul", [g.add_node("exp", [x]), y]), one])],
                   {"axes": (1,), "keepdim": False})
    g.outputs = [g.add_node("tanh", [s]), g.add_node("neg", [x])]
    return g


def _inputs(shape=(4, 5), d=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(d), rng.standard_normal(shape).astype(d)]


# ---------------------------------------------------------------- compiler output, fused bodies

@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_graphs_after_every_optimisation_level(level):
    g = run_passes(_chain(), passes_for_level(level))
    if level >= 2:
        assert any(n.op == "fused" for n in g), "O2 fuses the chain"
    compare(g, _inputs(), rtol=None)


def test_fused_half_precision_body():
    g = run_passes(_chain(loom.bfloat16), ["fuse"])
    x, y = _inputs()
    compare(g, [stored(x, loom.bfloat16), stored(y, loom.bfloat16)], rtol=None)


# ---------------------------------------------------------------- while_loop

def _loop_graph(limit=10):
    """(i, acc) -> while i < limit: (i + 1, acc * 1.5 + i); returns both final values."""
    def sub(outs_fn):
        g = Graph()
        i, acc = g.add_input((), loom.int64), g.add_input((3,), loom.float32)
        g.outputs = outs_fn(g, i, acc)
        return g

    cond = sub(lambda g, i, acc: [g.add_node("lt", [i, g.add_constant(limit, loom.int64)])])
    def step(g, i, acc):
        fi = g.add_node("reshape", [g.add_node("cast", [i], {"dtype": loom.float32})], {"shape": (1,)})
        scaled = g.add_node("mul", [acc, g.add_constant(1.5, loom.float32, shape=(3,))])
        return [g.add_node("add", [i, g.add_constant(1, loom.int64)]),
                g.add_node("add", [scaled, g.add_node("expand", [fi], {"shape": (3,)})])]

    body = sub(step)
    g = Graph()
    i, acc = g.add_input((), loom.int64), g.add_input((3,), loom.float32)
    attrs = {"cond": cond, "body": body}
    g.outputs = [g.add_node("while_loop", [i, acc], dict(attrs, index=k)) for k in range(2)]
    return g


def test_while_loop_runs_a_data_dependent_number_of_steps():
    g = _loop_graph()
    for start in (0, 3, 10, 25):
        i, acc = compare(g, [np.array(start), np.array([1.0, -2.0, 0.5], np.float32)], rtol=1e-6)
        assert int(i) == max(start, 10)


def test_while_loop_under_loom_function():
    def collatz_steps(x):
        def cond(n, k):
            return n != 1

        def body(n, k):
            return loom.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
        return loom.while_loop(cond, body, (x, loom.zeros_like(x)))[1]

    traced = loom.function(collatz_steps, backend="xla", warmup=0)
    for start, steps in ((6, 8), (27, 111), (1, 0)):
        assert traced(loom.tensor(start)).item() == steps
    assert traced.trace_count == 1


def test_error_inside_a_loop_body_is_raised():
    # The loop gathers x[i] with i growing past the end: the reference raises, so must the plugin.
    cond, body = Graph(), Graph()
    for sub in (cond, body):
        sub.add_input((1,), loom.int64)
        sub.add_input((3,), loom.float32)
    ci, _ = cond.inputs
    cond.outputs = [cond.add_node("lt", [ci, cond.add_constant(np.array([5]), loom.int64)])]
    bi, bx = body.inputs
    picked = body.add_node("gather", [bx, bi], {"axis": 0})
    body.outputs = [body.add_node("add", [bi, body.add_constant(np.array([1]), loom.int64)]),
                    body.add_node("add", [bx, body.add_node("expand", [picked], {"shape": (3,)})])]
    g = Graph()
    i, x = g.add_input((1,), loom.int64), g.add_input((3,), loom.float32)
    g.outputs = [g.add_node("while_loop", [i, x], {"cond": cond, "body": body, "index": 1})]
    args = [np.array([0]), np.ones(3, np.float32)]
    with pytest.raises(LoomIndexError, match="gather"):
        g.run(*args)
    with pytest.raises(LoomIndexError, match="loom.gather: an index is out of bounds for a dimension of size 3"):
        get_plugin("xla")(g)(*args)


# ---------------------------------------------------------------- run-time errors, inputs, caching

@pytest.mark.parametrize("op,name", [("div", "div"), ("floordiv", "floor_divide"), ("mod", "remainder")])
def test_integer_division_by_zero_raises_as_the_reference(op, name):
    g = one_node(op, [loom.int32, loom.int32], (3,))
    x, y = np.array([1, 2, 3], np.int32), np.array([1, 0, 2], np.int32)
    with pytest.raises(LoomZeroDivisionError) as ref:
        g.run(x, y)
    with pytest.raises(LoomZeroDivisionError) as got:
        get_plugin("xla")(g)(x, y)
    assert str(got.value) == str(ref.value) == f"loom.{name}: integer division by zero (the int32 divisor holds 0)"
    assert get_plugin("xla")(g)(x, np.array([1, 5, 2], np.int32))[0].tolist() == g.run(x, [1, 5, 2])[0].tolist()


def test_out_of_bounds_indices_raise():
    g = one_node("gather", [loom.float32, loom.int64], None, {"axis": 1}, shapes=[(2, 3), (2, 2)])
    run = get_plugin("xla")(g)
    x = np.zeros((2, 3), np.float32)
    run(x, np.array([[0, -3], [2, 1]]))
    for bad in ([[0, 3], [0, 0]], [[0, -4], [0, 0]]):
        with pytest.raises(LoomIndexError, match="out of bounds for a dimension of size 3"):
            run(x, np.array(bad))
    s = Graph()
    ins = [s.add_input((2, 3), loom.float32), s.add_input((1, 2), loom.int64), s.add_input((1, 2), loom.float32)]
    s.outputs = [s.add_node("scatter_add", ins, {"axis": 0})]
    with pytest.raises(LoomIndexError, match="loom.scatter_add"):
        get_plugin("xla")(s)(x, np.array([[0, 2]]), np.ones((1, 2), np.float32))


def test_unused_nodes_are_not_run():
    # Graph.run evaluates only what the outputs need; a dead division by zero raises in neither.
    g = Graph()
    x = g.add_input((2,), loom.int64)
    g.add_node("floordiv", [x, g.add_constant(0, loom.int64, shape=(2,))])
    g.outputs = [g.add_node("neg", [x])]
    compare(g, [np.array([1, 2])])


def test_inputs_are_checked_before_running():
    run = get_plugin("xla")(one_node("neg", [loom.float32], (2, 3)))
    with pytest.raises(GraphError, match=r"input 0 expects float32\[2, 3\], got an array of float64"):
        run(np.zeros((2, 3)))
    with pytest.raises(GraphError, match=r"input 0 expects float32\[2, 3\], got shape \[3, 2\]"):
        run(np.zeros((3, 2), np.float32))
    with pytest.raises(GraphError, match="takes 1 inputs, got 2"):
        run(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))


def test_bfloat16_takes_stored_bits_or_floats_and_returns_bits():
    g = one_node("add", [loom.bfloat16, loom.bfloat16], ())
    run = get_plugin("xla")(g)
    (out,) = run(stored(1.5, loom.bfloat16), np.array(0.25, np.float32))  # A runtime scalar comes as float32.
    assert out.dtype == np.uint16 and out.shape == () and loom.dtypes.bf16_to_f32(out) == 1.75


def test_unlowerable_primitive_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(ops.PRIMITIVES, "mystery_op", ops.Primitive(
        "mystery_op", "unary", 1, lambda ins, a: (tuple(ins[0].shape), ins[0].dtype), lambda x, a: x))
    g = one_node("mystery_op", [loom.float32], (3,))
    with pytest.raises(LoomError, match=r"cannot lower the primitive\(s\) \['mystery_op'\]"):
        get_plugin("xla")(g)


def test_one_executable_per_graph_and_outputs_never_alias_inputs():
    g = Graph()
    x = g.add_input((3,), loom.float32)
    g.outputs = [x, g.add_node("neg", [x])]
    exe = compile_graph(g)
    assert isinstance(exe, XlaExecutable) and compile_graph(g) is exe and get_plugin("xla")(g) is exe
    a = np.array([1.0, 2.0, 3.0], np.float32)
    same, neg = exe(a)
    assert not np.shares_memory(same, a) and same.tolist() == a.tolist() and neg.tolist() == [-1, -2, -3]


def test_x64_stays_scoped_to_the_plugin():
    import jax.numpy as jnp
    before = jax.config.jax_enable_x64
    (out,) = get_plugin("xla")(one_node("neg", [loom.float64], (2,)))(np.array([1.0, 2.0]))
    assert out.dtype == np.float64
    assert jax.config.jax_enable_x64 == before
    if not before:
        assert jnp.asarray(np.ones(2)).dtype == jnp.float32, "other jax code keeps its 32-bit default"


def test_importing_loom_does_not_import_jax():
    code = "import sys, loom, loom.compiler, loom.compiler.plugins; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- random graphs

@SETTINGS
@given(random_graphs())
def test_random_float_graphs_match_the_reference(case):
    graph, inputs = case
    compare(graph, inputs, rtol=1e-4, atol=1e-6, zero_signs=False)


DTYPES = [loom.float32, loom.float64, loom.float16, loom.bfloat16, loom.int64, loom.int8, loom.uint8, loom.bool]
SHAPES = [(3,), (2, 3), (4, 1), (2, 3, 2), ()]


def _value(draw, shape, d):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if d is loom.bool:
        return rng.random(shape) < 0.5
    if d.is_floating_point:
        a = rng.standard_normal(shape) * 3
        a = np.where(rng.random(shape) < 0.1, rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5]), a)
        return stored(a, d)
    lo, hi = (0, 255) if d is loom.uint8 else (-128, 127)
    return rng.integers(lo, hi + 1, shape).astype(d.np)


def _nonzero(g, y):
    zero = g.add_constant(0, y.dtype, shape=y.shape)
    return g.add_node("where", [g.add_node("eq", [y, zero]), g.add_constant(1, y.dtype, shape=y.shape), y])


def _clamp(g, x, lo, hi):
    """x with NaN -> 0 and clamped to [lo, hi]: castable to any integer type."""
    c = lambda v: g.add_constant(v, x.dtype, shape=x.shape)  # noqa: E731
    x = g.add_node("where", [g.add_node("eq", [x, x]), x, c(0)])
    return g.add_node("minimum", [g.add_node("maximum", [x, c(lo)]), c(hi)])


@st.composite
def mixed_graphs(draw, max_steps=10):
    """(graph, inputs) over every dtype: casts, integer division, bools, movement, sorting, gathers."""
    g, pool, inputs = Graph(), [], []
    for _ in range(draw(st.integers(1, 3))):
        shape, d = draw(st.sampled_from(SHAPES)), draw(st.sampled_from(DTYPES))
        pool.append(g.add_input(shape, d))
        inputs.append(_value(draw, shape, d))
    for _ in range(draw(st.integers(1, max_steps))):
        x = draw(st.sampled_from(pool))
        d, shape, nd = x.dtype, tuple(x.shape), len(x.shape)
        kind = draw(st.sampled_from(["cast", "unary", "binary", "binary", "where", "reduce", "move", "sort",
                                     "matmul"]))
        partner = draw(st.sampled_from([n for n in pool if n.dtype is d and tuple(n.shape) == shape]))
        if kind == "cast":
            to = draw(st.sampled_from(DTYPES))
            if d.is_floating_point and not to.is_floating_point:
                x = _clamp(g, x, 0 if to in (loom.uint8, loom.bool) else -100, 100)
            out = g.add_node("cast", [x], {"dtype": to})
        elif kind == "unary":
            ops_ = (["neg", "abs", "sign", "floor", "round", "exp", "tanh", "sqrt"] if d.is_floating_point
                    else ["not"] if d is loom.bool else ["neg", "abs", "sign", "not"])
            out = g.add_node(draw(st.sampled_from(ops_)), [x])
        elif kind == "binary":
            ops_ = (["add", "sub", "mul", "div", "maximum", "minimum", "floordiv", "mod"] if d.is_floating_point
                    else ["add", "mul", "and", "or", "xor", "maximum"] if d is loom.bool
                    else ["add", "sub", "mul", "maximum", "minimum", "floordiv", "mod", "and", "xor"])
            op = draw(st.sampled_from(ops_))
            y = _nonzero(g, partner) if op in ("floordiv", "mod") and not d.is_floating_point else partner
            out = g.add_node(op, [x, y])
        elif kind == "where":
            c = g.add_node(draw(st.sampled_from(["lt", "le", "eq", "ne", "gt", "ge"])), [x, partner])
            out = g.add_node("where", [c, partner, x])
        elif kind == "reduce":
            axes = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), max_size=nd)))) if nd else ()
            op = draw(st.sampled_from(["sum", "max", "min"] + (["prod"] if not d.is_floating_point else [])))
            out = g.add_node(op, [x], {"axes": axes, "keepdim": draw(st.booleans())})
        elif kind == "move" and nd:
            op = draw(st.sampled_from(["permute", "flip", "pad", "slice"]))
            attrs = {"permute": {"perm": tuple(draw(st.permutations(range(nd))))},
                     "flip": {"axes": (draw(st.integers(0, nd - 1)),)},
                     "pad": {"pads": [(1, draw(st.integers(0, 2)))] * nd, "value": 1},
                     "slice": {"starts": [0] * nd, "stops": list(shape), "steps": [2] * nd}}[op]
            out = g.add_node(op, [x], attrs)
        elif kind == "sort" and nd:
            axis = draw(st.integers(0, nd - 1))
            order = g.add_node("argsort", [x], {"axis": axis, "descending": draw(st.booleans())})
            out = g.add_node("gather", [x, order], {"axis": axis})
        elif kind == "matmul" and nd == 2 and d is not loom.bool:
            out = g.add_node("matmul", [x, g.add_node("permute", [partner], {"perm": (1, 0)})])
        else:
            out = g.add_node("reshape", [x], {"shape": shape[::-1]})
        pool.append(out)
    g.outputs = [pool[-1]] + draw(st.lists(st.sampled_from(pool), max_size=2))
    g.verify()
    return g, inputs


@SETTINGS
@given(mixed_graphs())
def test_random_mixed_dtype_graphs_match_the_reference(case):
    graph, inputs = case
    compare(graph, inputs, rtol=None, atol=1e-6)


# ---------------------------------------------------------------- training under loom.function

def _train(backend, opt_name, steps=5, **opt_kw):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    opt = getattr(loom.optim, opt_name)(model.parameters(), lr=0.05, **opt_kw)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = loom.function(step, backend=backend) if backend else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = loom.tensor(rng.standard_normal((8, 6)).astype(np.float32))
        y = loom.tensor(rng.integers(0, 3, 8))
        losses.append(fn(x, y).item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn


@pytest.mark.parametrize("opt_name,kw", [("SGD", {"momentum": 0.9}), ("Adam", {})])
def test_mlp_training_under_xla_equals_eager(opt_name, kw):
    eager_losses, eager_params, _ = _train(None, opt_name, **kw)
    losses, params, fn = _train("xla", opt_name, **kw)
    assert fn.trace_count == 1
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert not math.isclose(losses[0], losses[-1]), "the parameters did change"
