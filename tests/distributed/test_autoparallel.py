"""The SBP rule table and the auto-parallel search, in one process (no MPI): which signatures each op declares,
and which plan the cost model picks for data-parallel and model-parallel shaped MLP training steps."""
import pytest

import loom
from loom.distributed import autoparallel as ap
from loom.distributed import sbp_rules as R
from loom.distributed.sbp_rules import broadcast as B
from loom.distributed.sbp_rules import partial_sum as P
from loom.distributed.sbp_rules import split as S
from tests.distributed.mlp_steps import mlp_step


def test_matmul_rules_are_megatrons():
    rules = R.signatures("matmul", [(8, 4), (4, 6)], (8, 6), {}, parts=2)
    assert ((S(0), B), S(0)) in rules and ((B, S(1)), S(1)) in rules and ((S(1), S(0)), P) in rules
    assert rules[-1] == ((B, B), B)  # Always legal, always last.
    batched = R.signatures("matmul", [(3, 8, 4), (3, 4, 6)], (3, 8, 6), {}, parts=2)
    assert ((S(0), S(0)), S(0)) in batched


def test_rules_of_reductions_movement_and_composites():
    assert ((S(0),), P) in R.signatures("sum", [(4, 6)], (), {"axes": (0, 1), "keepdim": False})
    assert ((S(0),), P) not in R.signatures("max", [(4, 6)], (6,), {"axes": (0,), "keepdim": False})
    assert ((S(1),), S(0)) in R.signatures("max", [(4, 6)], (6,), {"axes": (0,), "keepdim": False})
    assert ((S(1),), S(0)) in R.signatures("permute", [(4, 6)], (6, 4), {"perm": (1, 0)})
    # A split survives a reshape only where its slices are the same rows before and after.
    assert ((S(0),), S(0)) in R.signatures("reshape", [(4, 6)], (2, 2, 6), {"shape": (2, 2, 6)}, parts=2)
    assert ((S(1),), S(1)) not in R.signatures("reshape", [(4, 6)], (4, 2, 3), {"shape": (4, 2, 3)}, parts=4)
    assert ((S(1),), S(1)) not in R.signatures("softmax", [(4, 6)], (4, 6), {"dim": 1})
    assert ((B, S(0)), P) in R.signatures("embedding", [(5,), (10, 4)], (5, 4), {})
    assert ((S(0), S(0)), P) in R.signatures("cross_entropy", [(8, 7), (8,)], (), {})
    assert ((P, B), P) in R.signatures("mul", [(4,), (4,)], (4,), {})
    assert ((P, B), P) not in R.signatures("exp", [(4,)], (4,), {}) + R.signatures("add", [(4,), (4,)], (4,), {})
    # A split is never offered on a dimension shorter than the mesh.
    assert all(not s.is_split for ins, o in R.signatures("exp", [(1, 6)], (1, 6), {}, parts=2)
               for s in ins if s.is_split and s.dim == 0)


def test_boxing_costs():
    assert R.boxing_kind(S(0), B) == "all_gather" and R.boxing_kind(P, B) == "all_reduce"
    assert R.boxing_kind(P, S(1)) == "reduce_scatter" and R.boxing_kind(B, S(0)) == "slice"
    assert R.boxing_bytes(B, S(0), 1000, 2) == (0.0, 0)
    assert R.boxing_bytes(P, B, 1000, 4) == (1500.0, 6)  # Ring all-reduce: 2 (p-1)/p of the bytes.


def _mlp_step(batch, d_in, hidden, d_out):
    step, _args, (w1, w2) = mlp_step(batch, d_in, hidden, d_out)
    return step, w1.shape, w2.shape


def test_big_batch_small_weights_is_data_parallel():
    step, w1, w2 = _mlp_step(4096, 32, 32, 8)
    p = ap.plan(step, parts=2)
    sig = {v.shape: p.signature(v) for v in p.graph.inputs}
    assert sig[(4096, 32)] == S(0) and sig[w1] == B and sig[w2] == B
    grads = [b for b in p.boxings() if b[4] == "all_reduce" and b[0] in p.state]
    assert len(grads) == 2  # Each weight's update is all-reduced (the gradient, as DDP does).
    text = ap.explain(p)
    assert "all_reduce" in text and "rejected" in text and "predicted step" in text


def test_tiny_batch_big_weights_is_model_parallel():
    step, w1, w2 = _mlp_step(4, 512, 2048, 512)
    p = ap.plan(step, parts=2)
    sig = {v.shape: p.signature(v) for v in p.graph.inputs}
    assert sig[w1] == S(0) and sig[w2] == S(1)  # Megatron: column then row, found by the search.
    assert all(b[0] not in p.state for b in p.boxings())  # No weight-sized tensor moves.
    dp = ap.plan(_mlp_step(4096, 32, 32, 8)[0], parts=2)
    assert p.comm_time < 1e-4 and dp.comm_time < 1e-4


def test_plan_needs_a_mesh_size_and_a_traced_function():
    with pytest.raises(loom.LoomError, match="placement or parts"):
        ap.plan(loom.ir.Graph())
    with pytest.raises(loom.LoomError, match="has been called"):
        ap.plan(loom.function(lambda x: x * 2), parts=2)


