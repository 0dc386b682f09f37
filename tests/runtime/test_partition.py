"""Plans from the compiler: graphs partitioned into stage and branch tasks, and loom.function on actors."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import loom
from loom.compiler import partition as partition_mod
from loom.compiler.partition import compile_partitioned, partition
from loom.runtime.actors import ActorError
from loom.runtime.executor import Executable


@pytest.fixture(autouse=True)
def _kernels_built_before_first_use(monkeypatch):
    # Byte comparisons across calls: every call must run the same tier (built C kernels, not the NumPy path
    # that serves while a kernel builds in the background).
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def _wait_gone(prefix: str) -> list[str]:
    deadline = time.monotonic() + 10
    while _threads(prefix) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _threads(prefix)


def test_partition_splits_branches_and_keeps_shared_constants_in_each():
    g = loom.ir.Graph()
    x = g.add_input((3,), "float32")
    y = g.add_input((3,), "float32")
    c = g.add_node("exp", [g.add_constant(np.ones(3, np.float32))])    # computed from constants only
    a = g.add_node("mul", [g.add_node("neg", [x]), c])
    b = g.add_node("add", [y, c])
    g.outputs = [a, b, y, c]
    p = partition(g)
    assert [q.name for q in p.parts] == ["stage0.branch0", "stage0.branch1"]
    assert sorted(n.op for n in p.parts[0].graph if n.op != "input") == ["buffer", "exp", "mul", "neg"]
    assert p.parts[0].inputs == [(-1, 0)] and p.parts[1].inputs == [(-1, 1)]
    assert p.outputs[:3] == [(0, 0), (1, 0), (-1, 1)]
    assert p.outputs[3][0] == -2 and np.allclose(p.outputs[3][1], np.e)
    prog = compile_partitioned(g, None, Executable, name="constparts")
    xs = [np.arange(3, dtype=np.float32), np.ones(3, np.float32)]
    got = prog(*xs)
    want = Executable(g)(*xs)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(got, want))
    prog.close()
    assert _wait_gone("constparts/") == []


def test_stages_propagate_to_unmarked_nodes_and_never_run_backwards():
    g = loom.ir.Graph()
    x = g.add_input((4,), "float32")
    a = g.add_node("exp", [x])
    b = g.add_node("neg", [a])
    c = g.add_node("sin", [b])          # unmarked: joins stage 1, which it reads
    d = g.add_node("cos", [c])          # marked 0 but reads stage 1: runs in stage 1
    g.outputs = [d]
    p = partition(g, {a: 0, b: 1, d: 0})
    assert [(q.name, [n.op for n in q.graph if n.op != "input"]) for q in p.parts] == [
        ("stage0.branch0", ["exp"]), ("stage1.branch0", ["neg", "sin", "cos"])]
    assert p.parts[1].inputs == [(0, 0)] and p.outputs == [(1, 0)]


def _mlp_step(runtime):
    loom.manual_seed(0)
    model = loom.nn.Sequential(loom.nn.Linear(8, 16), loom.nn.ReLU(), loom.nn.Dropout(0.2), loom.nn.Linear(16, 4))
    opt = loom.optim.Adam(model.parameters(), lr=0.01)

    @loom.function(runtime=runtime)
    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, step


def test_training_step_on_actors_matches_the_native_step_bit_for_bit():
    rng = np.random.default_rng(0)
    batches = [(loom.tensor(rng.standard_normal((5, 8)).astype(np.float32)),
                loom.tensor(rng.standard_normal((5, 4)).astype(np.float32))) for _ in range(4)]
    out = {}
    for runtime in ("native", "actors"):
        model, step = _mlp_step(runtime)
        losses = [step(*b).item() for b in batches]
        out[runtime] = (losses, [p.detach().numpy().tobytes() for p in model.parameters()])
        step.close()
    assert out["native"] == out["actors"]
    # The training step is one connected graph: one task, called in the caller's thread.
    _, step = _mlp_step("actors")
    for b in batches[:2]:
        step(*b)
    (entry,) = step._cache.values()
    assert [t.name for t in entry.exe.tasks] == ["stage0.branch0"] and entry.exe.plan is None


def test_independent_branches_run_as_parallel_tasks_with_identical_results(monkeypatch):
    monkeypatch.setattr(partition_mod, "PARALLEL_MIN_WORK", 0)   # Small branches, run on actors all the same.
    w = loom.full((6, 6), 0.5)

    def two(x):
        a = (x @ w).exp().sum()
        b = (x * 2).relu().sum(0)
        return a, b
    native, actors = loom.function(two), loom.function(two, runtime="actors", track=True)
    for k in range(4):
        x = loom.arange(18).float().reshape(3, 6) * (0.1 * k)
        for u, v in zip(native(x), actors(x)):
            assert u.numpy().tobytes() == v.numpy().tobytes()
    (entry,) = actors._cache.values()
    prog = entry.exe
    assert [t.name for t in prog.tasks] == ["stage0.branch0", "stage0.branch1"]
    plan = prog.plan
    actors.close()
    assert _wait_gone(prog.name + "/") == []
    # Every actor fired once per compiled call (3 calls: the first was the eager warm-up).
    running = {n: sum(1 for _, s, _ in t if s == "running") for n, t in plan.trace.items()}
    assert running["stage0.branch0"] == running["stage0.branch1"] == 3


def test_stages_pipeline_over_micro_batches_with_results_of_plain_calls():
    rng = np.random.default_rng(1)
    w1 = loom.tensor(rng.standard_normal((16, 16)).astype(np.float32))
    w2 = loom.tensor(rng.standard_normal((16, 4)).astype(np.float32))

    def model(x):
        with loom.stage(0):
            h = (x @ w1).tanh()
        with loom.stage(1):
            return (h @ w2).softmax(-1)
    micro = [loom.tensor(rng.standard_normal((8, 16)).astype(np.float32)) for _ in range(6)]
    plain = loom.function(model)
    plain(micro[0])   # The eager warm-up call: later calls all run the compiled graph.
    want = [plain(x).numpy() for x in micro]
    staged = loom.function(model, runtime="actors", track=True)
    staged(micro[0])
    got = [y.numpy() for y in staged.map((x,) for x in micro)]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got))
    (entry,) = staged._cache.values()
    assert [t.name for t in entry.exe.tasks] == ["stage0.branch0", "stage1.branch0"]
    # Single calls give the same values too, also after a map left early with calls in flight.
    stream = staged.map((x,) for x in micro)
    assert next(stream).numpy().tobytes() == want[0].tobytes()
    stream.close()
    assert staged(micro[2]).numpy().tobytes() == want[2].tobytes()
    staged.close()
    assert _wait_gone(entry.exe.name + "/") == []


def _micro_batched_step(runtime, M=3, **options):
    """A two-stage SGD step looping over M micro-batches, each backward right after its forward (GPipe)."""
    rng = np.random.default_rng(0)
    w0 = loom.tensor(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, requires_grad=True)
    w1 = loom.tensor(rng.standard_normal((16, 4)).astype(np.float32) * 0.3, requires_grad=True)
    opt = loom.optim.SGD([w0, w1], lr=0.1, momentum=0.9)

    @loom.function(runtime=runtime, **options)
    def step(x, y):
        opt.zero_grad()
        total = 0
        for k in range(M):
            with loom.stage(0):
                h = (x[4 * k:4 * (k + 1)] @ w0).tanh()
            with loom.stage(1):
                loss = ((h @ w1 - y[4 * k:4 * (k + 1)]) ** 2).mean() / M
            loss.backward()
            total = total + loss.detach()
        opt.step()
        return total
    return (w0, w1), step


def test_backward_and_micro_batches_are_pipeline_tasks_with_the_native_steps_results(monkeypatch):
    monkeypatch.setattr(partition_mod, "PARALLEL_MIN_WORK", 0)   # Every task on its own actor.
    rng = np.random.default_rng(1)
    data = [(loom.tensor(rng.standard_normal((12, 8)).astype(np.float32)),
             loom.tensor(rng.standard_normal((12, 4)).astype(np.float32))) for _ in range(4)]
    out = {}
    for runtime in ("native", "actors"):
        ws, step = _micro_batched_step(runtime, track=runtime == "actors")
        losses = [step(*b).item() for b in data]
        out[runtime] = (losses, [w.detach().numpy().tobytes() for w in ws])
        if runtime == "actors":
            (entry,) = step._cache.values()
            prog = entry.exe
            plan = prog.plan
        step.close()
    assert out["native"] == out["actors"]
    names = [t.name for t in prog.tasks]
    # Forward stage k and its backward, per micro-batch, each a task of its own.
    for mb in ("", ".mb1", ".mb2"):
        for k in (0, 1):
            for part in (f"stage{k}{mb}.branch0", f"stage{k}.backward{mb}.branch0"):
                assert part in names, (part, names)
    # Nothing else: what reads only the step's inputs (the optimizer's scalars) joins its first reader's task.
    assert len(names) == 12, names
    # Producers come first: forwards, then backward of stage 1, then of stage 0.
    assert names.index("stage1.backward.branch0") < names.index("stage0.backward.branch0")
    assert names.index("stage1.mb2.branch0") < names.index("stage1.backward.branch0")

    def upstream(name):
        seen, todo = set(), [names.index(name)]
        while todo:
            for p, _ in prog.tasks[todo.pop()].inputs:
                if p >= 0 and p not in seen:
                    seen.add(p)
                    todo.append(p)
        return {names[p] for p in seen}
    # Micro-batch 1's forward waits for nothing of micro-batch 0's stage 1 (so they overlap) and the
    # backward of stage 0 reads the backward of stage 1, not the other way round.
    assert not any(n.startswith("stage1") for n in upstream("stage0.mb1.branch0"))
    assert "stage1.backward.branch0" in upstream("stage0.backward.branch0")
    assert not any(n.startswith("stage0.backward") for n in upstream("stage1.backward.mb2.branch0"))
    assert prog.parallel and plan is not None
    fired = {n: sum(1 for _, s, _ in t if s == "running") for n, t in plan.trace.items()}
    assert fired["stage0.backward.mb2.branch0"] == fired["stage1.mb1.branch0"] == 3   # 3 replays, 1 eager call


def test_small_branches_run_in_the_callers_thread_and_big_ones_on_actors():
    def two(a, b):
        return (a @ a).sum(), (b @ b).sum()
    small, big = loom.function(two, runtime="actors", warmup=0), loom.function(two, runtime="actors", warmup=0)
    x = loom.ones(8, 8)
    small(x, x)
    y = loom.ones(160, 160)   # 2 * 160**3 FLOPs per branch: over PARALLEL_MIN_WORK
    want = loom.function(two)
    for u, v in zip(big(y, y), want(y, y)):
        assert u.numpy().tobytes() == v.numpy().tobytes()
    (e_small,), (e_big,) = small._cache.values(), big._cache.values()
    assert len(e_small.exe.tasks) == len(e_big.exe.tasks) == 2
    assert not e_small.exe.parallel and e_small.exe.plan is None
    assert e_big.exe.parallel and e_big.exe.plan is not None
    big.close()
    assert _wait_gone(e_big.exe.name + "/") == []


@pytest.mark.parametrize("parallel", [True, False])
def test_failing_graph_task_names_actor_subgraph_and_node_and_the_plan_restarts(monkeypatch, parallel):
    if parallel:
        monkeypatch.setattr(partition_mod, "PARALLEL_MIN_WORK", 0)

    def branches(x, d):
        return (x * 2).sum(), (x // d).sum()
    f = loom.function(branches, runtime="actors", warmup=0)
    x = loom.arange(4, dtype=loom.int32)
    ok = f(x, loom.ones(4, dtype=loom.int32))
    assert [v.item() for v in ok] == [12, 6]
    (entry,) = f._cache.values()
    name = entry.exe.name
    with pytest.raises(ActorError) as info:
        f(x, loom.tensor([1, 0, 1, 1], dtype=loom.int32))
    e = info.value
    assert e.actor == f"{name}/stage0.branch1" and e.task == "stage0.branch1"
    assert "int32[4]" in e.subgraph and "floordiv" in e.subgraph
    assert e.node is not None and "floordiv(int32[4], int32[4]) -> int32[4]" in e.node
    where = "" if parallel else " in the caller's thread"
    assert f"actor {name}/stage0.branch1{where}, subgraph [" in str(e) and "at node %" in str(e)
    assert isinstance(e.__cause__, ZeroDivisionError)
    assert _wait_gone(name + "/") == []
    # A fresh plan serves the next call.
    assert [v.item() for v in f(x, loom.full((4,), 2, dtype=loom.int32))] == [12, 2]
    f.close()
    assert _wait_gone(name + "/") == []


def test_runtime_argument_errors():
    with pytest.raises(loom.LoomValueError, match="runtime must be 'native'"):
        loom.function(lambda x: x, runtime="threads")
    assert loom.function(lambda x: x, runtime="actors", memory_budget="1MB").memory_budget == 10**6
    with pytest.raises(loom.LoomValueError, match="stage must be an int >= 0"):
        loom.stage(-1)
    w = loom.ones(2, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1)

    def step(x):
        opt.zero_grad()
        (w * x).sum().backward()
        opt.step()
        return w.sum()
    f = loom.function(step, runtime="actors", warmup=0)
    with pytest.raises(loom.LoomError, match="updates tensors in place"):
        list(f.map([(loom.ones(2),)] * 3))
