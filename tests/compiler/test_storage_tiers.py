"""memory_budget with the disk tier: offload="disk" / "auto" keep results bit-identical and report each choice."""
import warnings

import numpy as np
import pytest

import loom
from loom.compiler.memory import plan_memory
from loom.compiler.remat import TierChoice, rematerialize
from loom.runtime import storage
from loom.runtime.executor import Executable
from tests.compiler.test_memory_budget import (  # noqa: F401
    _arena, _assert_same, _chain_graph, _mlp, _mlp_data, _outputs, small_gpt)


def _train(build, data, steps, budget=None, offload="never"):
    model, step = build()
    fn = loom.function(step, memory_budget=budget, offload=offload)
    losses = [fn(*data[k % len(data)]).detach().numpy().copy() for k in range(steps)]
    params = [p.detach().numpy().copy() for p in model.parameters()]
    return losses, params, fn


def _storage_nodes(fn):
    (entry,) = fn._cache.values()
    return [n.attrs["action"] for n in entry.exe.graph.topological_order() if n.op == "storage"]


def test_offload_on_a_hand_made_graph_places_offload_flush_prefetch_reload_in_order():
    g = _chain_graph()
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    want = Executable(g.copy(), plan_memory(g))(x)[0]
    budget = 4096 + 3 * 4096 + 128  # The output, and room for two tokens (64-byte aligned) beside three values.
    h, report = rematerialize(g.copy(), budget, offload="disk")
    assert report.met and report.strategy == "offload" and report.offloaded == 1 and report.values == 0
    assert report.offload_bytes == 4096 and report.arena_after <= budget - 4096 < report.arena_before
    order = h.topological_order()
    acts = [(k, n.attrs["action"]) for k, n in enumerate(order) if n.op == "storage"]
    assert [a for _, a in acts] == ["offload", "flush", "prefetch", "reload"]
    off, flush, pre, back = (k for k, _ in acts)
    reload_node = order[back]
    # The write is asynchronous: the flush reads the offloaded value, so its slot is kept until the write is done.
    assert order[off].attrs["async"] is True and order[flush].inputs == (order[off], order[off].inputs[0])
    # The reloaded copy is read by every late reader; the original dies at the offload.
    assert reload_node.shape == (1024,) and all(order.index(c) > back for c in h.consumers(reload_node))
    assert off < flush < pre <= back
    got = Executable(h, plan_memory(h))(x)[0]
    assert got.tobytes() == want.tobytes()
    assert storage.disk().keys() == []  # Every file is deleted once reloaded.
    (choice,) = report.tiers
    assert isinstance(choice, TierChoice) and choice.choice == "offload" and choice.nbytes == 4096
    assert "offload" in str(report) and "disk 0." in str(report)


def test_offload_setting_is_checked():
    with pytest.raises(loom.LoomValueError, match="offload must be"):
        loom.function(lambda x: x, memory_budget="1MB", offload="tape")
    with pytest.raises(loom.LoomValueError, match="offload must be one of"):
        rematerialize(_chain_graph(), 4096, offload="ssd")


def test_offload_defaults_to_auto_which_acts_only_under_a_budget(monkeypatch, tmp_path):
    """No budget: no remat pass, no cost-model measurement, no disk tier. A budget: "auto" decides, bit-identically."""
    assert loom.function(lambda x: x).offload == "auto"
    assert loom.function(lambda x: x, memory_budget="1MB").offload == "auto"
    assert loom.function(lambda x: x, memory_budget="1MB", offload="never").offload == "never"
    data = _mlp_data()

    def untouched(*_):
        raise AssertionError("the offload machinery ran without a memory budget")

    with monkeypatch.context() as m:
        from loom.compiler import remat

        m.setattr(storage, "disk", untouched)
        m.setattr(remat, "disk_bandwidth", untouched)
        m.setattr(remat, "flop_rate", untouched)
        m.setenv("LOOM_STORAGE_DIR", str(tmp_path))
        model, step = _mlp()
        base_fn = loom.function(step)
        base_losses = [base_fn(*data[k % len(data)]).detach().numpy().copy() for k in range(4)]
        base_params = [p.detach().numpy().copy() for p in model.parameters()]
    assert base_fn.memory_reports == [] and _storage_nodes(base_fn) == [] and list(tmp_path.iterdir()) == []
    budget = _outputs(base_fn) + int(_arena(base_fn) * 0.6)
    model, step = _mlp()
    fn = loom.function(step, memory_budget=budget)   # The default setting.
    with warnings.catch_warnings():
        warnings.simplefilter("error", loom.LoomWarning)
        losses = [fn(*data[k % len(data)]).detach().numpy().copy() for k in range(4)]
    (report,) = fn.memory_reports
    assert report.offload == "auto" and report.met and _arena(fn) + report.outputs <= budget
    assert report.values + report.offloaded > 0 and "least estimated time" in fn.explain()
    _assert_same(losses, base_losses)
    _assert_same([p.detach().numpy().copy() for p in model.parameters()], base_params)


