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

Actors talk only through their inboxes, behind one interface
(`loom.runtime.transport`): an actor in this process through its queue, an
actor in another process through a `RemoteMailbox` that hands the message to
a transport (`MpiTransport`: tagged isend/irecv of the register's buffers).
A plan is placed by giving tasks a ``rank``; every process builds the same
plan and runs the actors of its own rank (tasks without a rank run in every
process and read only unplaced tasks), so no process sees or schedules the
whole job. The end of the stream
travels as a last message down every edge, so each actor stops by itself
after its inputs are drained; a failure stops every actor of the plan and
`Plan.run` raises it, naming the task.

Fault tolerance: a task marked ``retries=n`` (data reads) runs again after
an error, up to n times, waiting ``backoff * 2**attempt`` seconds between
tries and recording ``retrying`` in its actor's record. A task that fails for
good raises `ActorError` naming the actor, the task's subgraph and, when the
task runs a graph, the node that failed; every other actor stops by itself
(no thread is left behind).

The state tracker: each actor records its own transitions (waiting, ready,
running, done, failed, retrying) with timestamps, its output registers in
use and the bytes of the values they hold (`Actor.records`, ``Plan.records``;
off with ``Plan(track=False)``: only the current state is kept); `status()`
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

import inspect
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from loom import profiler as _profiler
from loom.errors import LoomError
from loom.runtime import transport as _transport

__all__ = ["Plan", "Task", "Actor", "status", "status_text", "pipeline", "ActorError", "GraphProgram", "TaskSpec"]

_END = object()          # The end of a stream, sent down every edge once.
_transport._END_OBJECT[0] = _END
_LIVE: "weakref.WeakSet[Actor]" = weakref.WeakSet()   # For status queries only; never used to schedule.
STATES = ("waiting", "ready", "running", "done", "failed", "retrying")
TRACK_CAPACITY = 1 << 14   # Transitions each tracking actor keeps (a ring: the last ones).
_TRACK_MASK = TRACK_CAPACITY - 1
_clock_ns = time.perf_counter_ns


class ActorError(LoomError):
    """A task of a plan failed; the message names the plan, the actor, its subgraph, the node and the error.

    Attributes
    ----------
    actor : str or None
        The failing actor's name (``plan/task``).
    task : str or None
        The failing task's name.
    subgraph : str or None
        What the task runs (a graph task: its nodes' ops), if it said.
    node : str or None
        The node that failed (op, input and output shapes), for graph tasks.
    """

    actor: str | None = None
    task: str | None = None
    subgraph: str | None = None
    node: str | None = None


class _Stopped(BaseException):
    """Raised inside an actor told to stop because another task failed or the caller cancelled."""


class Task:
    """One node of a `Plan`: a function of its inputs' values (or a source iterable), and its output edge."""

    def __init__(self, plan: "Plan", name: str, fn: Callable | None, inputs: list["Task"], registers: int,
                 source: Iterable | None = None, retries: int = 0, backoff: float = 0.05,
                 subgraph: str | None = None, diagnose: Callable | None = None, rank: int | None = None,
                 lookahead: tuple[int, ...] | None = None):
        self.plan = plan
        self.lookahead = lookahead    # Per input edge: values that must wait behind the one a firing takes.
        self.rank = rank              # The process (transport rank) that runs it; None: every process.
        self.name = name
        self.fn = fn
        self.inputs = inputs
        self.registers = registers
        self.source = source
        self.retries = retries
        self.backoff = backoff
        self.subgraph = subgraph      # In words: what this task runs (for errors and status).
        self.diagnose = diagnose      # (error, input values) -> the failing node in words, or None.
        self.consumers: list[Task] = []

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class Plan:
    """A DAG of tasks, each run by its own actor; build it with `source` and `task`, then `run` it.

    Parameters
    ----------
    name : str
        Names the plan in errors, `status()` and traces.
    track : bool
        Keep each actor's list of timestamped state transitions (``Plan.trace``
        after a run: (seconds, state, detail); ``Plan.records``: the same
        with the output registers in use and the bytes they hold). Off,
        actors keep only their current state (for `status()`), which costs
        nothing measurable.
    transport : loom.runtime.transport.Transport, optional
        How actors on different ranks talk (`MpiTransport`); needed when tasks
        are placed on ranks (``rank=``). Every process builds the same plan
        and runs it; each starts only its own rank's actors.
    """

    def __init__(self, name: str = "plan", track: bool = True, transport: Any = None):
        self.name = name
        self.track = track
        self.transport = transport
        self.tasks: list[Task] = []
        self.trace: dict[str, list] = {}
        self.records: dict[str, list] = {}
        self._running: dict[str, Actor] = {}

    def _add(self, task: Task) -> Task:
        if any(t.name == task.name for t in self.tasks):
            raise LoomError(f"loom.runtime.Plan {self.name}: a task named {task.name!r} already exists")
        if task.registers < 1:
            raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r} needs at least one output "
                            f"register, got {task.registers}")
        if task.rank is not None and (not isinstance(task.rank, int) or task.rank < 0):
            raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r}: rank must be an int >= 0 or None, "
                            f"got {task.rank!r}")
        if task.rank is None and any(i.rank is not None for i in task.inputs):
            placed = [i.name for i in task.inputs if i.rank is not None]
            raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r} has no rank (it runs in every "
                            f"process) but reads tasks placed on ranks ({placed}); give it a rank")
        if task.lookahead is not None:
            ok = len(task.lookahead) == len(task.inputs) and all(type(k) is int and k >= 0 for k in task.lookahead)
            if not ok:
                raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r}: lookahead must give one int >= 0 "
                                f"per input ({len(task.inputs)}), got {task.lookahead!r}")
            for i, k in zip(task.inputs, task.lookahead):
                if k >= i.registers:
                    raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r} waits for {k + 1} values "
                                    f"from {i.name!r} (lookahead {k}), which has only {i.registers} registers and "
                                    f"would never fill them; give {i.name!r} at least {k + 1} registers")
        if not isinstance(task.retries, int) or task.retries < 0 or task.backoff < 0:
            raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r}: retries must be an int >= 0 "
                            f"and backoff >= 0 seconds, got retries={task.retries!r}, backoff={task.backoff!r}")
        for i in task.inputs:
            if not isinstance(i, Task) or i.plan is not self:
                raise LoomError(f"loom.runtime.Plan {self.name}: task {task.name!r}: inputs must be tasks of "
                                f"this plan, got {i!r}")
            i.consumers.append(task)
        self.tasks.append(task)
        return task

    def source(self, name: str, iterable: Iterable, registers: int = 2, retries: int = 0,
               backoff: float = 0.05, rank: int | None = None) -> Task:
        """A task with no inputs that emits the items of `iterable`, one per firing.

        With ``retries=n`` a read that raises is tried again up to n times,
        ``backoff * 2**k`` seconds after the k-th failure. A Python generator
        cannot continue after it raised, so retries need an iterator whose
        ``__next__`` may be called again (a reader object).

        Examples
        --------
        >>> class Flaky:
        ...     def __init__(self): self.i, self.failed = 0, False
        ...     def __iter__(self): return self
        ...     def __next__(self):
        ...         if self.i == 2 and not self.failed:
        ...             self.failed = True
        ...             raise OSError("network hiccup")
        ...         if self.i == 4:
        ...             raise StopIteration
        ...         self.i += 1
        ...         return self.i
        >>> plan = Plan("reads")
        >>> plan.task("sink", lambda x: x, [plan.source("read", Flaky(), retries=3, backoff=0.001)])
        <Task sink>
        >>> plan.run(timeout=10)
        [1, 2, 3, 4]
        """
        if retries and inspect.isgenerator(iterable):
            raise LoomError(f"loom.runtime.Plan {self.name}: source {name!r}: a generator cannot be retried "
                            "after it raised; give an iterator object whose __next__ may be called again, or "
                            "read in a task (Plan.task(..., retries=n)) fed with what to read")
        return self._add(Task(self, name, None, [], registers, source=iterable, retries=retries,
                              backoff=backoff, rank=rank))

    def task(self, name: str, fn: Callable, inputs: list[Task], registers: int = 1, retries: int = 0,
             backoff: float = 0.05, subgraph: str | None = None, diagnose: Callable | None = None,
             rank: int | None = None, lookahead: list[int] | None = None) -> Task:
        """A task computing ``fn(*input_values)`` each time every input has a value.

        `registers` is the number of output values that may be in flight at
        once (waiting for or being used by consumers); 2 or more lets this
        task run ahead of its consumers by that many iterations. With
        ``retries=n`` a call that raises is repeated on the same inputs up to
        n times with exponential backoff. `subgraph` says in words what the
        task runs and `diagnose(error, inputs)` names the failing node; both
        go into the error when the task fails (graph tasks from
        `loom.runtime.partition` set them). `rank` places the task on that
        process of the plan's transport (None: every process runs it).
        ``lookahead[k]`` holds a firing back until input k also has that many
        later values waiting (or its stream has ended): a schedule written as
        registers, e.g. 1F1B's backward of micro-batch j after the forward of
        j + warm-up (`loom.distributed.actor_pipeline`).
        """
        if not inputs:
            raise LoomError(f"loom.runtime.Plan {self.name}: task {name!r} has no inputs; use Plan.source")
        return self._add(Task(self, name, fn, list(inputs), registers, retries=retries, backoff=backoff,
                              subgraph=subgraph, diagnose=diagnose, rank=rank,
                              lookahead=None if lookahead is None else tuple(lookahead)))

    def cancel(self) -> None:
        """Stop every actor of the running plan (each stops at its next message); the run raises."""
        for a in list(self._running.values()):
            a.stop.set()
            a.inbox.put(("stop", None, None, None))

    def stream(self, timeout: float | None = None):
        """Run the plan and yield the single sink task's outputs as they are produced.

        The plan runs in the background while the caller consumes; its
        failure is raised from the generator. The caller counts as the sink's
        consumer: the sink holds one of its registers per value handed out
        and not yet followed by the next request, so with ``registers >= 2``
        loading the next items overlaps the caller's work and no task runs
        further ahead than its registers allow. Closing the generator early
        stops every actor.
        """
        me = getattr(self.transport, "rank", None)
        sinks = [t for t in self.tasks if not t.consumers and (t.rank is None or me is None or t.rank == me)]
        if len(sinks) != 1:
            raise LoomError(f"loom.runtime.Plan {self.name}: stream needs exactly one sink task on this rank, "
                            f"has {[t.name for t in sinks]}")
        caller = _Caller()
        box: list = []
        started = threading.Event()

        def runner():
            try:
                self.run(timeout, _caller=caller, _started=started)
            except BaseException as e:
                box.append(e)
            caller.inbox.put(("end", None, None, None))
        th = threading.Thread(target=runner, name=f"{self.name}/driver", daemon=True)
        th.start()
        started.wait()
        sink_actor = self._running.get(sinks[0].name)
        held = None
        try:
            while True:
                if held is not None and sink_actor is not None:
                    sink_actor.inbox.put(("ack", None, held, None))
                    held = None
                kind, _, reg, value = caller.inbox.get()
                if kind != "data" or value is _END:
                    break
                held = reg
                yield value
        finally:
            if th.is_alive() and not box:
                self.cancel()
            th.join()
        if box:
            raise box[0]

    def run(self, timeout: float | None = None, _caller: Any = None, _started: Any = None) -> Any:
        """Start one actor per task, wait until the stream ends, return the sink tasks' outputs.

        With one sink the result is the list of its outputs in order; with
        several, a dict of name -> list. Raises `ActorError` if a task fails
        (after every actor has stopped) or `timeout` seconds pass (after
        telling every actor to stop).
        """
        if not self.tasks:
            if _started is not None:
                _started.set()
            return []
        placed = sorted({t.rank for t in self.tasks if t.rank is not None})
        wire: Any = self.transport if placed and (len(placed) > 1 or placed[0] != getattr(self.transport, "rank", 0)) \
            else None
        if placed and self.transport is None and placed != [0]:
            raise LoomError(f"loom.runtime.Plan {self.name}: tasks are placed on ranks {placed} but the plan has no "
                            "transport; pass Plan(..., transport=loom.runtime.transport.MpiTransport())")
        me = wire.rank if wire is not None else None
        local = [t for t in self.tasks if t.rank is None or wire is None or t.rank == me]
        sinks = [t for t in local if not t.consumers]
        results: dict[str, Any] = {t.name: [] for t in sinks}
        if _caller is not None:
            results[sinks[0].name] = None
        failure: list = []
        stop = threading.Event()
        actors: dict[str, Any] = {t.name: Actor(t, results.get(t.name), failure, stop) for t in local}
        for t in self.tasks:  # The neighbours on other ranks, as mailboxes that send through the transport.
            if t.name not in actors and any(n.name in actors for n in t.inputs + t.consumers):
                actors[t.name] = _transport.RemoteMailbox(wire, int(t.rank), t)  # type: ignore[arg-type]
        for t in local:
            actors[t.name].wire(actors)
        serving = wire is not None and me in placed
        if serving:
            def deliver(name: str, message: tuple) -> None:
                target = actors.get(name)
                if isinstance(target, Actor):
                    target.inbox.put(message)
            wire.serve(deliver, placed)
        actors_here = {n: a for n, a in actors.items() if isinstance(a, Actor)}
        if _caller is not None:
            actors[sinks[0].name].consumers.append((_caller, 0))
        self._running = actors_here
        for a in actors_here.values():
            a.start()
        if _started is not None:
            _started.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for a in actors_here.values():
                a.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if a.is_alive():
                    text = status_text([b for b in actors_here.values() if b.is_alive()])
                    self.cancel()
                    for b in actors_here.values():
                        b.join(1.0)
                    raise ActorError(f"loom.runtime: plan {self.name} did not finish within {timeout} s; {text}")
        finally:
            self._running = {}
            if serving:
                wire.finish(None if deadline is None else max(1.0, deadline - time.monotonic()))
        self.trace = {name: a.transitions for name, a in actors_here.items()}
        self.records = {name: a.records for name, a in actors_here.items()}
        if failure:
            raise _failure_error(self.name, *failure[0])
        why = next((a.stopped_by for a in actors_here.values() if a.stopped_by), None)
        if why is not None:
            raise ActorError(f"loom.runtime: plan {self.name} was stopped because {why}")
        if any(a.cancelled for a in actors_here.values()):
            raise ActorError(f"loom.runtime: plan {self.name} was cancelled")
        return results[sinks[0].name] if len(sinks) == 1 else results


