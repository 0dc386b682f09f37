"""loom.profiler: events from eager ops, compiled calls and loom.function steps; the table and the Chrome trace."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import loom
from loom import profiler
from loom.errors import LoomError


def _mlp_step():
    loom.manual_seed(0)
    model = loom.nn.Sequential(loom.nn.Linear(8, 16), loom.nn.ReLU(), loom.nn.Linear(16, 3))
    opt = loom.optim.SGD(model.parameters(), lr=0.1)
    x = loom.randn(4, 8)
    y = loom.tensor([0, 1, 2, 1])

    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, x, y


def test_eager_ops_are_recorded_with_shapes():
    a, b = loom.ones(3, 4), loom.ones(4, 5)
    with profiler.profile() as prof:
        c = (a @ b).exp().sum()
        c.item()
    names = [e.name for e in prof.events()]
    assert "matmul" in names and "exp" in names and "sum" in names
    mm = next(e for e in prof.events() if e.name == "matmul")
    assert mm.args["shape"] == (3, 5) and mm.duration_us >= 0 and mm.category == "op"


def test_nothing_is_recorded_outside_a_profile():
    with profiler.profile() as prof:
        pass
    (loom.ones(3) * 2).sum().item()
    assert prof.events() == []
    assert not profiler.is_profiling()


def test_loom_function_steps_and_their_kernels():
    step, x, y = _mlp_step()
    fn = loom.function(step)
    fn(x, y)
    fn(x, y)   # traced and compiled
    with profiler.profile() as prof:
        for _ in range(3):
            fn(x, y)
            prof.step()
    events = prof.events()
    calls = [e for e in events if e.category == "function"]
    assert len(calls) == 3 and all(e.name.startswith("loom.function step") for e in calls)
    inner = [e for e in events if e.category in ("kernel", "gemm", "op", "native")]
    assert inner, "the compiled step's work is recorded inside the call"
    first = calls[0]
    contained = [e for e in inner if first.start_us <= e.start_us <= first.start_us + first.duration_us]
    assert contained
    assert sum(1 for e in events if e.category == "marker") == 3


def test_key_averages_table():
    with profiler.profile() as prof:
        with profiler.record_function("block"):
            for _ in range(3):
                (loom.ones(8, 8) @ loom.ones(8, 8)).sum().item()
    avg = prof.key_averages()
    rows = {r["name"]: r for r in avg}
    assert rows["block"]["calls"] == 1 and rows["matmul"]["calls"] == 3
    assert rows["block"]["total_us"] >= rows["matmul"]["total_us"]
    table = avg.table(sort_by="total", row_limit=2)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["Name", "Calls", "Total"] and lines[2].split()[0] == "block"
    assert len(lines) == 2 + 2 + 1
    by_shape = {(r["name"], r["shape"]) for r in prof.key_averages(group_by_input_shape=True)}
    assert ("matmul", "(8, 8)") in by_shape
    with pytest.raises(LoomError, match="sort_by must be one of"):
        avg.table(sort_by="flops")


def test_chrome_trace_is_valid_json_with_one_row_per_thread(tmp_path):
    def work():
        (loom.ones(16) * 3).sum().item()
    with profiler.profile() as prof:
        work()
        t = threading.Thread(target=work, name="helper-thread")
        t.start()
        t.join()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert len({e["tid"] for e in spans}) == 2
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "helper-thread" in names
    assert not list(tmp_path.glob("*.tmp-*"))


def test_profiles_do_not_nest_and_results_are_unchanged():
    a = loom.tensor(np.arange(6.0).reshape(2, 3))
    expected = (a * 2 + 1).sum().item()
    with profiler.profile():
        with pytest.raises(LoomError, match="already active"):
            with profiler.profile():
                pass
        assert (a * 2 + 1).sum().item() == expected


def test_actor_runtime_trace_has_one_row_per_actor_with_its_kernels_inside(tmp_path, monkeypatch):
    """loom.function(runtime="actors") over two branches: each actor is a row of the Chrome trace, and the
    compiled work of its task is recorded on that row, inside the actor's firing."""
    from loom.compiler import partition

    monkeypatch.setattr(partition, "PARALLEL_MIN_WORK", 0)   # Small branches, on actor threads all the same.
    w = loom.full((32, 32), 0.5)

    def two(x):
        return (x @ w).exp().sum(), (x * 2).relu().sum(0)
    fn = loom.function(two, runtime="actors")
    x = loom.randn(8, 32)
    fn(x), fn(x)   # Eager warm-up, then traced and compiled.
    with profiler.profile() as prof:
        for _ in range(2):
            [v.numpy() for v in fn(x)]
    fn.close()
    path = tmp_path / "actors.json"
    prof.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    rows = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    firings = [e for e in spans if e.get("cat") == "actor"]
    by_task = {}
    for e in firings:
        by_task.setdefault(e["name"], set()).add(e["tid"])
    # The program's feed and collect actors, and one per task: each its own row.
    assert set(by_task) == {"feed", "stage0.branch0", "stage0.branch1", "collect"}
    assert all(len(t) == 1 for t in by_task.values()) and len(set.union(*by_task.values())) == 4
    for task in ("stage0.branch0", "stage0.branch1"):
        (tid,) = by_task[task]
        assert rows[tid].endswith("/" + task)   # The row is the actor's thread, named plan/task.
        inside = [e for e in spans if e["tid"] == tid and e.get("cat") != "actor"
                  and any(f["tid"] == tid and f["ts"] <= e["ts"] <= f["ts"] + f["dur"] for f in firings)]
        assert inside, f"no kernel recorded inside the firings of {task}"
