"""explain(): the graph after every pass, the kernels and the memory plan."""
import numpy as np
import pytest

import loom
from loom.compiler import PASSES, explain, passes_for_level, register_pass
from loom.errors import LoomError
from loom.ir import Graph


def f(x, w):
    h = (x @ w * 1.0).relu()
    return h.exp().sum(1), h


def test_report_names_every_pass_kernel_and_memory_number():
    x, w = loom.randn(8, 5), loom.randn(5, 6)
    e = explain(f, x, w)
    text = str(e)
    for name in passes_for_level(3):
        assert f"after {name}:" in text
    assert [p.name for p in e.passes] == passes_for_level(3)
    assert len(e.kernels) >= 1 and text.count("-- kernel") == len(e.kernels)
    for k in e.kernels:
        assert f"%{k.node.id} = fused(" in text
        assert str(k.body) in text
    assert e.memory is not None
    assert f"planned peak {e.memory.arena_bytes} B vs lower bound {e.memory.lower_bound} B" in text
    assert "fused" in str(e.optimized) and "matmul" in text


def test_structured_fields():
    x, w = loom.randn(8, 5), loom.randn(5, 6)
    e = explain(f, x, w)
    counts = e.node_counts
    assert counts[0] == ("captured", len(e.graph)) and counts[-1] == ("memory", len(e.optimized))
    assert [n.op for n in e.graph.inputs] == ["input", "input"]
    simplify = next(p for p in e.passes if p.name == "simplify")
    assert simplify.nodes_after < simplify.nodes_before and "mul" not in simplify.ops
    assert all(p.seconds >= 0 for p in e.passes)
    np.testing.assert_allclose(e.optimized.run(x, w)[0].numpy(), f(x, w)[0].numpy(), rtol=1e-6)
    assert "kernels" in repr(e) and "lower bound" in repr(e)


def test_kernel_sources_come_from_codegen_when_available():
    e = explain(lambda t: (t.sin() * 2.0).sum(0), loom.randn(4, 4))
    (k,) = e.kernels
    try:
        from loom.codegen import get_kernel  # noqa: F401
    except ImportError:
        assert k.source is None and "not available" in k.note
    else:
        assert (k.source is not None and "{" in k.source) or k.note.startswith("codegen failed")
        assert (k.source or k.note) in str(e)


def test_levels_and_graphs():
    g = Graph()
    x = g.add_input((3,), loom.float32)
    g.outputs = [g.add_node("exp", [g.add_node("neg", [g.add_node("neg", [x])])])]
    e0 = explain(g, level=0)
    assert e0.passes == [] and e0.kernels == [] and e0.memory is None
    assert "no static plan at level O0" in str(e0)
    e1 = explain(g, level=1)
    assert [p.name for p in e1.passes] == ["prune", "cse", "fold"] and e1.memory is None
    e3 = explain(g)
    assert [k.ops for k in e3.kernels] == [["exp"]]
    assert len(g) == 4  # The explained graph itself is untouched.


def test_user_passes_show_up():
    @register_pass("test_explain_marker", level=3, override=True)
    def marker(graph):
        return graph

    try:
        e = explain(lambda t: t.exp(), loom.randn(3))
        assert e.passes[-1].name == "test_explain_marker" and "after test_explain_marker:" in str(e)
    finally:
        del PASSES["test_explain_marker"]


def test_nested_outputs_and_repeated_inputs():
    x = loom.randn(3, 2)
    e = explain(lambda a, b: {"s": (a + b).sum(), "l": [a * b]}, x, x)
    assert len(e.graph.inputs) == 1 and len(e.graph.outputs) == 2
    np.testing.assert_allclose(e.optimized.run(x)[0].item(), (x + x).sum().item(), rtol=1e-6)


def test_errors():
    with pytest.raises(LoomError, match="must return Tensors"):
        explain(lambda t: 3, loom.randn(2))
    with pytest.raises(LoomError, match="returned no Tensors"):
        explain(lambda t: [], loom.randn(2))
    with pytest.raises(LoomError, match="expected a function or a Graph"):
        explain(42)
    with pytest.raises(LoomError, match="a Graph takes no arguments"):
        explain(Graph(), loom.randn(2))


@pytest.fixture(params=["measured", "fast-disk", "slow-disk", "slow-flops"])
def rates(request, monkeypatch):
    """The cost model's rates: this machine's, or ones that make the disk or recomputation look cheap. Under
    offload="auto" which one a value gets depends on them; whether the budget is met must not."""
    from loom.compiler import remat
    from loom.runtime import storage
    bw, fr = {"measured": (None, None), "fast-disk": (1e12, None), "slow-disk": (1e7, None),
              "slow-flops": (None, 1e8)}[request.param]
    if bw is not None:
        monkeypatch.setattr(storage, "_BW", [bw])
    if fr is not None:
        monkeypatch.setattr(remat, "_RATE", [fr])
    return request.param


def test_actor_tasks_under_a_budget_show_their_shares(rates):
    """runtime="actors": the budget split among independent branches, as the actor runtime splits it."""
    rng = np.random.default_rng(0)
    x = loom.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    w1, w2 = (loom.tensor(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))

    def chain(x, w):   # `a` is read first and last: live across the chain unless recomputed.
        a = x @ w
        b = (a @ w).tanh()
        c = (b @ w).tanh()
        return ((c @ w + b) * a).sum()

    def two(x, w1, w2):
        return chain(x, w1), chain(x, w2)
    assert explain(two, x, w1, w2, runtime="actors").plan_memory is None   # No budget: nothing to split.
    loose = explain(two, x, w1, w2, memory_budget="1GiB", runtime="actors").plan_memory
    assert loose.met and loose.registers == 2 and all(t.report is None for t in loose.tasks)
    budget = loose.planned - 2 * 16384    # One 16 KiB value less per task.
    e = explain(two, x, w1, w2, memory_budget=budget, runtime="actors")
    mem = e.plan_memory
    assert len(mem.tasks) == 2 and mem.budget == budget and mem.met and mem.planned <= budget
    assert all(t.arena <= t.share and t.report.values > 0 for t in mem.tasks)
    text = str(e)
    assert "== memory plan (actor tasks) ==" in text and "over 2 actor tasks: met" in text
    assert all(f"-- task {t.name}: rematerialisation --" in text for t in mem.tasks if t.report is not None)
    assert "remat" not in [p.name for p in e.passes]   # The pass listing is the whole graph's, without the budget.
    with pytest.raises(LoomError, match="runtime must be"):
        explain(two, x, w1, w2, runtime="threads")


def test_a_loom_function_is_explained_with_its_own_settings():
    step = loom.function(lambda t: (t * 2.0).exp().sum(), memory_budget="1MiB", offload="auto")
    with pytest.raises(LoomError, match="has not been traced yet"):
        explain(step)
    x = loom.ones(8, 8)
    step(x), step(x)
    e = explain(step)
    assert e.remat is not None and e.remat.offload == "auto" and e.remat.budget == 2**20
    assert "== memory plan ==" in str(e) and "policy none (offload='auto')" in str(e)
    assert explain(step, x).remat.budget == 2**20       # With arguments: its function captured, its budget kept.
    assert explain(step, memory_budget=None).remat.budget == 2**20   # None: the function's own.
