"""The actor runtime: firing rule, back-pressure by register counts, pipelining, parallel branches, failures,
the state tracker (status, transitions) and one trace row per actor."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import loom
from loom import profiler
from loom.runtime import actors
from loom.runtime.actors import ActorError, Plan


def test_chain_keeps_order_and_values():
    plan = Plan("chain")
    src = plan.source("src", range(20))
    a = plan.task("double", lambda x: 2 * x, [src], registers=3)
    plan.task("inc", lambda x: x + 1, [a])
    assert plan.run(timeout=30) == [2 * i + 1 for i in range(20)]


def test_diamond_fan_out_and_fan_in():
    plan = Plan("diamond")
    src = plan.source("src", range(10))
    left = plan.task("left", lambda x: x * 10, [src])
    right = plan.task("right", lambda x: -x, [src])
    plan.task("join", lambda a, b: a + b, [left, right])
    assert plan.run(timeout=30) == [9 * i for i in range(10)]


@pytest.mark.parametrize("registers", [1, 2, 4])
def test_back_pressure_bounds_values_in_flight(registers):
    produced, consumed = [0], [0]
    most = [0]
    lock = threading.Lock()

    def items():
        for i in range(30):
            with lock:
                produced[0] += 1
                most[0] = max(most[0], produced[0] - consumed[0])
            yield i

    def slow(x):
        time.sleep(0.002)
        with lock:
            consumed[0] += 1
        return x

    plan = Plan("pressure")
    src = plan.source("src", items(), registers=registers)
    plan.task("slow", slow, [src])
    assert plan.run(timeout=30) == list(range(30))
    # The source may hold `registers` values not yet taken back plus the one it is producing.
    assert most[0] <= registers + 1


@pytest.mark.parametrize("registers", [1, 2])
def test_two_registers_let_consecutive_iterations_overlap(registers):
    spans = {"a": [], "b": []}

    def stage(name):
        def run(x):
            t0 = time.perf_counter()
            time.sleep(0.01)   # sleeping releases the GIL, like NumPy and loom's kernels do
            spans[name].append((t0, time.perf_counter()))
            return x
        return run

    plan = Plan(f"overlap{registers}")
    src = plan.source("load", range(6), registers=2)
    a = plan.task("a", stage("a"), [src], registers=registers)
    plan.task("b", stage("b"), [a])
    assert plan.run(timeout=30) == list(range(6))
    # Does stage a of iteration i+1 run while stage b of iteration i runs?
    overlaps = sum(1 for (a0, a1), (b0, b1) in zip(spans["a"][1:], spans["b"]) if a0 < b1 and b0 < a1)
    if registers == 1:
        assert overlaps == 0   # a's one register is in use by b until b is done: no overlap
    else:
        assert overlaps >= 1


def test_failure_names_the_task_and_stops_every_actor():
    def bad(x):
        if x == 3:
            raise ValueError("boom at 3")
        return x

    before = threading.active_count()
    plan = Plan("failing")
    src = plan.source("src", range(100))
    mid = plan.task("bad", bad, [src])
    plan.task("sink", lambda x: x, [mid])
    t = time.perf_counter()
    with pytest.raises(ActorError,
                       match=r"plan failing: task 'bad' failed \(actor failing/bad\): ValueError: boom at 3"):
        plan.run(timeout=30)
    assert time.perf_counter() - t < 10
    time.sleep(0.1)
    assert threading.active_count() <= before


def test_status_says_what_a_blocked_actor_waits_on():
    gate = threading.Event()
    seen = {}

    def held(x):
        gate.wait(10)
        return x

    plan = Plan("blocked")
    src = plan.source("src", (np.full(256, i, np.float32) for i in range(5)), registers=1)
    plan.task("held", lambda x: float(held(x)[0]), [src])
    th = threading.Thread(target=lambda: seen.setdefault("out", plan.run(timeout=30)))
    th.start()
    deadline = time.monotonic() + 10
    rows = []
    while time.monotonic() < deadline:
        rows = [r for r in loom.runtime.status() if r["plan"] == "blocked"]   # The live query.
        states = {r["task"]: r for r in rows}
        if ("free output register" in states.get("src", {}).get("waiting_on", "")
                and states.get("held", {}).get("state") == "running"):
            break
        time.sleep(0.01)
    try:
        assert states["src"]["state"] == "waiting" and states["src"]["registers_in_use"] == 1
        assert states["src"]["register_bytes"] == 1024   # The 256 float32 in its one register.
        assert "held" in states["src"]["waiting_on"]
        assert "blocked/src: waiting after 1 firings, 1/1 registers in use (1024 B)" in loom.runtime.status_text()
        assert states["held"]["state"] == "running"
    finally:
        gate.set()
        th.join(10)
    assert seen["out"] == [float(i) for i in range(5)]
    trace = plan.trace["held"]
    assert [s for _, s, _ in trace][-1] == "done" and "running" in [s for _, s, _ in trace]
    assert all(a <= b for (a, _, _), (b, _, _) in zip(trace, trace[1:]))


def test_profile_has_one_row_per_actor():
    plan = Plan("traced")
    src = plan.source("load", range(4))
    plan.task("compute", lambda x: float((loom.ones(8, 8) * x).sum().item()), [src])
    with profiler.profile() as prof:
        out = plan.run(timeout=30)
    assert out == [64.0 * i for i in range(4)]
    rows = {}
    for e in prof.events():
        if e.category == "actor":
            rows.setdefault(e.name, set()).add(e.thread)
    assert set(rows) == {"load", "compute"}
    assert all(len(t) == 1 for t in rows.values()) and rows["load"] != rows["compute"]


def test_timeout_reports_the_live_actors():
    plan = Plan("stuck")
    src = plan.source("src", range(3))
    plan.task("forever", lambda x: time.sleep(2) or x, [src])
    with pytest.raises(ActorError, match="did not finish within 0.2 s; .*stuck/forever: running"):
        plan.run(timeout=0.2)


def test_plan_errors():
    plan = Plan("errs")
    src = plan.source("src", range(3))
    with pytest.raises(loom.LoomError, match="already exists"):
        plan.source("src", range(3))
    with pytest.raises(loom.LoomError, match="at least one output register"):
        plan.task("t", lambda x: x, [src], registers=0)
    with pytest.raises(loom.LoomError, match="has no inputs"):
        plan.task("t2", lambda: 1, [])
    other = Plan("other").source("o", range(1))
    with pytest.raises(loom.LoomError, match="inputs must be tasks of this plan"):
        plan.task("t3", lambda x: x, [other])


def test_training_pipeline_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((16, 4)).astype(np.float32), rng.integers(0, 3, 16)) for _ in range(6)]

    def make():
        loom.manual_seed(0)
        model = loom.nn.Linear(4, 3)
        opt = loom.optim.SGD(model.parameters(), lr=0.1)

        def step(batch):
            x, y = batch
            opt.zero_grad()
            loss = loom.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return float(loss)
        return step

    to_tensors = lambda b: (loom.tensor(b[0]), loom.tensor(b[1]))  # noqa: E731
    step = make()
    plain = [step(to_tensors(b)) for b in data]
    step = make()
    plan = Plan("train")
    src = plan.source("read", data, registers=2)
    batches = plan.task("to_tensors", to_tensors, [src], registers=2)
    plan.task("step", step, [batches])
    assert plan.run(timeout=60) == plain


def test_pipeline_streams_and_overlaps_loading_with_the_consumer():
    loaded = []

    def load(i):
        loaded.append(i)
        return i * i
    got = []
    for v in loom.runtime.pipeline(range(10), load, registers=2):
        got.append(v)
        # The loader never runs more than a few items ahead of the consumer (back-pressure).
        assert len(loaded) - len(got) <= 2 * 2 + 1
    assert got == [i * i for i in range(10)]
    with pytest.raises(ActorError, match="stage0:bad"):
        def bad(x):
            raise RuntimeError("no")
        list(loom.runtime.pipeline(range(3), bad))


def test_loading_overlaps_the_consumer():
    """The next item is read while the consumer still works on this one: it waits for that read to start
    (with a timeout), which a sequential load-then-consume loop would never do."""
    started = [threading.Event() for _ in range(5)]

    def read(i):
        started[i].set()
        return i
    got = []
    for i, v in enumerate(loom.runtime.pipeline(range(5), read, lambda x: x * 2, registers=2)):
        if i + 1 < 5:
            assert started[i + 1].wait(10), f"item {i + 1} was not read while item {i} was consumed"
        got.append(v)
    assert got == [0, 2, 4, 6, 8]


def test_tracker_keeps_the_last_transitions_in_a_ring(monkeypatch):
    monkeypatch.setattr(actors, "TRACK_CAPACITY", 8)
    monkeypatch.setattr(actors, "_TRACK_MASK", 7)
    plan = Plan("ring")
    src = plan.source("src", range(20))
    plan.task("slow", lambda x: time.sleep(0.002) or x, [src])
    assert plan.run(timeout=30) == list(range(20))
    trace = plan.trace["slow"]
    assert len(trace) == 8 and trace[-1][1] == "done"
    assert all(a <= b for (a, _, _), (b, _, _) in zip(trace, trace[1:]))
    # The last firings, in order; a wait records in short what it waits on.
    fired = [d for _, s, d in trace if s == "running"]
    assert fired and fired == list(range(20 - len(fired), 20))
    assert {d for _, s, d in trace if s == "waiting"} <= {"input", "output register"}
    assert len(plan.trace["src"]) <= 8
    off = Plan("ring_off", track=False)
    off.task("t", lambda x: x, [off.source("s", range(3))])
    assert off.run(timeout=30) == [0, 1, 2] and off.trace == {"s": [], "t": []}


def test_tracker_records_register_occupancy_and_bytes():
    """Each transition carries the output registers in use and the bytes of the values in them."""
    plan = Plan("occupancy")
    src = plan.source("src", (np.zeros(100 * (i + 1), np.float64) for i in range(6)), registers=2)
    plan.task("slow", lambda x: time.sleep(0.005) or x.size, [src])
    assert plan.run(timeout=30) == [100 * (i + 1) for i in range(6)]
    records = plan.records["src"]
    assert [r[:3] for r in records] == plan.trace["src"]
    in_use = [r[3] for r in records]
    assert max(in_use) == 2 and in_use[0] == 0   # Bounded by its registers (its last value may be in flight at "done").
    # The bytes are those of the values still in flight: each a sum of distinct array sizes, 0 with none.
    sizes = [800 * (i + 1) for i in range(6)]
    sums = {0} | set(sizes) | {a + b for a in sizes for b in sizes if a < b}
    assert all(r[4] in sums and (r[4] == 0) == (r[3] == 0) for r in records)
    assert max(r[4] for r in records) >= 800 + 1600
    assert {r[3] for r in plan.records["slow"]} == {0}   # The sink has no consumer: it holds nothing.
    assert actors.value_bytes((np.zeros(3, np.int8), np.zeros(2, np.float32), "x")) == 11