@pytest.mark.parametrize("offload", ["disk", "auto"])
def test_mlp_training_under_a_budget_with_the_disk_tier_is_bit_identical(offload):
    data = _mlp_data()
    base_losses, base_params, base_fn = _train(_mlp, data, 4)
    budget = _outputs(base_fn) + int(_arena(base_fn) * 0.6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", loom.LoomWarning)
        losses, params, fn = _train(_mlp, data, 4, budget, offload)
    (report,) = fn.memory_reports
    assert report.met and _arena(fn) + report.outputs <= budget and report.offload == offload
    _assert_same(losses, base_losses)
    _assert_same(params, base_params)
    acts = _storage_nodes(fn)
    assert len(acts) == 4 * report.offloaded and acts.count("flush") == report.offloaded
    if offload == "disk":
        # Disk carries the step; a value is recomputed only inside the kernel that reads it, where offloading
        # alone cannot fit the budget (the 'offload+inline' plan).
        assert report.offloaded > 0 and acts.count("reload") == report.offloaded
        assert all(t.choice in ("offload", "inline") for t in report.tiers), [t.choice for t in report.tiers]
    # Every value moved off the peak is listed with its choice and the cost model's figures.
    assert len(report.tiers) == report.offloaded + report.values
    text = fn.explain()
    assert f"storage tiers (offload='{offload}')" in text and "least estimated time" in text


def test_auto_picks_per_value_by_the_cost_model(monkeypatch):
    """A slow disk makes every value recomputed, a fast one offloaded: the setting, not the code, decides."""
    data = _mlp_data()
    *_, base_fn = _train(_mlp, data, 2)
    # Tight enough that computing the GELU kernels' inputs inline (no disk estimate to weigh) does not suffice,
    # loose enough that recomputing alone can meet it (at 0.3 some values have nothing to recompute them from).
    budget = _outputs(base_fn) + int(_arena(base_fn) * 0.4)
    monkeypatch.setattr(storage, "_BW", [1e3])         # 1 kB/s: recomputing always wins.
    *_, slow = _train(_mlp, data, 2, budget, "auto")
    (r,) = slow.memory_reports
    assert r.offloaded == 0 and r.values > 0 and {t.choice for t in r.tiers} <= {"recompute", "inline"}
    assert any(t.transfer_s is not None and t.transfer_s > t.recompute_s for t in r.tiers)
    monkeypatch.setattr(storage, "_BW", [1e15])        # Free transfers: offloading always wins.
    *_, fast = _train(_mlp, data, 2, budget, "auto")
    (r,) = fast.memory_reports
    assert r.offloaded > 0 and "offload" in r.strategy
    assert any(t.choice == "offload" and t.recompute_s is not None for t in r.tiers)


@pytest.mark.parametrize("bandwidth", [None, 3e8, 1e7])
def test_gpt_step_under_a_quarter_of_its_arena_with_disk_offload_is_bit_identical(small_gpt, bandwidth,  # noqa: F811
                                                                                   monkeypatch):
    """Measured disk rates, and slow disks: a write that takes longer than the steps before the peak still
    has its value gone before any step over the budget (the flush waits there instead)."""
    if bandwidth is not None:
        monkeypatch.setattr(storage, "_BW", [bandwidth])
    build, data = small_gpt
    base_losses, base_params, base_fn = _train(build, data, 3)
    budget = _outputs(base_fn) + _arena(base_fn) // 4   # The returned arrays count against the budget.
    with warnings.catch_warnings():
        warnings.simplefilter("error", loom.LoomWarning)   # Met, so not warned about.
        losses, params, fn = _train(build, data, 3, budget, "disk")
    (report,) = fn.memory_reports
    # The budget is a promise with the disk tier too: where reloading cannot lower a kernel's reads (the GELU
    # backward's five inputs), those are computed inline, and what is left recomputed.
    assert report.met and _arena(fn) + report.outputs <= budget and report.strategy.startswith("offload")
    assert report.offloaded > 0 and _arena(fn) < _arena(base_fn)
    assert not any(t.choice == "recompute" for t in report.tiers) or "greedy" in report.strategy
    _assert_same(losses, base_losses)
    _assert_same(params, base_params)
    assert storage.disk().keys() == []


def test_auto_keeps_the_plan_the_cost_model_finds_cheapest(small_gpt):  # noqa: F811
    """offload="auto" weighs recomputing (segmentations, the greedy), offloading alone and offloading with inline
    inputs, and runs the one that fits with the least estimated time; the report lists them all. (Plans weighed
    after one fits stop once they cost more, so how many fit depends on the measured rates.)"""
    build, data = small_gpt
    base_losses, base_params, base_fn = _train(build, data, 2)
    budget = _outputs(base_fn) + _arena(base_fn) // 4
    losses, params, fn = _train(build, data, 2, budget, "auto")
    (r,) = fn.memory_reports
    fits = [c for c in r.candidates if c[3]]
    names = {c[0] for c in r.candidates}
    assert r.met and "offload" in names and any(n.startswith("segments(") for n in names) and fits
    best = min(fits, key=lambda c: (c[5], c[1]))
    assert r.strategy == best[0] and r.seconds == best[5] and r.arena_after == best[1]
    _assert_same(losses, base_losses)
    _assert_same(params, base_params)


def _matmul_chain():
    """`a` is read first and last; matmuls do not fuse, so it stays live across every step between."""
    g = loom.ir.Graph()
    x = g.add_input((64, 64), "float32")
    a = g.add_node("matmul", [x, x])
    b = g.add_node("matmul", [a, a])
    c = g.add_node("matmul", [b, b])
    d = g.add_node("matmul", [c, c])
    g.outputs = [g.add_node("matmul", [g.add_node("add", [d, c]), a])]
    return g


@pytest.mark.parametrize("offload", ["disk", "auto"])
def test_compiler_explain_lists_the_choice_per_value(offload, monkeypatch):
    monkeypatch.setattr(storage, "_BW", [1e15])  # Free transfers: "auto" offloads too.
    full = loom.compiler.explain(_matmul_chain()).memory.arena_bytes
    # The 16 KiB output counts against the budget: the arena must drop one 16 KiB value (tokens aside).
    text = str(loom.compiler.explain(_matmul_chain(), memory_budget=full + 128, offload=offload))
    assert "== rematerialisation ==" in text and f"storage tiers (offload='{offload}'): 1 values offloaded" in text
    line = next(row for row in text.splitlines() if "float32[64, 64]" in row and "offload " in row)
    assert "16.00 KiB" in line and "recompute" in line and "disk" in line  # Both estimates beside the choice.
    assert "storage" in text  # The offload, prefetch and reload nodes appear in the pass listing.


def test_slow_asynchronous_writes_leave_training_bit_identical(monkeypatch):
    """Every offload's write takes 5 ms on the I/O thread: the flushes wait for them, the bits do not change."""
    from tests.runtime.test_storage import _slow_writes

    data = _mlp_data()
    base_losses, base_params, base_fn = _train(_mlp, data, 3)
    budget = _outputs(base_fn) + int(_arena(base_fn) * 0.6)
    _slow_writes(storage.disk(), monkeypatch, delay=0.005)
    with warnings.catch_warnings():
        warnings.simplefilter("error", loom.LoomWarning)
        losses, params, fn = _train(_mlp, data, 3, budget, "disk")
    (report,) = fn.memory_reports
    assert report.met and report.offloaded > 0
    _assert_same(losses, base_losses)
    _assert_same(params, base_params)
    assert storage.disk().keys() == []


def _viewed_graph(n=1024):
    """`a` is read early through a view, and late only through that view: moving it off the peak means
    rebuilding the view on the recomputed or reloaded copy."""
    g = loom.ir.Graph()
    x = g.add_input((n,), "float32")
    a = g.add_node("exp", [g.add_node("sin", [x])])
    v = g.add_node("reshape", [a], {"shape": (32, n // 32)})
    b = g.add_node("exp", [g.add_node("reshape", [g.add_node("neg", [v])], {"shape": (n,)})])
    c = g.add_node("exp", [g.add_node("neg", [b])])
    d = g.add_node("exp", [g.add_node("neg", [c])])
    g.outputs = [g.add_node("mul", [g.add_node("reshape", [g.add_node("add", [d, c])], {"shape": (32, n // 32)}), v])]
    return g


@pytest.mark.parametrize("offload", ["never", "disk"])
def test_a_value_read_late_through_a_view_is_recomputed_or_offloaded(offload):
    g = _viewed_graph()
    x = np.random.default_rng(1).standard_normal(1024).astype(np.float32)
    want = Executable(g.copy(), plan_memory(g))(x)[0]
    before = plan_memory(g).arena_bytes
    budget = 4096 + before - 4096 + 192  # The output, and one value less in the arena (tokens aside).
    h, report = rematerialize(g.copy(), budget, offload=offload)
    assert report.met and report.arena_after < before
    # The view is rebuilt on the moved copy for the late reader; the original still serves the early one.
    views = [n for n in h if n.op == "reshape" and n.shape == (32, 32) and n.inputs[0].shape == (1024,)
             and n.inputs[0].op in ("exp", "storage")]
    if offload == "disk":
        assert report.offloaded >= 1
        assert sorted(v.inputs[0].op for v in views) == ["exp", "storage"]
    else:
        assert report.values >= 1 and [v.inputs[0].op for v in views] == ["exp", "exp"]
    got = Executable(h, plan_memory(h))(x)[0]
    assert got.tobytes() == want.tobytes()
    assert storage.disk().keys() == []
