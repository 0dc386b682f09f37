"""Process plumbing shared by the DataLoader workers and the record pipeline.

One rule carries it: the main process never blocks on a queue for longer than
`POLL_INTERVAL`; between polls it checks that the processes feeding it are
alive, so a crashed or killed process becomes a `LoomError`, never a hang.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import time
import traceback
from typing import Callable, Iterable

from loom.errors import LoomError, LoomTypeError, LoomValueError

POLL_INTERVAL = 0.05  # Seconds between liveness checks while waiting for data.


class RemoteError:
    """An exception raised in a child process, carried to the main process as text (and the object, if it pickles)."""

    def __init__(self, where: str) -> None:
        exc_type, exc, _ = sys.exc_info()
        self.where = where
        self.type_name = exc_type.__name__ if exc_type is not None else "Exception"
        self.text = traceback.format_exc()
        try:
            self.exc_bytes: bytes | None = pickle.dumps(exc)
        except Exception:
            self.exc_bytes = None

    def reraise(self, opname: str) -> None:
        original = None
        if self.exc_bytes is not None:
            try:
                original = pickle.loads(self.exc_bytes)
            except Exception:
                original = None
        raise LoomError(f"{opname}: caught {self.type_name} in {self.where}.\n"
                        f"Original traceback:\n{self.text}") from original


def describe_exit(proc: mp.process.BaseProcess) -> str:
    """'pid 123, exit code 1' or 'pid 123, killed by signal SIGKILL (exit code -9)'."""
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"pid {proc.pid}, killed by signal {name} (exit code {code})"
    return f"pid {proc.pid}, exit code {code}"


def get(q, check: Callable[[], None], timeout: float = 0.0, on_timeout: Callable[[], None] | None = None):
    """Take one item from `q`, calling `check()` between short polls and `on_timeout()` past `timeout` (> 0)."""
    deadline = time.monotonic() + timeout if timeout and timeout > 0 else None
    while True:
        wait = POLL_INTERVAL if deadline is None else max(0.0, min(POLL_INTERVAL, deadline - time.monotonic()))
        try:
            return q.get(timeout=wait)
        except queue.Empty:
            pass
        check()
        if deadline is not None and time.monotonic() >= deadline and on_timeout is not None:
            on_timeout()


def stop(procs: Iterable[mp.process.BaseProcess], grace: float = 1.0) -> None:
    """Join `procs` within `grace` seconds in all, then terminate (and if need be kill) the stragglers."""
    procs = [p for p in procs if p is not None and p.pid is not None]
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join()


def close_queue(q) -> None:
    """Close a queue without waiting to flush it (its reader may be gone)."""
    try:
        q.cancel_join_thread()
        q.close()
    except (OSError, ValueError, AttributeError):
        pass


class ParentWatch:
    """In a child: tells whether the process that started it is gone (then the child should exit)."""

    def __init__(self) -> None:
        self.parent = os.getppid()

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent


def context(spec) -> mp.context.BaseContext:
    """A multiprocessing context from None (the platform default), a start-method name, or a context."""
    if spec is None:
        return mp.get_context()
    if isinstance(spec, str):
        if spec not in mp.get_all_start_methods():
            raise LoomValueError(f"loom.data: multiprocessing_context {spec!r} is not one of "
                                 f"{mp.get_all_start_methods()}")
        return mp.get_context(spec)
    if isinstance(spec, mp.context.BaseContext):
        return spec
    raise LoomTypeError(f"loom.data: multiprocessing_context should be None, a start method name or a "
                        f"multiprocessing context, got {type(spec).__name__}")
