"""The pass registry: levels, run_passes, user passes and errors."""
import numpy as np
import pytest

import loom
from loom.compiler import PASSES, passes_for_level, register_pass, run_passes
from loom.errors import GraphError, LoomError
from loom.ir import Graph

F32 = loom.float32


def chain_graph():
    g = Graph()
    x = g.add_input((3,), F32, name="x")
    dead = g.add_node("exp", [x])
    y = g.add_node("neg", [g.add_node("neg", [x])])
    g.outputs = [g.add_node("mul", [y, g.add_constant(2.0, F32, shape=(3,))])]
    return g, dead


def test_builtin_passes_are_registered_with_levels():
    for name, level in [("prune", 1), ("cse", 1), ("fold", 1), ("simplify", 2), ("inplace", 2), ("fuse", 2),
                        ("memory", 3)]:
        assert PASSES[name].level == level and PASSES[name].builtin
        assert PASSES[name].doc
    assert PASSES["simplify_fast_math"].level is None


def test_levels_add_up():
    assert passes_for_level(0) == []
    assert passes_for_level(1) == ["prune", "cse", "fold"]
    assert passes_for_level(2) == ["prune", "cse", "fold", "simplify", "cse", "fuse", "inplace"]
    assert passes_for_level(3) == passes_for_level(2) + ["memory"]
    for bad in (-1, 4, 1.0, True, "3"):
        with pytest.raises(LoomError, match="level must be an int in 0..3"):
            passes_for_level(bad)


def test_run_passes_leaves_the_input_graph_alone():
    g, dead = chain_graph()
    before = str(g)
    out = run_passes(g, ["prune", "simplify"])
    assert str(g) == before and dead in g
    assert [n.op for n in out] == ["input", "const", "mul"]


def test_run_passes_in_place_keeps_node_ids():
    g, dead = chain_graph()
    x = g.inputs[0]
    out = run_passes(g, ["prune"], copy=False)
    assert out is g and dead not in g and g.inputs[0] is x


def test_subset_and_repeats_run_in_order():
    seen = []
    g, _ = chain_graph()
    run_passes(g, ["cse", "prune", "cse"], observer=lambda name, graph: seen.append((name, len(graph))))
    assert seen == [("cse", 6), ("prune", 5), ("cse", 5)]


def test_unknown_pass_name_is_a_clear_error():
    g, _ = chain_graph()
    with pytest.raises(LoomError, match=r"unknown pass 'no_such_pass'; registered passes: .*prune"):
        run_passes(g, ["prune", "no_such_pass"])
    with pytest.raises(LoomError, match="unknown pass"):
        run_passes(g, [3])
    with pytest.raises(LoomError, match="expected a loom.ir.Graph"):
        run_passes("not a graph", ["prune"])


def test_single_name_string_is_one_pass():
    g, dead = chain_graph()
    assert dead not in run_passes(g, "prune").find(op="exp")


def test_user_pass_runs_by_name_and_at_its_level():
    calls = []

    @register_pass("test_user_counter", level=2, override=True)
    def counter(graph):
        calls.append(len(graph))
        graph.meta["counted"] = len(graph)
        return graph

    try:
        g, _ = chain_graph()
        assert run_passes(g, ["test_user_counter"]).meta["counted"] == 6
        assert "test_user_counter" not in passes_for_level(1)
        names = passes_for_level(3)
        assert names.index("test_user_counter") == names.index("inplace") + 1  # After level 2's built-ins.
        out = run_passes(g, names)
        assert len(calls) == 2 and out.meta["counted"] == calls[-1]
    finally:
        del PASSES["test_user_counter"]


def test_user_pass_that_rewrites():
    @register_pass("test_exp_to_expm1_plus_1", override=True)
    def rewrite(graph):
        for n in graph.find(op="exp"):
            one = graph.add_constant(1.0, n.dtype, shape=n.shape)
            graph.replace(n, graph.add_node("add", [graph.add_node("expm1", n.inputs), one]))
        return graph

    try:
        g = Graph()
        x = g.add_input((4,), F32)
        g.outputs = [g.add_node("exp", [x])]
        out = run_passes(g, ["test_exp_to_expm1_plus_1", "prune"])
        assert sorted(n.op for n in out) == ["add", "const", "expm1", "input"]
        v = np.array([0.0, 1.0, -2.0, 0.5], np.float32)
        np.testing.assert_allclose(out.run(v)[0].numpy(), np.exp(v), rtol=1e-6)
    finally:
        del PASSES["test_exp_to_expm1_plus_1"]


def test_register_errors():
    with pytest.raises(LoomError, match="already registered"):
        register_pass("prune")(lambda g: g)
    with pytest.raises(LoomError, match="built-in pass and cannot be replaced"):
        register_pass("prune", override=True)(lambda g: g)
    with pytest.raises(LoomError, match="level must be None or an int in 1..3"):
        register_pass("x_bad_level", level=0)
    with pytest.raises(LoomError, match="non-empty str"):
        register_pass("")
    with pytest.raises(LoomError, match="must be callable"):
        register_pass("x_not_callable")(42)
    assert "x_not_callable" not in PASSES


def test_pass_returning_garbage_or_breaking_the_graph_is_caught():
    @register_pass("test_returns_none", override=True)
    def bad(graph):
        return None

    @register_pass("test_breaks_graph", override=True)
    def breaks(graph):
        n = graph.find(op="neg")[0]
        n.inputs = (graph.add_input((5,), F32),)  # Outside the Graph API: shapes no longer fit.
        return graph

    try:
        g, _ = chain_graph()
        with pytest.raises(LoomError, match="returned NoneType"):
            run_passes(g, ["test_returns_none"])
        with pytest.raises(GraphError):
            run_passes(g, ["test_breaks_graph"])
        run_passes(g, ["test_breaks_graph"], verify=False)  # Verification can be switched off.
    finally:
        del PASSES["test_returns_none"], PASSES["test_breaks_graph"]


def test_compiler_is_reexported():
    for name in ("register_pass", "PASSES", "run_passes", "compile", "explain", "plan_memory"):
        assert hasattr(loom.compiler, name)