def test_2d_mesh_plans_axis_by_axis_and_never_splits_a_dimension_twice():
    step, w1, w2 = _mlp_step(256, 256, 1024, 256)
    p = ap.plan(step, parts=(2, 2), joint=False)
    assert isinstance(p, ap.NdPlan) and len(p.axes) == 2 and not p.joint
    for v in p.graph.topological_order():
        dims = [s.dim for s in p.signature(v) if s.is_split]
        assert len(dims) == len(set(dims)), (v, p.signature(v))
    sig = {v.shape: p.signature(v) for v in p.graph.inputs}
    # Megatron (column then row) on axis 0, data parallel (batch split) on axis 1.
    x = next(v for v in p.graph.inputs if v.name == "arg0")
    assert sig[w1] == (S(0), B) and sig[w2] == (S(1), B) and p.signature(x) == (B, S(0)), sig
    text = ap.explain(p)
    assert "2 x 2 mesh, searched axis by axis" in text and "axis 1:" in text and "predicted step" in text
    # The second axis sees values the first one split: its plan is made on halved sizes.
    assert any(d > 1 for d in p.axes[1].size_div.values())


def test_2d_mesh_joint_search_beats_axis_by_axis():
    # A big batch and small weights on a 2 x 4 mesh, under the fixed idle rates: axis by axis, the 2-rank first
    # axis takes the batch split (what it would pick alone) and leaves the weights to the 4-rank axis; searched
    # jointly, the batch goes to the 4-rank axis and the weights are split over the 2-rank one, which all-reduces
    # less. Both plans are priced by the same joint cost (every axis an edge is boxed along).
    step, w1, w2 = _mlp_step(4096, 32, 32, 8)
    by_axis = ap.plan(step, parts=(2, 4), joint=False)
    joint = ap.plan(step, parts=(2, 4))
    x = next(v for v in joint.graph.inputs if v.name == "arg0")
    assert by_axis.signature(x) == (S(0), B) and joint.signature(x) == (B, S(0))
    assert joint.predicted < by_axis.predicted - 10e-6, (joint.predicted, by_axis.predicted)
    assert joint.compute_time == pytest.approx(by_axis.compute_time) and joint.comm_time < by_axis.comm_time
    for v in joint.graph.topological_order():
        ins, out = joint.rules[v]
        assert all(len(sig) == 2 for sig in ins + (out,))
        for sig in ins + (out,):  # No tensor dimension split along both axes.
            dims = [s.dim for s in sig if s.is_split]
            assert len(dims) == len(set(dims)), (v, sig)
        assert tuple(q.signature(v) for q in joint.axes) == out  # Each axis's view is the pair's projection.
    text = loom.distributed.explain(step, parts=(2, 4))  # The public entry: plans jointly and prints the pairs.
    assert "2 x 4 mesh, searched jointly" in text and "(broadcast, split(0))" in text and "rejected (" in text
    line = next(ln for ln in text.splitlines() if "'arg0'" in ln and "input" in ln)
    assert "(broadcast, split(0))" in line, line
    assert "predicted step" in text and "axis 1: all_reduce" in text


def test_2d_joint_search_is_never_worse_than_axis_by_axis():
    for shape, mesh in (((64, 512, 512, 512), (2, 4)), ((256, 256, 1024, 256), (2, 2))):
        step = _mlp_step(*shape)[0]
        assert ap.plan(step, parts=mesh).predicted <= ap.plan(step, parts=mesh, joint=False).predicted + 1e-12


def _counting(monkeypatch) -> dict:
    """Count the cost model's answers (boxing prices and node times) during a plan, whatever the search caches."""
    calls = {"n": 0}
    boxing, whole = ap.CostModel.boxing, ap._whole_time

    def count_boxing(self, *args):
        calls["n"] += 1
        return boxing(self, *args)

    def count_whole(*args):
        calls["n"] += 1
        return whole(*args)
    monkeypatch.setattr(ap.CostModel, "boxing", count_boxing)
    monkeypatch.setattr(ap, "_whole_time", count_whole)
    return calls


def test_2d_joint_search_picks_the_plan_it_did_before_asking_the_cost_model_far_less(monkeypatch):
    # The plan and cost the search found before it was made fast (each node's DP row recomputed for every trial,
    # every node swept every time, each (node, from, to) priced on its own): 12327 cost-model calls then.
    calls = _counting(monkeypatch)
    p = ap.plan(mlp_step(256, 256, 1024, 256)[0], parts=(2, 2))
    asked = calls["n"]   # (Reading p.predicted afterwards prices the plan again.)
    sig = {v.name: p.signature(v) for v in p.graph.inputs}
    assert sig["arg0"] == (B, S(0)) and sig["arg1"] == (S(1), S(0)), sig
    assert sig["ext0"] == (S(1), B) and sig["ext1"] == (S(0), B), sig
    assert p.predicted == pytest.approx(0.0101956144, rel=1e-9)
    assert asked == p.evaluations and p.evaluations < 200, (asked, p.evaluations)


# Tracing the GPT step and planning it on a 2 x 2 mesh twice: about 2 s of CPU (3 s before the search kept each
# node's decision per neighbourhood and each backtrack per row; 62 s before the cost model was asked once per class).
def test_2d_joint_search_of_a_gpt_step_asks_the_cost_model_far_less(monkeypatch):
    from tests.distributed.mlp_steps import gpt_step
    step = gpt_step()[0]
    calls = _counting(monkeypatch)
    p = ap.plan(step, parts=(2, 2))
    asked = calls["n"]
    # Before: 131196 cost-model calls (119575 boxings, 11621 node times) for this 328-node step, and this cost.
    assert asked == p.evaluations and p.evaluations < 1000, (asked, p.evaluations)
    assert p.predicted <= 0.00040276186666666667 * (1 + 1e-9), p.predicted
    assert p.predicted <= ap.plan(step, parts=(2, 2), joint=False).predicted + 1e-12
