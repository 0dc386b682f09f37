"""Decentralised actors with bounded registers: the runtime that runs a Plan of tasks.

A `Plan` is a DAG of tasks. Each task gets one `Actor`, a thread that owns
it; nothing else schedules it. An actor fires when every input edge holds a
filled register and its output edge has a free register; it runs its task on
the inputs, hands each input register back to its producer, writes its
result into a free output register and tells its consumers. A register
returns to its producer only after every consumer of the edge is done with
it, so the register count of an edge bounds how many values are in flight on
it (back-pressure): a producer with no free register waits. Two or more
registers let consecutive iterations overlap (pipelining), and tasks without
a path between them run at the same time.

Actors talk only through their inboxes (in-process queues here; the
distributed layer puts the same messages on the wire). The end of the stream
travels as a last message down every edge, so each actor stops by itself
after its inputs are drained; a failure stops every actor of the plan and
`Plan.run` raises it, naming the task.

The state tracker: each actor records its own transitions (waiting, ready,
running, done, failed) with timestamps and register occupancy; `status()`
answers what every live actor is doing and waiting on, and with a
`loom.profiler.profile` active every firing is an event on the actor's own
thread (one row per actor in the Chrome trace).

Examples
--------
>>> from loom.runtime import actors
>>> plan = actors.Plan("example")
>>> numbers = plan.source("numbers", range(5))
>>> squares = plan.task("square", lambda x: x * x, [numbers], registers=2)
>>> plan.task("plus_one", lambda x: x + 1, [squares])
<Task plus_one>
>>> plan.run()
[1, 2, 5, 10, 17]
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable

from loom import profiler as _profiler
from loom.errors import LoomError

__all__ = ["Plan", "Task", "Actor", "status", "status_text", "pipeline", "ActorError"]

_END = object()          # The end of a stream, sent down every edge once.
_LIVE: "weakref.WeakSet[Actor]" = weakref.WeakSet()   # For status queries only; never used to schedule.
STATES = ("waiting", "ready", "running", "done", "failed")


class ActorError(LoomError):
    """A task of a plan failed; the message names the plan, the task and the original error."""


class Task:
    """One node of a `Plan`: a function of its inputs' values (or a source iterable), and its output edge."""

    def __init__(self, plan: "Plan", name: str, fn: Callable | None, inputs: list["Task"], registers: int,
                 source: Iterable | None = None):
        self.plan = plan
        self.name = name
        self.fn = fn
        self.inputs = inputs
        self.registers = registers
        self.source = source
        self.consumers: list[Task] = []

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class Plan:
    """A DAG of tasks, each run by its own actor; build it with `source` and `task`, then `run` it.

    Parameters
    ----------
    name : str
        Names the plan in errors, `status()` and traces.
    """

    def __init__(self, name: str = "plan"):
        self.name = name
        self.tasks: list[Task] = []

    def _add(self, task: Task) -> Task:
        if any(t.name == task.name for t in self.tasks):
            raise LoomError(f"loom.runtime.Plan {self.name}: a task named {task.name!r} already exists")
        if task.registers < 1:
            raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r} needs at least one output "
                            f"register, got {task.registers}")
        for i in task.inputs:
            if not isinstance(i, Task) or i.plan is not self:
                raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r}: inputs must be tasks of "
                                f"this plan, got {i!r}")
            i.consumers.append(task)
        self.tasks.append(task)
        return task

    def source(self, name: str, iterable: Iterable, registers: int = 2) -> Task:
        """A task with no inputs that emits the items of `iterable`, one per firing."""
        return self._add(Task(self, name, None, [], registers, source=iterable))

    def task(self, name: str, fn: Callable, inputs: list[Task], registers: int = 1) -> Task:
        """A task computing ``fn(*input_values)`` each time every input has a value.

        `registers` is the number of output values that may be in flight at
        once (waiting for or being used by consumers); 2 or more lets this
        task run ahead of its consumers by that many iterations.
        """
        if not inputs:
            raise LoomError(f"loom.runtime.Plan {self.name}: task {name!r} has no inputs; use Plan.source")
        return self._add(Task(self, name, fn, list(inputs), registers))

    def stream(self, timeout: float | None = None):
        """Run the plan and yield the single sink task's outputs as they are produced.

        The plan runs in the background while the caller consumes; its
        failure is raised from the generator. With ``registers >= 2`` on the
        tasks, loading the next items overlaps the caller's work.
        """
        sinks = [t for t in self.tasks if not t.consumers]
        if len(sinks) != 1:
            raise LoomError(f"loom.runtime.Plan {self.name}: stream needs exactly one sink task, "
                            f"has {[t.name for t in sinks]}")
        out: queue.SimpleQueue = queue.SimpleQueue()
        done = object()
        box: list = []

        def runner():
            try:
                self.run(timeout, _sink=out)
            except BaseException as e:
                box.append(e)
            out.put(done)
        th = threading.Thread(target=runner, name=f"{self.name}/driver", daemon=True)
        th.start()
        while True:
            item = out.get()
            if item is done:
                break
            yield item
        th.join()
        if box:
            raise box[0]

    def run(self, timeout: float | None = None, _sink: Any = None) -> list:
        """Start one actor per task, wait until the stream ends, return the sink tasks' outputs.

        With one sink the result is the list of its outputs in order; with
        several, a dict of name -> list. Raises `ActorError` if a task fails
        (after every actor has stopped) or `timeout` seconds pass.
        """
        if not self.tasks:
            return []
        sinks = [t for t in self.tasks if not t.consumers]
        results: dict[str, Any] = {t.name: [] for t in sinks}
        if _sink is not None:
            results[sinks[0].name] = _QueueSink(_sink)
        failure: list = []
        stop = threading.Event()
        actors = {t.name: Actor(t, results.get(t.name), failure, stop) for t in self.tasks}
        for a in actors.values():
            a.wire(actors)
        for a in actors.values():
            a.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for a in actors.values():
            a.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if a.is_alive():
                stop.set()
                for b in actors.values():
                    b.inbox.put(("stop", None, None, None))
                raise ActorError(f"loom.runtime: plan {self.name} did not finish within {timeout} s; "
                                 f"{status_text([b for b in actors.values() if b.is_alive()])}")
        if failure:
            task, err = failure[0]
            raise ActorError(f"loom.runtime: plan {self.name}: task {task!r} failed: {type(err).__name__}: "
                             f"{err}") from err
        self.trace = {name: a.transitions for name, a in actors.items()}
        return results[sinks[0].name] if len(sinks) == 1 else results


