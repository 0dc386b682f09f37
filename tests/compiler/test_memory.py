"""Static memory planning: liveness, offsets in one arena, the lower bound."""
import numpy as np
from hypothesis import given, settings

import loom
from loom.compiler import passes_for_level, plan_memory, run_passes
from loom.compiler.memory import ALIGNMENT, VIEW_OPS
from loom.ir import Graph
from tests.compiler.helpers import random_graphs

F32 = loom.float32


def check_plan(g, plan):
    """The plan's invariants, recomputed independently of the planner."""
    order = g.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    outputs = set(g.outputs)
    views = {n for n in order if n.op in VIEW_OPS and n not in outputs}
    assert set(plan.alias) == views
    placed = [n for n in order if n.op not in ("input", "buffer", "const", "arange", "rand") and n not in outputs
              and n not in views]
    assert set(plan.offsets) == set(placed)

    def last_read(m):  # Through views: a view reads its source's memory.
        return max([pos[m]] + [last_read(c) if c in views else pos[c] for c in g.consumers(m)])
    marks = g.meta.get("inplace", {})
    for n in placed:
        assert plan.offsets[n] % ALIGNMENT == 0
        assert plan.sizes[n] == int(np.prod(n.shape)) * n.dtype.np.itemsize
        assert plan.offsets[n] + plan.sizes[n] <= plan.arena_bytes
        first, last = plan.intervals[n]
        assert first <= pos[n] and last >= last_read(n)
        if n in plan.shares:
            donor = plan.shares[n]
            assert marks.get(n) is not None and n.inputs[marks[n]] is donor
            assert plan.offsets[n] == plan.offsets[donor] and plan.sizes[n] == plan.sizes[donor]
    # No two values live at the same step overlap in bytes, unless one took over the other's slot.
    groups = {}
    for n in placed:
        root = n
        while root in plan.shares:
            root = plan.shares[root]
        groups.setdefault(root, []).append(n)
    slots = []
    for root, members in groups.items():
        steps = set()
        for m in members:  # Each member is live from its definition to its last use.
            steps |= set(range(pos[m], last_read(m) + 1))
        slots.append((plan.offsets[root], plan.offsets[root] + plan.sizes[root], steps))
    for i, (o1, e1, s1) in enumerate(slots):
        for o2, e2, s2 in slots[i + 1:]:
            if s1 & s2 and o1 < e1 and o2 < e2:
                assert e1 <= o2 or e2 <= o1, "two live values overlap"
    # The lower bound is the peak of live bytes, and no arena beats it.
    peak = max([sum(e - o for o, e, s in slots if t in s) for t in range(len(order))], default=0)
    assert plan.lower_bound == peak
    assert plan.arena_bytes >= plan.lower_bound


def test_chain_reuses_one_slot_pair():
    g = Graph()
    x = g.add_input((256,), F32)
    n = x
    for op in ["exp", "neg", "sin", "cos", "tanh", "exp"]:
        n = g.add_node(op, [n])
    g.outputs = [g.add_node("sum", [n], {"axes": (0,), "keepdim": False})]
    plan = plan_memory(g)
    check_plan(g, plan)
    assert plan.lower_bound == plan.arena_bytes == 2 * 1024
    assert plan.unplanned_bytes == 6 * 1024
    g2 = run_passes(g, ["inplace"])
    plan2 = plan_memory(g2)
    check_plan(g2, plan2)
    assert plan2.arena_bytes == plan2.lower_bound == 1024 and len(plan2.shares) == 5


def test_inputs_constants_and_outputs_are_not_placed():
    g = Graph()
    x = g.add_input((8,), F32)
    k = g.add_constant(np.ones(8, np.float32))
    r = g.add_node("rand", [], {"seed": 0, "shape": (8,), "dtype": F32})
    a = g.add_node("add", [x, k])
    b = g.add_node("mul", [a, r])
    g.outputs = [b, g.add_node("exp", [b])]
    plan = plan_memory(g)
    assert set(plan.offsets) == {a}
    check_plan(g, plan)


def test_branches_that_live_together_get_disjoint_bytes():
    g = Graph()
    x = g.add_input((64,), F32)
    a = g.add_node("exp", [x])
    b = g.add_node("sin", [x])
    big = g.add_node("cast", [g.add_node("cos", [x])], {"dtype": loom.float64})
    c = g.add_node("add", [a, b])
    g.outputs = [g.add_node("mul", [c, g.add_node("cast", [big], {"dtype": F32})])]
    plan = plan_memory(g)
    check_plan(g, plan)
    assert plan.arena_bytes >= plan.lower_bound > 0


def test_zero_size_and_empty_graphs():
    g = Graph()
    x = g.add_input((0, 3), F32)
    g.outputs = [g.add_node("sum", [g.add_node("exp", [x])], {"axes": (0,), "keepdim": False})]
    plan = plan_memory(g)
    check_plan(g, plan)
    assert plan.arena_bytes == 0
    empty = Graph()
    empty.outputs = [empty.add_input((2,), F32)]
    assert plan_memory(empty).arena_bytes == 0


def test_view_gives_the_planned_bytes():
    g = Graph()
    x = g.add_input((4, 4), F32)
    a = g.add_node("exp", [x])
    g.outputs = [g.add_node("sum", [a], {"axes": (1,), "keepdim": False})]
    plan = plan_memory(g)
    arena = np.zeros(plan.arena_bytes, np.uint8)
    v = plan.view(arena, a)
    assert v.shape == (4, 4) and v.dtype == np.float32 and v.flags.c_contiguous
    v[...] = 1.0
    assert arena.view(np.float32).sum() == 16


def test_plan_is_printable_and_the_pass_stores_it():
    g = Graph()
    x = g.add_input((32,), F32)
    g.outputs = [g.add_node("sum", [g.add_node("exp", [g.add_node("neg", [x])])], {"axes": (0,), "keepdim": False})]
    out = run_passes(g, ["memory"])
    plan = out.meta["memory"]
    text = str(plan)
    assert "arena 256 B" in text and "lower bound 256 B" in text
    assert run_passes(out, ["prune"]).meta.get("memory") is None  # A later pass invalidates the plan.


@settings(max_examples=300, derandomize=True, deadline=None)
@given(random_graphs(max_steps=16))
def test_random_plans_never_overlap_live_values(case):
    g, _ = case
    check_plan(g, plan_memory(g))
    opt = run_passes(g, passes_for_level(3))
    check_plan(opt, opt.meta["memory"])
