"""Dead-node pruning."""
import numpy as np

import loom
from loom.compiler import run_passes
from loom.compiler.passes.prune import drop_unused, prune
from loom.ir import Graph
from tests.compiler.helpers import assert_same, values

F32 = loom.float32


def test_prune_drops_what_no_output_needs():
    g = Graph()
    x = g.add_input((3,), F32, name="x")
    g.add_input((2,), F32, name="unused")
    a = g.add_node("exp", [x])
    dead1 = g.add_node("neg", [a])
    dead2 = g.add_node("sin", [dead1])
    c = g.add_constant(1.0, F32, shape=(3,))
    dead3 = g.add_node("add", [x, c])
    g.outputs = [g.add_node("tanh", [a])]
    want = g.run(values((3,)), values((2,)))
    out = run_passes(g, ["prune"])
    assert [n.op for n in out] == ["input", "input", "exp", "tanh"]
    assert out.inputs[1].name == "unused"  # Placeholders are the signature: they stay.
    assert_same(out.run(values((3,)), values((2,))), want)
    assert len(g) == 8 and {dead1, dead2, dead3} <= set(g)


def test_prune_keeps_every_output_and_shared_nodes():
    g = Graph()
    x = g.add_input((2, 2), F32)
    a = g.add_node("exp", [x])
    b = g.add_node("neg", [a])
    g.outputs = [b, a, a]
    prune(g)
    assert len(g) == 3 and g.outputs == (b, a, a)


def test_prune_of_an_already_minimal_graph_is_a_no_op():
    g = Graph()
    x = g.add_input((2,), F32)
    g.outputs = [x]
    prune(g)
    assert list(g) == [x]


def test_drop_unused_cascades_but_spares_older_garbage():
    g = Graph()
    x = g.add_input((3,), F32)
    old_dead = g.add_node("sin", [x])
    a = g.add_node("exp", [x])
    b = g.add_node("neg", [a])
    g.outputs = [g.add_node("cos", [x])]
    drop_unused(g, [b])
    assert b not in g and a not in g and old_dead in g and x in g


def test_prune_result_runs_like_the_original_with_specials():
    g = Graph()
    x = g.add_input((5,), F32)
    y = g.add_node("log", [x])
    g.add_node("exp", [y])
    g.outputs = [g.add_node("mul", [y, x])]
    v = np.array([np.nan, np.inf, -0.0, 0.0, -1.0], np.float32)
    assert_same(run_passes(g, ["prune"]).run(v), g.run(v))


def _layout(g: Graph) -> list:
    """Everything about a graph's nodes in its topological order (fused bodies included), positions for nodes."""
    order = g.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    return [(n.op, n.dtype.name, tuple(n.shape), tuple(pos[i] for i in n.inputs),
             sorted((k, _layout(v) if isinstance(v, Graph) else repr(v)) for k, v in n.attrs.items()))
            for n in order] + [pos[o] for o in g.outputs]


def test_stored_walk_orders_give_the_graphs_the_walks_gave(monkeypatch):
    """`keep_walk_order` stores the order a depth-first walk would give: every pass then sees the graph in
    the same order, so the pipeline's result is the one it gives when each pass walks (random graphs)."""
    from loom.compiler import optimize
    from loom.compiler.passes import fold, prune as prune_module, simplify
    from loom.ir import graph as graph_module
    from tests.compiler.fuzz_graphs import make_graph

    walks = []
    real_walk = graph_module._dfs_order
    monkeypatch.setattr(graph_module, "_dfs_order", lambda *a: walks.append(1) or real_walk(*a))
    graphs = [make_graph(s, s)[0] for s in range(40)]
    stored, walked = [], []
    for g in graphs:
        stored.append(_layout(optimize(g)[0]))
    n_stored = len(walks)
    keep = prune_module.keep_walk_order
    for module in (fold, prune_module, simplify):
        monkeypatch.setattr(module, "keep_walk_order", lambda graph, before, made: False)
    for g in graphs:
        walked.append(_layout(optimize(g)[0]))
    assert len(walks) - n_stored > n_stored  # Without stored orders the passes walk (the test tests something).
    assert stored == walked

    # An edit the walk would order differently (a node now reading a later one) is not stored.
    g = Graph()
    x = g.add_input((3,), F32)
    a = g.add_node("neg", [x])
    b = g.add_node("exp", [x])
    g.outputs = [a, b]
    before = list(g._nodes)
    g.set_input(a, 0, b)
    assert keep(g, before, []) is False and list(g._nodes) == before