class Actor(threading.Thread):
    """The one owner of a task: fires it when its inputs are filled and an output register is free.

    Attributes
    ----------
    state : str
        One of waiting, ready, running, done, failed.
    transitions : list of (seconds, state, detail)
        This actor's own record of its state changes (the state tracker).
    """

    def __init__(self, task: Task, sink: list | None, failure: list, stop: threading.Event):
        super().__init__(name=f"{task.plan.name}/{task.name}", daemon=True)
        self.task = task
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.sink = sink
        self.failure = failure
        self.stop = stop
        self.pending: list[list] = [[] for _ in task.inputs]   # Per input edge: (register, value) FIFO.
        self.free = list(range(task.registers))                  # Free output registers.
        self.acks: dict[int, int] = {}                          # Output register -> consumers still using it.
        self.fired = 0
        self.state = "waiting"
        self.transitions: list[tuple[float, str, str]] = [(time.monotonic(), "waiting", "")]
        self.producers: list[Actor] = []
        self.consumers: list[tuple[Actor, int]] = []
        _LIVE.add(self)

    def wire(self, actors: dict[str, "Actor"]) -> None:
        self.producers = [actors[i.name] for i in self.task.inputs]
        for c in self.task.consumers:
            for k, i in enumerate(c.inputs):
                if i is self.task:
                    self.consumers.append((actors[c.name], k))

    def _set(self, state: str, detail: str = "") -> None:
        self.state = state
        self.transitions.append((time.monotonic(), state, detail))

    def waiting_on(self) -> str:
        """What this actor needs before it can fire next, in words."""
        if self.state in ("done", "failed"):
            return ""
        need = [p.task.name for p, q in zip(self.producers, self.pending) if not q]
        parts = [f"input from {', '.join(need)}"] if need else []
        if self.consumers and not self.free:
            parts.append(f"a free output register ({self.task.registers} in use by "
                         f"{', '.join(sorted({c.task.name for c, _ in self.consumers}))})")
        return " and ".join(parts)

    def run(self) -> None:
        try:
            if self.task.source is not None:
                self._run_source()
            else:
                self._run_task()
        except BaseException as e:  # Stops every actor; Plan.run raises it with the task's name.
            self._set("failed", repr(e))
            self.failure.append((self.task.name, e))
            self.stop.set()
            for c, _ in self.consumers:
                c.inbox.put(("stop", None, None, None))
            for p in self.producers:
                p.inbox.put(("stop", None, None, None))
            return
        self._set("done")

    def _emit(self, value: Any) -> None:
        reg = self.free.pop()
        if self.consumers:
            self.acks[reg] = len(self.consumers)
            for c, k in self.consumers:
                c.inbox.put(("data", k, reg, value))
        else:
            self.free.append(reg)

    def _handle(self, msg) -> None:
        kind, k, reg, value = msg
        if kind == "data":
            self.pending[k].append((reg, value))
        elif kind == "ack":
            left = self.acks[reg] - 1
            if left:
                self.acks[reg] = left
            else:
                del self.acks[reg]
                self.free.append(reg)
        elif kind == "stop":
            raise ActorError(f"stopped because another task of plan {self.task.plan.name} failed")

    def _wait_free(self) -> None:
        while not self.free:
            self._set("waiting", "output register")
            self._handle(self.inbox.get())

    def _run_source(self) -> None:
        it = iter(self.task.source)
        while not self.stop.is_set():
            self._wait_free()
            while True:  # Take back registers already returned, without blocking.
                try:
                    self._handle(self.inbox.get_nowait())
                except queue.Empty:
                    break
            self._set("running")
            t0 = _profiler.now_us() if _profiler.ACTIVE is not None else 0.0
            try:
                value = next(it)
            except StopIteration:
                break
            if _profiler.ACTIVE is not None:
                _profiler.record(self.task.name, "actor", t0, _profiler.now_us(), iteration=self.fired)
            self.fired += 1
            self._emit(value)
        self._finish()

    def _run_task(self) -> None:
        fn = self.task.fn
        while True:
            while not all(self.pending) or (self.consumers and not self.free):
                self._set("waiting", self.waiting_on())
                self._handle(self.inbox.get())
            taken = [q.pop(0) for q in self.pending]
            values = [v for _, v in taken]
            if any(v is _END for v in values):
                break
            self._set("running", f"iteration {self.fired}")
            t0 = _profiler.now_us() if _profiler.ACTIVE is not None else 0.0
            out = fn(*values)
            if _profiler.ACTIVE is not None:
                _profiler.record(self.task.name, "actor", t0, _profiler.now_us(), iteration=self.fired)
            self.fired += 1
            for p, (reg, _) in zip(self.producers, taken):
                p.inbox.put(("ack", None, reg, None))
            if self.sink is not None:
                self.sink.append(out)
            self._emit(out)
        self._finish()

    def _finish(self) -> None:
        for c, k in self.consumers:
            c.inbox.put(("data", k, -1, _END))


