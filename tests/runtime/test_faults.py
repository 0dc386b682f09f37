"""Fault tolerance of the actor runtime: retries with backoff, failures that name their actor, clean stops."""
from __future__ import annotations

import threading
import time

import pytest

import loom
from loom.runtime.actors import ActorError, Plan


def _plan_threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(name + "/")]


class _Reader:
    """A reader whose reads fail `fails` times at item `at` before succeeding (a flaky disk or network)."""

    def __init__(self, n: int, at: int, fails: int):
        self.n, self.at, self.fails, self.i = n, at, fails, 0
        self.calls = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.calls += 1
        if self.i == self.at and self.fails:
            self.fails -= 1
            raise OSError(f"read {self.i} failed")
        if self.i == self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1


def test_retryable_source_retries_with_backoff_and_records_retrying():
    reader = _Reader(6, at=2, fails=2)
    plan = Plan("flaky_read")
    src = plan.source("read", reader, retries=3, backoff=0.02)
    plan.task("sink", lambda x: x * 10, [src])
    t = time.perf_counter()
    assert plan.run(timeout=30) == [0, 10, 20, 30, 40, 50]
    # Two failures: waits of 0.02 and 0.04 s (exponential backoff).
    assert time.perf_counter() - t >= 0.06
    retrying = [d for _, s, d in plan.trace["read"] if s == "retrying"]
    assert len(retrying) == 2
    assert "attempt 2 of 4 in 0.02 s" in retrying[0] and "OSError: read 2 failed" in retrying[0]
    assert "attempt 3 of 4 in 0.04 s" in retrying[1]
    # Each retry runs only after its wait: the next transition comes at least that long after the record.
    trace = plan.trace["read"]
    for k, wait in zip([k for k, (_, s, _) in enumerate(trace) if s == "retrying"], (0.02, 0.04)):
        assert trace[k + 1][0] - trace[k][0] >= wait
    assert _plan_threads("flaky_read") == []


def test_retryable_task_gives_up_after_its_retries_and_names_the_attempts():
    calls = []

    def read(i):
        calls.append(i)
        if i == 1:
            raise TimeoutError("storage timed out")
        return i

    plan = Plan("gives_up")
    src = plan.source("paths", range(4))
    mid = plan.task("read", read, [src], retries=2, backoff=0.001)
    plan.task("sink", lambda x: x, [mid])
    with pytest.raises(ActorError, match=r"task 'read' failed \(actor gives_up/read\) after 3 attempts: "
                                         r"TimeoutError: storage timed out") as info:
        plan.run(timeout=30)
    assert calls.count(1) == 3
    assert info.value.actor == "gives_up/read" and info.value.task == "read"
    assert isinstance(info.value.__cause__, TimeoutError)
    assert [s for _, s, _ in plan.trace["read"]].count("retrying") == 2
    assert _plan_threads("gives_up") == []


def test_generator_sources_cannot_be_retried():
    def gen():
        yield 1
    with pytest.raises(loom.LoomError, match="a generator cannot be retried"):
        Plan("g").source("read", gen(), retries=2)
    with pytest.raises(loom.LoomError, match="retries must be an int >= 0"):
        Plan("g2").source("read", [1], retries=-1)


def test_failure_in_a_wide_plan_stops_every_actor_without_hanging():
    # Branches blocked on back-pressure, a slow sibling, a join: all must stop when one branch fails.
    def bad(x):
        if x == 5:
            raise ValueError("bad value 5")
        return x

    plan = Plan("wide")
    src = plan.source("src", range(10_000), registers=2)
    branches = [plan.task(f"ok{k}", lambda x: time.sleep(0.001) or x, [src], registers=2) for k in range(4)]
    branches.append(plan.task("bad", bad, [src]))
    plan.task("join", lambda *xs: sum(xs), branches)
    t = time.perf_counter()
    with pytest.raises(ActorError, match=r"task 'bad' failed \(actor wide/bad\): ValueError: bad value 5"):
        plan.run(timeout=30)
    assert time.perf_counter() - t < 10
    assert _plan_threads("wide") == []
    states = {name: trace[-1][1:] for name, trace in plan.trace.items()}
    assert states["bad"][0] == "failed"
    assert all(states[k] == ("done", "stopped") for k in ("src", "ok0", "ok3", "join"))


def test_closing_a_stream_early_stops_its_actors():
    plan = Plan("early_close")
    src = plan.source("src", range(1_000_000), registers=2)
    plan.task("inc", lambda x: x + 1, [src], registers=2)
    stream = plan.stream(timeout=30)
    assert [next(stream) for _ in range(3)] == [1, 2, 3]
    stream.close()
    deadline = time.monotonic() + 10
    while _plan_threads("early_close") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _plan_threads("early_close") == []


def test_stream_back_pressure_reaches_the_caller():
    produced = []

    def items():
        for i in range(50):
            produced.append(i)
            yield i
    plan = Plan("bounded_stream")
    src = plan.source("src", items(), registers=2)
    plan.task("sink", lambda x: x, [src], registers=2)
    got = []
    for v in plan.stream(timeout=30):
        time.sleep(0.001)
        got.append(v)
        # Registers: 2 in the sink (one held by the caller), 2 at the source, one item being read.
        assert len(produced) - len(got) <= 5
    assert got == list(range(50))


def test_tracking_off_keeps_no_transitions():
    plan = Plan("untracked", track=False)
    src = plan.source("src", range(5))
    plan.task("sink", lambda x: x, [src])
    assert plan.run(timeout=30) == list(range(5))
    assert plan.trace == {"src": [], "sink": []}


def test_docstring_examples_of_the_actor_module_run():
    import doctest

    from loom.runtime import actors
    for obj, name in ((actors, "loom.runtime.actors"), (actors.Plan.source, "Plan.source")):
        test = doctest.DocTestParser().get_doctest(obj.__doc__, {"loom": loom, "Plan": Plan}, name, None, 0)
        runner = doctest.DocTestRunner()
        runner.run(test)
        result = runner.summarize(verbose=False)
        assert result.attempted > 0 and result.failed == 0