def _failure_error(plan: str, actor: "Actor", err: BaseException, where: str | None) -> ActorError:
    """The error a failed plan raises: which actor, which subgraph, which node, what went wrong."""
    task = actor.task
    parts = [f"loom.runtime: plan {plan}: task {task.name!r} failed (actor {actor.name}"]
    if task.subgraph:
        parts.append(f", subgraph {task.subgraph}")
    if where:
        parts.append(f", at node {where}")
    tries = f" after {task.retries + 1} attempts" if task.retries else ""
    e = ActorError("".join(parts) + f"){tries}: {type(err).__name__}: {err}")
    e.actor, e.task, e.subgraph, e.node = actor.name, task.name, task.subgraph, where
    e.__cause__ = err
    return e


class _Caller:
    """The caller of `Plan.stream`, seen by the sink actor as one more consumer."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.task = self
        self.name = "caller"


class Actor(threading.Thread):
    """The one owner of a task: fires it when its inputs are filled and an output register is free.

    Attributes
    ----------
    state : str
        One of waiting, ready, running, done, failed.
    transitions : list of (seconds, state, detail)
        This actor's own record of its state changes (the state tracker),
        oldest first: ``time.perf_counter()`` seconds (the profiler's clock),
        the state, and what it waits on (waiting: ``"input"`` or ``"output
        register"``; `waiting_on` says it in full), the iteration number
        (running), the error (failed, retrying). The record is a ring of
        `TRACK_CAPACITY` entries, written in place (the last ones are kept).
    records : list of (seconds, state, detail, registers in use, bytes)
        The same transitions with the register occupancy at each: output
        registers holding a value not yet handed back, and that value's bytes
        (`value_bytes`).
    held_bytes : int
        Bytes of the values in this actor's output registers now.
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
        self.held: dict[int, int] = {}                          # Output register -> bytes of its value.
        self.held_bytes = 0
        self._nregs = task.registers
        self.fired = 0
        self.state = "waiting"
        self.track = task.plan.track
        # The tracker's ring, preallocated: one tuple stored per transition, nothing else allocated.
        self._ring: list = [None] * TRACK_CAPACITY if self.track else []
        self._count = 0
        if self.track:
            self._set("waiting")
        self.producers: list[Actor] = []
        self.consumers: list[tuple[Any, int]] = []
        self.cancelled = False
        self.stopped_by: str | None = None   # The failure elsewhere that stopped this actor, in words.
        _LIVE.add(self)

    def wire(self, actors: dict[str, Any]) -> None:
        """Find the neighbours: actors here, or `RemoteMailbox` es for those on other ranks."""
        self.producers = [actors[i.name] for i in self.task.inputs]
        for c in self.task.consumers:
            if self.task.rank is None and c.name not in actors or \
                    self.task.rank is None and isinstance(actors[c.name], _transport.RemoteMailbox):
                continue  # An unplaced task feeds only this process; each rank runs its own copy.
            for k, i in enumerate(c.inputs):
                if i is self.task:
                    self.consumers.append((actors[c.name], k))

    def _set(self, state: str, detail: Any = "") -> None:
        self.state = state
        if self.track:
            n = self._count
            self._ring[n & _TRACK_MASK] = (_clock_ns(), state, detail, self._nregs - len(self.free), self.held_bytes)
            self._count = n + 1

    def _kept(self) -> list:
        n, ring = self._count, self._ring
        if not ring:
            return []
        return ring[n & _TRACK_MASK:] + ring[:n & _TRACK_MASK] if n > TRACK_CAPACITY else ring[:n]

    @property
    def transitions(self) -> list[tuple[float, str, Any]]:
        """The recorded transitions, oldest first, in seconds (see the class docstring)."""
        return [(t * 1e-9, state, detail) for t, state, detail, _, _ in self._kept()]

    @property
    def records(self) -> list[tuple[float, str, Any, int, int]]:
        """The recorded transitions with the output registers in use and their bytes at each, oldest first."""
        return [(t * 1e-9, *rest) for t, *rest in self._kept()]

    def waiting_on(self) -> str:
        """What this actor needs before it can fire next, in words."""
        if self.state in ("done", "failed"):
            return ""
        need = [p.task.name for p, q in zip(self.producers, self.pending) if not q]
        parts = [f"input from {', '.join(need)}"] if need else []
        ahead = self.task.lookahead or ()
        later = [f"{k + 1 - len(q)} more from {p.task.name}" for p, q, k in zip(self.producers, self.pending, ahead)
                 if q and len(q) <= k and q[-1][1] is not _END]
        if later:
            parts.append(f"values queued behind the next one (lookahead): {', '.join(later)}")
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
        except _Stopped as e:
            self.cancelled = True
            self.stopped_by = e.args[0] if e.args else None
            self._set("done", "stopped")
            self._tell_neighbours(self.stopped_by)
            return
        except BaseException as e:  # Stops every actor; Plan.run raises it with the task's name.
            self._set("failed", repr(e))
            self.failure.append((self, e, getattr(e, "_loom_node", None)))
            self.stop.set()
            where = getattr(self.task, "rank", None)
            self._tell_neighbours(f"task {self.task.name!r}{'' if where is None else f' on rank {where}'} failed: "
                                  f"{type(e).__name__}: {e}")
            return
        self._set("done")

    def _tell_neighbours(self, why: str | None = None) -> None:
        """Stop the neighbours; `why` (the failure that started it) travels along, to other ranks too."""
        for c, _ in self.consumers:
            c.inbox.put(("stop", None, None, why))
        for p in self.producers:
            p.inbox.put(("stop", None, None, why))

    def _attempt(self, call: Callable, values: list) -> Any:
        """`call()`, repeated after an error up to the task's retries, with exponential backoff."""
        k = 0
        while True:
            try:
                return call()
            except StopIteration:
                raise
            except Exception as e:
                if k >= self.task.retries or self.stop.is_set():
                    if self.task.diagnose is not None:
                        try:
                            e._loom_node = self.task.diagnose(e, values)  # type: ignore[attr-defined]
                        except Exception:
                            pass
                    raise
                delay = self.task.backoff * 2 ** k
                k += 1
                self._set("retrying", f"attempt {k + 1} of {self.task.retries + 1} in {delay:.3g} s after "
                                      f"{type(e).__name__}: {e}")
                if self.stop.wait(delay):
                    raise _Stopped() from e

    def _emit(self, value: Any) -> None:
        reg = self.free.pop()
        if self.consumers:
            self.acks[reg] = len(self.consumers)
            size = value_bytes(value)
            self.held[reg] = size
            self.held_bytes += size
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
                self.held_bytes -= self.held.pop(reg, 0)
                self.free.append(reg)
        elif kind == "stop":
            raise _Stopped(value)

    def _wait_free(self) -> None:
        while not self.free:
            if self.state != "waiting":
                self._set("waiting", "output register")
            self._handle(self.inbox.get())

    def _run_source(self) -> None:
        it = iter(self.task.source)  # type: ignore[arg-type]
        if isinstance(it, _Feed):
            it.stop = self.stop
        while True:
            if self.stop.is_set():
                raise _Stopped()
            self._wait_free()
            while True:  # Take back registers already returned, without blocking.
                try:
                    self._handle(self.inbox.get_nowait())
                except queue.Empty:
                    break
            self._set("running")
            t0 = _profiler.now_us() if _profiler.ACTIVE is not None else 0.0
            try:
                value = self._attempt(it.__next__, []) if self.task.retries else next(it)
            except StopIteration:
                break
            if _profiler.ACTIVE is not None:
                _profiler.record(self.task.name, "actor", t0, _profiler.now_us(), iteration=self.fired)
            self.fired += 1
            self._emit(value)
        self._finish()

    def _end_ready(self) -> bool:
        return all(self.pending) and any(q[0][1] is _END for q in self.pending)

    def _filled(self) -> bool:
        """Every input holds a value (and, with lookahead, the later ones it asks for, or its end)."""
        ahead = self.task.lookahead
        if ahead is None:
            return all(self.pending)
        return all(len(q) > k or (q and q[-1][1] is _END) for q, k in zip(self.pending, ahead))

    def _run_task(self) -> None:
        fn: Callable = self.task.fn  # type: ignore[assignment]
        while True:
            while True:
                filled = self._filled()
                if filled and (not self.consumers or self.free or self._end_ready()):
                    break
                if self.state != "waiting":  # What it waits on in short; `waiting_on` says it in full.
                    self._set("waiting", "output register" if filled else "input")
                self._handle(self.inbox.get())
            taken = [q.pop(0) for q in self.pending]
            values = [v for _, v in taken]
            if any(v is _END for v in values):
                break
            self._set("running", self.fired)
            t0 = _profiler.now_us() if _profiler.ACTIVE is not None else 0.0
            out = self._attempt(lambda: fn(*values), values) if (self.task.retries or self.task.diagnose) \
                else fn(*values)
            if _profiler.ACTIVE is not None:
                _profiler.record(self.task.name, "actor", t0, _profiler.now_us(), iteration=self.fired)
            self.fired += 1
            for p, (reg, _) in zip(self.producers, taken):
                p.inbox.put(("ack", None, reg, None))
            if self.sink is not None:
                self.sink.append(out)
            self._emit(out)
            # Hold nothing while waiting: a value lives only in its registers, which bound the memory in flight.
            taken = values = out = None  # type: ignore[assignment]
        self._finish()

    def _finish(self) -> None:
        for c, k in self.consumers:
            c.inbox.put(("data", k, -1, _END))


def pipeline(source: Iterable, *stages: Callable, registers: int = 2, name: str = "pipeline"):
    """Run ``stages`` over the items of `source` on a chain of actors; yield the last stage's outputs.

    Each stage is a one-argument function (for example: read, decode, move to
    tensors, train step). With ``registers=2`` (the default) every stage may
    work on item i+1 while the next stage works on item i, so loading overlaps
    computing, and no stage runs more than `registers` items ahead.

    Examples
    --------
    >>> list(loom.runtime.pipeline(range(4), lambda x: x + 1, lambda x: x * 10))
    [10, 20, 30, 40]
    """
    plan = Plan(name)
    prev = plan.source("source", source, registers=registers)
    for k, fn in enumerate(stages):
        prev = plan.task(f"stage{k}:{getattr(fn, '__name__', 'fn')}", fn, [prev], registers=registers)
    yield from plan.stream()


def value_bytes(value: Any) -> int:
    """Bytes of a register's value: an array's, or the arrays' in a tuple or list (one level); else 0."""
    size = getattr(value, "nbytes", None)
    if isinstance(size, (int, np.integer)):
        return int(size)
    if isinstance(value, (tuple, list)):
        return sum(int(n) for n in (getattr(v, "nbytes", 0) for v in value) if isinstance(n, (int, np.integer)))
    return 0


def status(actors: Iterable[Actor] | None = None) -> list[dict]:
    """What every live actor is doing: plan, task, state, iterations fired, registers in use and the bytes
    they hold, what it waits on.

    Examples
    --------
    >>> import loom
    >>> loom.runtime.status()   # No plan running.
    []
    """
    rows = []
    for a in list(actors if actors is not None else _LIVE):
        if not a.is_alive() and actors is None:
            continue
        rows.append({"plan": a.task.plan.name, "task": a.task.name, "state": a.state, "fired": a.fired,
                     "registers_in_use": a.task.registers - len(a.free), "registers": a.task.registers,
                     "register_bytes": a.held_bytes,
                     "waiting_on": a.waiting_on() if a.state == "waiting" else ""})
    return rows


def status_text(actors: Iterable[Actor] | None = None) -> str:
    """`status` as lines of text."""
    lines = []
    for r in status(actors):
        line = f"{r['plan']}/{r['task']}: {r['state']} after {r['fired']} firings, " \
               f"{r['registers_in_use']}/{r['registers']} registers in use ({r['register_bytes']} B)"
        if r["waiting_on"]:
            line += f", waiting on {r['waiting_on']}"
        lines.append(line)
    return "; ".join(lines) if lines else "no live actors"


# ---------------------------------------------------------------- compiled graphs on actors

class TaskSpec:
    """One task of a `GraphProgram`: a compiled subgraph and where its inputs come from.

    ``inputs[k]`` is ``(-1, i)`` (the call's argument i) or ``(p, j)`` (output
    j of task p). `subgraph` is the subgraph in words; ``diagnose(error,
    arrays)`` names the node that failed.
    """

    def __init__(self, name: str, run: Callable, inputs: list[tuple[int, int]], subgraph: str = "",
                 diagnose: Callable | None = None, rank: int | None = None):
        self.rank = rank   # The transport rank that runs it (a placed program); None: this process.
        self.name = name
        self.run = run
        self.inputs = inputs
        self.subgraph = subgraph
        self.diagnose = diagnose


class _Feed:
    """The source of a running `GraphProgram`: the arguments of each call, until closed."""

    def __init__(self) -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.stop: threading.Event | None = None   # Set by the source actor: its plan's stop signal.

    def __iter__(self):
        return self

    def __next__(self):
        while True:   # Idle between calls; wake up now and then to see whether the plan was stopped.
            try:
                item = self.q.get(timeout=0.1)
            except queue.Empty:
                if self.stop is not None and self.stop.is_set():
                    raise _Stopped() from None
                continue
            if item is _END:
                raise StopIteration
            return item

    def close(self) -> None:
        self.q.put(_END)


class GraphProgram:
    """Compiled subgraphs (from `loom.compiler.partition`) run as one actor each; one call is one iteration.

    With one task the program calls it directly in the caller's thread: no
    actor, no queue, the same cost as the plain compiled step. With several,
    a plan of actors is started on the first call and kept: a ``feed``
    source hands each call's arguments to the tasks, tasks without a path
    between them run at the same time, and ``collect`` assembles the
    outputs. `map` streams many calls through the same actors, so with
    ``registers >= 2`` the stages of consecutive calls overlap (a pipeline
    over micro-batches). A failing task raises `ActorError` naming its
    actor, subgraph and node; the plan then stops and the next call starts a
    fresh one. `close` stops the actors.

    Parameters
    ----------
    name : str
    tasks : list of TaskSpec
        In an order where producers come first.
    outputs : list of (int, Any)
        Per output: ``(-1, i)`` argument i, ``(p, j)`` output j of task p,
        ``(-2, array)`` a constant.
    n_inputs : int
    track : bool
        Keep the actors' state transitions (the state tracker).
    registers : int
        Registers per edge.
    parallel : bool
        Whether a single call runs on the actors (so independent branches
        run at the same time) or calls the tasks one after another in the
        caller's thread; the compiler decides by the work the branches hold
        (handing values between threads costs tens of microseconds). `map`
        runs on the actors unless `serial`.
    serial : bool
        Never run on actors: every call, `map` included, runs the tasks one
        after another in the caller's thread (a graph with collectives, which
        must start in the same order on every rank).
    """

    def __init__(self, name: str, tasks: list[TaskSpec], outputs: list[tuple[int, Any]], n_inputs: int,
                 track: bool = False, registers: int = 2, parallel: bool = True, serial: bool = False,
                 transport: Any = None):
        self.transport = transport
        self.serial = serial
        self.parallel = parallel and not serial
        self.name = name
        self.tasks = tasks
        self.outputs = outputs
        self.n_inputs = n_inputs
        self.track = track
        self.registers = registers
        self.plan: Plan | None = None
        self._feed: _Feed | None = None
        self._stream: Any = None
        self._lock = threading.Lock()
        self.memory: Any = None    # Under a memory budget: how the compiler fitted the tasks (plain data).
        self._single = tasks[0].run if len(tasks) == 1 and self._identity() and transport is None else None

    def _identity(self) -> bool:
        t = self.tasks[0]
        return t.inputs == [(-1, k) for k in range(self.n_inputs)] and \
            self.outputs == [(0, k) for k in range(len(self.outputs))]

    def _gather(self, t: TaskSpec, producers: list[int]):
        where = {p: k for k, p in enumerate(producers)}
        picks = [(-1, i) if p == -1 else (where[p], i) for p, i in t.inputs]

        def args(feed: list, outs: tuple) -> list:
            return [feed[i] if p == -1 else outs[p][i] for p, i in picks]
        return args

    def _task_fn(self, t: TaskSpec, producers: list[int]) -> Callable:
        args = self._gather(t, producers)
        run = t.run

        def fire(feed, *outs):
            return run(*args(feed, outs))
        return fire

    def _diagnose(self, t: TaskSpec, producers: list[int]) -> Callable | None:
        if t.diagnose is None:
            return None
        args = self._gather(t, producers)
        diagnose = t.diagnose

        def which(err: BaseException, values: list):
            return diagnose(err, args(values[0], tuple(values[1:])))
        return which

    def _start(self) -> None:
        plan = Plan(self.name, track=self.track, transport=self.transport)
        feed = _Feed()
        src = plan.source("feed", feed, registers=self.registers)   # Every process feeds its own copy.
        made: list[Task] = []
        for t in self.tasks:
            producers = sorted({p for p, _ in t.inputs if p >= 0})
            made.append(plan.task(t.name, self._task_fn(t, producers), [src] + [made[p] for p in producers],
                                  registers=self.registers, subgraph=t.subgraph,
                                  diagnose=self._diagnose(t, producers), rank=t.rank))
        used = sorted({p for p, _ in self.outputs if p >= 0})
        where = {p: k for k, p in enumerate(used)}
        spec = [(p, where.get(p, -1), x) for p, x in self.outputs]

        def collect(args, *outs):
            return tuple(args[x] if p == -1 else np.array(x) if p == -2 else outs[k][x] for p, k, x in spec)
        placed = sorted({t.rank for t in self.tasks if t.rank is not None})
        if self.transport is None or not placed:
            plan.task("collect", collect, [src] + [made[p] for p in used], registers=self.registers)
        else:  # Every rank of the program collects every output (the other ranks' travel to it).
            for r in range(self.transport.size):
                plan.task(f"collect@{r}", collect, [src] + [made[p] for p in used], registers=self.registers,
                          rank=r)
        self.plan, self._feed = plan, feed
        self._stream = plan.stream()

    def _in_caller(self, arrays) -> tuple:
        """One call, task after task in the caller's thread; a failure names the task as its actor would."""
        outs: list = []
        for t in self.tasks:
            args = [arrays[i] if p == -1 else outs[p][i] for p, i in t.inputs]
            try:
                outs.append(t.run(*args))
            except Exception as err:
                where = None
                if t.diagnose is not None:
                    try:
                        where = t.diagnose(err, args)
                    except Exception:
                        where = None
                at = f", at node {where}" if where else ""
                e = ActorError(f"loom.runtime: plan {self.name}: task {t.name!r} failed (actor {self.name}/{t.name} "
                               f"in the caller's thread, subgraph {t.subgraph}{at}): {type(err).__name__}: {err}")
                e.actor, e.task, e.subgraph, e.node = f"{self.name}/{t.name}", t.name, t.subgraph, where
                raise e from err
        return tuple(arrays[x] if p == -1 else np.array(x) if p == -2 else outs[p][x] for p, x in self.outputs)

    def __call__(self, *arrays):
        if self._single is not None:
            return self._single(*arrays)
        if not self.parallel:
            return self._in_caller(arrays)
        with self._lock:
            if self._stream is None:
                self._start()
            assert self._feed is not None
            self._feed.q.put(list(arrays))
            try:
                return next(self._stream)
            except BaseException:
                self._stream = None
                raise

    def map(self, items: Iterable, lookahead: int | None = None):
        """Run one call per item (a list of input arrays); yield the outputs in order.

        Up to `lookahead` calls (default: registers times tasks) are in
        flight, so consecutive calls overlap stage by stage.
        """
        if self._single is not None or self.serial:
            for item in items:
                yield self._single(*item) if self._single is not None else self._in_caller(item)
            return
        ahead = lookahead or self.registers * (len(self.tasks) + 1)
        with self._lock:
            if self._stream is None:
                self._start()
            assert self._feed is not None
            pending = 0
            try:
                for item in items:
                    self._feed.q.put(list(item))
                    pending += 1
                    if pending >= ahead:
                        pending -= 1
                        yield next(self._stream)
                while pending:
                    pending -= 1
                    yield next(self._stream)
            except GeneratorExit:  # Left early: take the calls still in flight, so no later call gets them.
                for _ in range(pending):
                    next(self._stream)
                raise
            except BaseException:
                self._stream = None
                raise

    def close(self) -> None:
        """Stop the actors (after the calls in flight); the next call starts them again."""
        stream, feed = self._stream, self._feed
        self._stream = None
        if stream is not None and feed is not None:
            feed.close()
            for _ in stream:
                pass

    def __del__(self) -> None:
        feed = self.__dict__.get("_feed")
        if self.__dict__.get("_stream") is not None and feed is not None:
            feed.close()