class _QueueSink:
    """A sink that hands each output to a queue (`Plan.stream`) instead of keeping it."""

    def __init__(self, q: queue.SimpleQueue):
        self.q = q

    def append(self, value: Any) -> None:
        self.q.put(value)


def pipeline(source: Iterable, *stages: Callable, registers: int = 2, name: str = "pipeline"):
    """Run ``stages`` over the items of `source` on a chain of actors; yield the last stage's outputs.

    Each stage is a one-argument function (for example: read, decode, move to
    tensors, train step). With ``registers=2`` (the default) every stage may
    work on item i+1 while the next stage works on item i, so loading overlaps
    computing, and no stage runs more than `registers` items ahead.

    Examples
    --------
    >>> list(pipeline(range(4), lambda x: x + 1, lambda x: x * 10))
    [10, 20, 30, 40]
    """
    plan = Plan(name)
    prev = plan.source("source", source, registers=registers)
    for k, fn in enumerate(stages):
        prev = plan.task(f"stage{k}:{getattr(fn, '__name__', 'fn')}", fn, [prev], registers=registers)
    yield from plan.stream()


def status(actors: Iterable[Actor] | None = None) -> list[dict]:
    """What every live actor is doing: plan, task, state, iterations fired, registers in use, what it waits on."""
    rows = []
    for a in list(actors if actors is not None else _LIVE):
        if not a.is_alive() and actors is None:
            continue
        rows.append({"plan": a.task.plan.name, "task": a.task.name, "state": a.state, "fired": a.fired,
                     "registers_in_use": a.task.registers - len(a.free), "registers": a.task.registers,
                     "waiting_on": a.waiting_on() if a.state == "waiting" else ""})
    return rows


def status_text(actors: Iterable[Actor] | None = None) -> str:
    """`status` as lines of text."""
    lines = []
    for r in status(actors):
        line = f"{r['plan']}/{r['task']}: {r['state']} after {r['fired']} firings, " \
               f"{r['registers_in_use']}/{r['registers']} registers in use"
        if r["waiting_on"]:
            line += f", waiting on {r['waiting_on']}"
        lines.append(line)
    return "; ".join(lines) if lines else "no live actors"
