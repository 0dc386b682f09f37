"""loom.function(memory_budget=..., runtime="actors"): the budget split among actor tasks, registers counted."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import loom
from loom.compiler import partition
from loom.compiler.partition import PlanMemory
from loom.compiler.remat import RematReport, output_bytes

nn = loom.nn


@pytest.fixture(autouse=True)
def _kernels_built_before_first_use(monkeypatch):
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")   # Every call runs the built C kernels: bytes compare.


def _two_models(depth=4, **options):
    """One step training two independent MLPs: two tasks with no path between them."""
    loom.manual_seed(0)

    def mlp():
        layers = [nn.Linear(32, 128), nn.GELU(approximate="tanh")]
        for _ in range(depth):
            layers += [nn.Linear(128, 128), nn.GELU(approximate="tanh")]
        return nn.Sequential(*layers, nn.Linear(128, 10))
    models = [mlp(), mlp()]
    opts = [loom.optim.SGD(m.parameters(), lr=0.05) for m in models]

    @loom.function(**{"runtime": "actors", **options})
    def step(x, y):
        losses = []
        for m, o in zip(models, opts):
            o.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            losses.append(loss.detach())
        return tuple(losses)
    return models, step


_rng = np.random.default_rng(0)
_DATA = [(loom.tensor(_rng.standard_normal((64, 32)).astype(np.float32)), loom.tensor(_rng.integers(0, 10, 64)))
         for _ in range(2)]


def _train(build, calls=3, **options):
    """Every call's outputs and the final parameters, as bytes, and the compiled program."""
    models, step = build(**options)
    outs = [[v.detach().numpy().tobytes() for v in step(*_DATA[k % 2])] for k in range(calls)]
    params = [p.detach().numpy().tobytes() for m in models for p in m.parameters()]
    (entry,) = step._cache.values()
    step.close()
    return outs, params, entry.exe, step


def _planned(prog, registers: int) -> int:
    """The planned peak from the compiled tasks themselves: each arena, and every output register full."""
    return sum(t.run.plan.arena_bytes + registers * output_bytes(t.run.graph) for t in prog.tasks)


@pytest.fixture(scope="module")
def baseline():
    outs, params, prog, _ = _train(_two_models)
    assert len(prog.tasks) == 2 and prog.memory is None
    return outs, params, sum(t.run.plan.arena_bytes for t in prog.tasks), \
        sum(output_bytes(t.run.graph) for t in prog.tasks)


@pytest.mark.parametrize("frac", [0.8, 0.6])
def test_each_task_fits_its_share_bit_identically(baseline, frac):
    want_outs, want_params, arenas, outs = baseline
    budget = outs + int(frac * arenas)
    with warnings.catch_warnings():
        warnings.simplefilter("error", loom.LoomWarning)   # Met, not warned about.
        got_outs, got_params, prog, step = _train(_two_models, memory_budget=budget, strict=True)
    assert got_outs == want_outs and got_params == want_params
    mem = prog.memory
    assert isinstance(mem, PlanMemory) and mem.met and mem.budget == budget
    # Two registers per edge would not leave the arenas room: one per edge, counted in the planned peak.
    assert mem.registers == prog.registers == 1
    assert mem.planned == _planned(prog, 1) <= budget
    for task, t in zip(prog.tasks, mem.tasks):
        assert t.arena == task.run.plan.arena_bytes <= t.share
        # Recomputed or offloaded, as the cost model (measured rates) chose.
        assert isinstance(t.report, RematReport) and t.report.recomputed + t.report.offloaded > 0
    assert mem.arenas <= budget - outs < arenas
    assert step.memory_reports == [mem] and "over 2 actor tasks: met" in step.explain()
    e = loom.compiler.explain(step)   # The plan the function runs with, each task's choice beside it.
    text = str(e)
    assert e.plan_memory is mem and "== memory plan (actor tasks) ==" in text
    assert all(f"-- task {t.name}: rematerialisation --\n{t.report}" in text for t in mem.tasks)


def test_registers_kept_when_the_budget_holds_them(baseline):
    want_outs, want_params, arenas, outs = baseline
    budget = arenas + 2 * outs
    got_outs, got_params, prog, _ = _train(_two_models, memory_budget=budget, strict=True)
    assert got_outs == want_outs and got_params == want_params
    mem = prog.memory
    assert mem.met and mem.registers == prog.registers == 2 and mem.planned == _planned(prog, 2) <= budget
    assert all(t.report is None and t.arena == t.share for t in mem.tasks)   # Compiled as without a budget.


