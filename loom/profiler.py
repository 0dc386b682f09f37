"""Where the time goes: `profile` records loom's work as timed events, for a Chrome trace or a per-op table.

While a `profile` is active, loom records:

- every primitive the eager (reference) path computes, named by its op, with
  its output shape (``args``) — one event per node;
- every call of a compiled executable (``loom.function`` steps, eager graphs
  on the compiled backend), and inside it every step: fused kernels, GEMMs and
  reference nodes;
- ranges you mark with `record_function`.

Events are kept per thread; the trace has one row per thread. When no
profile is active the hooks cost one global read each.

Examples
--------
>>> import loom
>>> with loom.profiler.profile() as prof:
...     with loom.profiler.record_function("my_block"):
...         y = (loom.ones(64, 64) @ loom.ones(64, 64)).sum()
...         _ = y.item()
>>> names = {e.name for e in prof.events()}
>>> {"my_block", "matmul", "sum"} <= names
True
>>> print(prof.key_averages().table(row_limit=1).splitlines()[0].split()[:2])
['Name', 'Calls']
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from loom.errors import LoomError

__all__ = ["profile", "record_function", "Event", "EventAverages", "is_profiling"]

# The active profile, or None. Hooks read this one global and do nothing else when it is None.
ACTIVE: "profile | None" = None


@dataclass
class Event:
    """One timed piece of work: a name, a category, start and duration in microseconds, the thread, details."""

    name: str
    category: str
    start_us: float
    duration_us: float
    thread: int
    args: dict = field(default_factory=dict)


def is_profiling() -> bool:
    """Whether a `profile` is recording right now."""
    return ACTIVE is not None


def now_us() -> float:
    return time.perf_counter_ns() / 1000.0


def record(name: str, category: str, start_us: float, end_us: float, **args: Any) -> None:
    """Add one event to the active profile (a no-op when none is active)."""
    prof = ACTIVE
    if prof is not None:
        # A plain tuple into this thread's own list: no lock, no Event until the events are read.
        try:
            buf = prof._local.buf
        except AttributeError:
            buf = prof._thread_buffer()
        buf.append((name, category, start_us, end_us, args))


@contextmanager
def record_function(name: str) -> Iterator[None]:
    """Mark a range of your code: it appears as one event named `name` in the trace and the table."""
    if ACTIVE is None:
        yield
        return
    t0 = now_us()
    try:
        yield
    finally:
        record(name, "user", t0, now_us())


class profile:
    """Record loom's work while the ``with`` block runs (PyTorch's ``torch.profiler.profile`` in spirit).

    Parameters
    ----------
    record_shapes : bool
        Keep each event's output shape (on by default; the table groups by name only unless
        ``group_by_input_shape=True`` is passed to `key_averages`).

    Methods give the events (`events`), a per-name table (`key_averages`) and a
    Chrome/Perfetto trace file (`export_chrome_trace`). Profiles do not nest.
    """

    def __init__(self, record_shapes: bool = True, activities: Any = None, **_ignored: Any):
        self.record_shapes = record_shapes
        self._buffers: list[tuple[int, list]] = []   # (thread id, its records), one per recording thread.
        self._local = threading.local()
        self._lock = threading.Lock()
        self._threads: dict[int, str] = {}
        self._t0 = 0.0
        self._t1 = 0.0

    def __enter__(self) -> "profile":
        global ACTIVE
        if ACTIVE is not None:
            raise LoomError("loom.profiler.profile: a profile is already active (profiles do not nest)")
        self._t0 = now_us()
        ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global ACTIVE
        ACTIVE = None
        self._t1 = now_us()

    def start(self) -> None:
        """Start recording (the same as entering the ``with`` block)."""
        self.__enter__()

    def stop(self) -> None:
        """Stop recording."""
        self.__exit__(None, None, None)

    def step(self) -> None:
        """Mark the end of one training step (an instant event in the trace)."""
        record("step", "marker", now_us(), now_us())

    def _thread_buffer(self) -> list:
        """This thread's record list, made (and named for the trace) on its first event."""
        buf: list = []
        self._local.buf = buf
        tid = threading.get_ident()
        with self._lock:
            self._buffers.append((tid, buf))
            self._threads.setdefault(tid, threading.current_thread().name)
        return buf

    def events(self) -> list[Event]:
        """The recorded events, in the order they ended."""
        with self._lock:
            buffers = [(tid, list(buf)) for tid, buf in self._buffers]
        out = []
        for tid, buf in buffers:
            for name, cat, start, end, args in buf:
                if not self.record_shapes and "shape" in args:
                    args = {k: v for k, v in args.items() if k != "shape"}
                out.append(Event(name, cat, start, end - start, tid, args))
        out.sort(key=lambda e: e.start_us + e.duration_us)
        return out

    def key_averages(self, group_by_input_shape: bool = False) -> "EventAverages":
        """Totals per event name (and shape, with `group_by_input_shape`): calls, total, mean, max."""
        rows: dict[tuple, list[float]] = {}
        cats: dict[tuple, str] = {}
        for e in self.events():
            key = (e.name, str(e.args.get("shape"))) if group_by_input_shape else (e.name,)
            rows.setdefault(key, []).append(e.duration_us)
            cats[key] = e.category
        wall = max(self._t1 or now_us(), self._t0) - self._t0
        return EventAverages([(k, cats[k], v) for k, v in rows.items()], wall)

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the events as a Chrome trace (JSON; open it in chrome://tracing or ui.perfetto.dev).

        One row per thread; events nest by time (a compiled call holds its kernels).
        The file is written to a temporary name and renamed, so it is complete or absent.
        """
        pid = os.getpid()
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                               "args": {"name": "loom"}}]
        for tid, tname in self._threads.items():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tname}})
        for e in self.events():
            ev = {"name": e.name, "cat": e.category, "ph": "X", "ts": e.start_us - self._t0,
                  "dur": e.duration_us, "pid": pid, "tid": e.thread}
            if e.args:
                ev["args"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in e.args.items()}
            if e.category == "marker":
                ev.update(ph="i", s="t")
                del ev["dur"]
            events.append(ev)
        path = os.fspath(path)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        os.replace(tmp, path)


class EventAverages:
    """Per-name totals of a profile; `table` formats them (sorted by total time by default)."""

    def __init__(self, rows: list[tuple[tuple, str, list[float]]], wall_us: float):
        self.rows = [{"name": k[0], "shape": k[1] if len(k) > 1 else None, "category": cat, "calls": len(v),
                      "total_us": sum(v), "mean_us": sum(v) / len(v), "max_us": max(v)} for k, cat, v in rows]
        self.wall_us = wall_us

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def table(self, sort_by: str = "total", row_limit: int = 100) -> str:
        """A text table: name, calls, total ms, mean µs, max µs, share of the profiled wall time.

        `sort_by` is "total", "mean", "max" or "calls" (PyTorch's "cpu_time_total"/"self_cpu_time_total"
        mean "total" here).
        """
        key = {"total": "total_us", "cpu_time_total": "total_us", "self_cpu_time_total": "total_us",
               "mean": "mean_us", "max": "max_us", "calls": "calls", "count": "calls"}.get(sort_by)
        if key is None:
            raise LoomError(f"loom.profiler: sort_by must be one of total, mean, max, calls; got {sort_by!r}")
        rows = sorted(self.rows, key=lambda r: r[key], reverse=True)[:row_limit]
        width = max([len("Name")] + [len(self._label(r)) for r in rows])
        head = f"{'Name':<{width}}  {'Calls':>7}  {'Total ms':>10}  {'Mean us':>10}  {'Max us':>10}  {'% wall':>7}"
        lines = [head, "-" * len(head)]
        for r in rows:
            share = 100.0 * r["total_us"] / self.wall_us if self.wall_us > 0 else 0.0
            lines.append(f"{self._label(r):<{width}}  {r['calls']:>7}  {r['total_us'] / 1e3:>10.3f}  "
                         f"{r['mean_us']:>10.1f}  {r['max_us']:>10.1f}  {share:>6.1f}%")
        lines.append(f"profiled wall time: {self.wall_us / 1e3:.3f} ms (events nest, so shares can add up to more "
                     "than 100%)")
        return "\n".join(lines)

    @staticmethod
    def _label(r: dict) -> str:
        return r["name"] if r["shape"] is None else f"{r['name']} {r['shape']}"

    def __str__(self) -> str:
        return self.table()
