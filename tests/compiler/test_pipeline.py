"""Levels end to end: every level preserves every result, on hand-built and random graphs."""
import numpy as np
import pytest
from hypothesis import given, settings

import loom
from loom.compiler import compile, optimize, run_passes
from loom.errors import LoomError
from loom.ir import Graph
from tests.compiler.helpers import assert_same, check_levels, op_counts, random_graphs, values

F32, F64 = loom.float32, loom.float64
SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], [-1.0, 2.5, -3e38, 1e-40, 7.0, -0.5]], np.float32)


def kitchen_sink():
    """A graph with something for every pass: dead code, duplicates, constants, identities, chains."""
    g = Graph()
    x = g.add_input((2, 6), F32, name="x")
    w = g.add_input((6, 3), F32, name="w")
    g.add_node("sin", [x])  # Dead.
    one = g.add_constant(1.0, F32, shape=(2, 6))
    negzero = g.add_constant(-0.0, F32, shape=(2, 6))
    k = g.add_node("exp", [g.add_constant(0.5, F32, shape=(2, 6))])  # Folds.
    a1 = g.add_node("mul", [g.add_node("add", [x, negzero]), one])  # Simplifies to x.
    a2 = g.add_node("mul", [x, k])
    a3 = g.add_node("mul", [x, k])  # Duplicate of a2.
    t = g.add_node("permute", [g.add_node("permute", [a1], {"perm": (1, 0)})], {"perm": (1, 0)})
    e = g.add_node("tanh", [g.add_node("sub", [g.add_node("add", [a2, a3]), t])])
    mm = g.add_node("matmul", [e, w])
    s = g.add_node("max", [g.add_node("exp", [g.add_node("neg", [mm])])], {"axes": (1,), "keepdim": True})
    g.outputs = [g.add_node("log", [g.add_node("add", [s, g.add_constant(0.0, F32, shape=(2, 1))])]), e]
    return g


def test_kitchen_sink_every_level():
    g = kitchen_sink()
    w = values((6, 3), 5)
    opts = check_levels(g, [SPECIAL, w])
    sizes = [len(opts[level]) for level in range(4)]
    assert sizes[0] == len(g) == 23
    assert sizes[1] < sizes[0] and sizes[2] < sizes[1] and sizes[3] == sizes[2]
    assert op_counts(opts[2]) == {"input": 2, "fused": 2, "matmul": 1}
    assert "memory" in opts[3].meta and "memory" not in opts[2].meta


def test_optimize_returns_the_plan_from_level_3():
    g = kitchen_sink()
    opt, plan = optimize(g, 3)
    assert plan is opt.meta["memory"] and plan.arena_bytes >= plan.lower_bound > 0
    opt2, plan2 = optimize(g, 2)
    assert plan2 is None and len(opt2) == len(opt)


def test_compile_argument_errors():
    g = kitchen_sink()
    with pytest.raises(LoomError, match="unknown backend 'cuda'"):
        compile(g, backend="cuda")
    with pytest.raises(LoomError, match="level must be an int in 0..3"):
        compile(g, level=7)
    with pytest.raises(LoomError, match="expected a loom.ir.Graph"):
        compile(lambda x: x)


@pytest.mark.parametrize("dtype", [loom.bfloat16, loom.float16, F64])
def test_levels_on_other_float_dtypes(dtype):
    g = Graph()
    x = g.add_input((3, 4), dtype)
    y = g.add_node("mul", [g.add_node("exp", [x]), g.add_constant(1.0, dtype, shape=(3, 4))])
    z = g.add_node("sum", [g.add_node("cast", [y], {"dtype": F32})], {"axes": (0,), "keepdim": False})
    g.outputs = [z, g.add_node("neg", [g.add_node("neg", [y])])]
    v = values((3, 4), 3)
    check_levels(g, [v if dtype is loom.bfloat16 else v.astype(dtype.np)])


def test_integer_and_bool_graphs():
    g = Graph()
    x = g.add_input((5,), loom.int32)
    m = g.add_node("gt", [x, g.add_constant(0, loom.int32, shape=(5,))])
    y = g.add_node("where", [m, g.add_node("mul", [x, x]), g.add_node("neg", [x])])
    q = g.add_node("floordiv", [y, g.add_constant(3, loom.int32, shape=(5,))])
    g.outputs = [g.add_node("sum", [q], {"axes": (0,), "keepdim": False}), g.add_node("not", [m])]
    check_levels(g, [np.array([-7, 0, 3, 2**16, -2**31], np.int32)])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(random_graphs())
def test_every_level_preserves_random_graphs(case):
    """Bitwise (NaN payloads aside): every pass reproduces the reference computation exactly."""
    g, inputs = case
    check_levels(g, inputs)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(random_graphs())
def test_passes_compose_in_any_order(case):
    g, inputs = case
    want = g.run(*inputs)
    for names in (["fuse", "simplify", "cse", "fold", "prune"], ["inplace", "fuse", "memory"],
                  ["simplify", "fuse", "fuse", "cse", "inplace", "prune", "memory"]):
        assert_same(run_passes(g, names).run(*inputs), want)


def _compiled_matches(g, inputs, level, rtol=2e-6):
    run = compile(g, level=level)
    assert run.wait(120)  # Every kernel built: the C path, not the reference fallback, is what runs.
    want = g.run(*inputs)
    got = run(*inputs)
    assert len(got) == len(want)
    for a, w in zip(got, want):
        w = w.numpy()
        assert a.dtype == w.dtype and a.shape == w.shape
        np.testing.assert_array_equal(np.isnan(a), np.isnan(w))
        np.testing.assert_allclose(a, w, rtol=rtol, atol=1e-6)
    return run


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_compile_runs_like_the_reference(level):
    g = kitchen_sink()
    w = values((6, 3), 5)
    run = _compiled_matches(g, [SPECIAL, w], level)
    assert len(run.kernels) == (2 if level >= 2 else 0)
    assert (run.plan is not None) == (level == 3)


def test_compiled_mlp_training_step_matches_eager():
    from tests.compiler.test_capture import mlp_step

    outs, ins = mlp_step()
    g = Graph.from_tensors(outs, inputs=ins)
    run = _compiled_matches(g, [t.detach().numpy() for t in ins], 3, rtol=1e-5)
    assert len(run.kernels) >= 5


@settings(max_examples=100, derandomize=True, deadline=None)
@given(random_graphs())
def test_each_pass_alone_preserves_random_graphs(case):
    g, inputs = case
    want = g.run(*inputs)
    for name in ("prune", "cse", "fold", "simplify", "fuse", "inplace", "memory"):
        assert_same(run_passes(g, [name]).run(*inputs), want)


@settings(max_examples=120, derandomize=True, deadline=None)
@given(random_graphs())
def test_executables_with_planned_memory_match_random_graphs(case):
    """compile() end to end with kernels on the reference path (LOOM_CODEGEN=0), so results are bitwise:
    this checks the arena plan, in-place reuse and the executor's views, not the C code."""
    import os

    g, inputs = case
    want = [w.numpy() for w in g.run(*inputs)]
    old = os.environ.get("LOOM_CODEGEN")
    os.environ["LOOM_CODEGEN"] = "0"
    try:
        for level in (2, 3):
            run = compile(g, level=level)
            for _ in range(2):  # The second call reuses the arena.
                got = run(*inputs)
                for a, w in zip(got, want):
                    assert a.dtype == w.dtype and a.shape == w.shape
                    assert np.array_equal(a, w, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(w))
    finally:
        if old is None:
            del os.environ["LOOM_CODEGEN"]
        else:
            os.environ["LOOM_CODEGEN"] = old