def test_budget_that_cannot_be_met_names_the_smallest_feasible_one(monkeypatch):
    want_outs, want_params, prog, _ = _train(_two_models, depth=1)
    arenas = sum(t.run.plan.arena_bytes for t in prog.tasks)
    outs = sum(output_bytes(t.run.graph) for t in prog.tasks)
    fitted = []
    fit_task = partition._fit_task
    monkeypatch.setattr(partition, "_fit_task", lambda part, *a: fitted.append((part.name, a[1])) or fit_task(part, *a))
    with pytest.raises(loom.MemoryBudgetError) as info:
        _train(_two_models, depth=1, memory_budget=outs, strict=True)
    # No room beside the registers: each task is fitted once without a budget and once to its smallest arena
    # (the share it gets, 0, is the smallest arena's: the same compile is not made twice).
    assert sorted(fitted, key=str) == sorted(((t.name, s) for t in prog.tasks for s in (None, 0)), key=str)
    monkeypatch.setattr(partition, "_fit_task", fit_task)
    msg = str(info.value)
    assert f"memory budget {outs / 2**10:.2f} KiB ({outs} B) cannot be met on the actor runtime" in msg
    smallest = int(msg.split("the smallest feasible budget is ")[1].split(" B")[0])
    assert outs < smallest < outs + arenas
    # That budget is met; a loose budget below it warns and runs the smallest plan, bit-identically.
    _, _, prog, _ = _train(_two_models, calls=2, depth=1, memory_budget=smallest, strict=True)
    assert prog.memory.met and prog.memory.planned <= smallest
    with pytest.warns(loom.LoomWarning, match=f"the smallest feasible budget is {smallest} B"):
        got_outs, got_params, prog, _ = _train(_two_models, depth=1, memory_budget=smallest - 1)
    assert got_outs == want_outs and got_params == want_params
    assert not prog.memory.met and prog.memory.minimum == prog.memory.planned == smallest


def _staged(M=2, **options):
    """A two-stage pipeline over M micro-batches: forward and backward tasks per stage and micro-batch."""
    loom.manual_seed(0)
    s0 = nn.Sequential(nn.Linear(32, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 128), nn.Tanh())
    s1 = nn.Sequential(nn.Linear(128, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 10))
    opt = loom.optim.SGD([*s0.parameters(), *s1.parameters()], lr=0.05)

    @loom.function(**{"runtime": "actors", **options})
    def step(x, y):
        opt.zero_grad()
        total = 0
        for k in range(M):
            with loom.stage(0):
                h = s0(x[32 * k:32 * (k + 1)])
            with loom.stage(1):
                loss = nn.functional.cross_entropy(s1(h), y[32 * k:32 * (k + 1)]) / M
            loss.backward()
            total = total + loss.detach()
        opt.step()
        return (total,)
    return [s0, s1], step


def test_pipeline_tasks_count_the_values_they_hand_on():
    want_outs, want_params, prog, _ = _train(_staged)
    assert len(prog.tasks) == 8
    handed = sum(output_bytes(t.run.graph) for t in prog.tasks)
    arenas = sum(t.run.plan.arena_bytes for t in prog.tasks)
    # The activations a forward task hands its backward live in registers and count: exactly one register per
    # edge fits beside the arenas, with nothing recomputed.
    budget = handed + arenas
    got_outs, got_params, prog, _ = _train(_staged, memory_budget=budget, strict=True)
    assert got_outs == want_outs and got_params == want_params
    mem = prog.memory
    assert mem.met and mem.registers == 1 and mem.register_bytes == handed
    assert mem.planned == _planned(prog, 1) == budget
    with pytest.raises(loom.MemoryBudgetError, match=r"values in output registers \(one per edge\)"):
        _train(_staged, memory_budget=handed, strict=True)


def _one_model(**options):
    """A connected training step: one task, compiled whole as the plain step."""
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 128),
                          nn.GELU(approximate="tanh"), nn.Linear(128, 10))
    opt = loom.optim.SGD(model.parameters(), lr=0.05)

    @loom.function(**options)
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return (loss,)
    return [model], step


def test_one_task_step_takes_the_plain_steps_budget():
    want_outs, want_params, plain, _ = _train(_one_model, runtime="native")
    budget = output_bytes(plain.graph) + int(0.8 * plain.plan.arena_bytes)  # 0.7 is below what recomputing reaches
    native = _train(_one_model, runtime="native", memory_budget=budget)
    actors = _train(_one_model, runtime="actors", memory_budget=budget)
    assert actors[0] == native[0] == want_outs and actors[1] == native[1] == want_params
    (report,) = actors[3].memory_reports
    assert isinstance(report, RematReport) and report.met and (report.recomputed > 0 or report.offloaded > 0)
    assert report.arena_after == native[3].memory_reports[0].arena_after == actors[2].tasks[0].run.plan.arena_bytes
