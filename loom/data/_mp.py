"""Process plumbing shared by the DataLoader workers and the record pipeline.

One rule carries it: the main process never waits on a child for longer than
`POLL_INTERVAL`, and never in a read that could block. Each child sends its
messages over its own pipe (a `Sender`); the parent (an `Inbox`) reads only
the bytes that have arrived and assembles messages from them, and between
waits it checks that the children are alive. So a child killed half-way
through a message (its pipe holds a partial message that will never be
completed) becomes a `LoomError` naming it, never a hang.
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from typing import Callable, Iterable

from loom.errors import LoomError, LoomTypeError, LoomValueError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

POLL_INTERVAL = 0.05  # Seconds between liveness checks while waiting for data.
_CHILD_POLL = 0.1  # Seconds a child waits for room in its pipe before asking whether to stop.
_PIPE_SIZE = 2**20  # Bytes a pipe holds (asked of Linux), and the most one write passes.
_HEADER = struct.Struct("<Q")  # A message is its length as 8 little-endian bytes, then its bytes.


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


def describe_exit(what: str, proc: mp.process.BaseProcess) -> str:
    """'<what> (pid 12) was killed by signal SIGKILL' or '<what> (pid 12) exited unexpectedly with exit code 1'."""
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"{what} (pid {proc.pid}) was killed by signal {name}"
    return f"{what} (pid {proc.pid}) exited unexpectedly with exit code {code}"


class Flag:
    """A process-shared boolean without a lock: setting or reading it never blocks, even if a child was killed."""

    def __init__(self, ctx: mp.context.BaseContext) -> None:
        self._value = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)


def pipe(ctx: mp.context.BaseContext):
    """A one-way pipe for one child's messages: (the end for `Inbox.add`, the end for the child's `Sender`).

    The parent must close the child's end once the child has started, so
    that the pipe reads as ended when the child is gone.
    """
    reader, writer = ctx.Pipe(duplex=False)
    if fcntl is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
        try:  # A larger pipe means fewer system calls per large message; the default size works too.
            fcntl.fcntl(reader.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except OSError:
            pass
    return reader, writer


class Sender:
    """A child's end of its pipe: writes length-prefixed messages, and gives up when `should_stop()` says so.

    The writes do not block, so a parent that stops reading (it is shutting
    down, or it is gone) never leaves the child stuck in a write.
    """

    def __init__(self, conn, should_stop: Callable[[], bool]) -> None:
        self.conn = conn  # Holds the descriptor open.
        self.fd = conn.fileno()
        self.should_stop = should_stop
        os.set_blocking(self.fd, False)

    def send(self, blob: bytes) -> bool:
        """Write one message; False if told to stop (or the parent's end is closed) before all of it was written."""
        for part in (_HEADER.pack(len(blob)), blob):
            view = memoryview(part)
            while view:
                try:
                    n = os.write(self.fd, view[:_PIPE_SIZE])
                except BlockingIOError:
                    select.select([], [self.fd], [], _CHILD_POLL)
                    if self.should_stop():
                        return False
                    continue
                except BrokenPipeError:
                    return False
                view = view[n:]
        return True


class _Receiver:
    """The parent's end of one child's pipe: assembles messages from whatever bytes have arrived, never waiting."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.fd = conn.fileno()
        os.set_blocking(self.fd, False)
        self.header = bytearray(_HEADER.size)
        self.body: bytearray | None = None
        self.filled = 0
        self.eof = False

    def read(self, out: list) -> None:
        """Append the messages that the bytes now in the pipe complete to `out`; set `eof` once the writer is gone."""
        while True:
            buf = self.header if self.body is None else self.body
            if self.filled == len(buf):
                if self.body is None:
                    self.body = bytearray(_HEADER.unpack(self.header)[0])
                else:
                    out.append(self.body)
                    self.body = None
                self.filled = 0
                continue
            try:
                n = os.readv(self.fd, [memoryview(buf)[self.filled:]])
            except BlockingIOError:
                return
            if n == 0:
                self.eof = True
                return
            self.filled += n


class Inbox:
    """Messages from child processes, one pipe each (see the module docstring)."""

    def __init__(self) -> None:
        self.receivers: list[_Receiver] = []
        self.ready: collections.deque = collections.deque()

    def add(self, conn) -> None:
        self.receivers.append(_Receiver(conn))

    def drained(self) -> bool:
        """Whether every child's end is closed and all that came through was taken."""
        return not self.ready and all(r.eof for r in self.receivers)

    def get(self, procs: Iterable[mp.process.BaseProcess], check: Callable[[], None], deadline: float | None = None,
            on_timeout: Callable[[], None] | None = None) -> bytearray:
        """The next message. While none is complete, `check()` runs after each short wait, and `on_timeout()` once
        `time.monotonic()` passes `deadline` (None: no limit). Either should raise."""
        procs = list(procs)
        while not self.ready:
            live = [r for r in self.receivers if not r.eof]
            # A process's sentinel becomes ready when it exits, so a death ends the wait at once.
            sentinels = [p.sentinel for p in procs if p.exitcode is None]
            wait = POLL_INTERVAL if deadline is None else max(0.0, min(POLL_INTERVAL, deadline - time.monotonic()))
            ready = mp_connection.wait([r.conn for r in live] + sentinels, wait)
            for r in live:
                if r.conn in ready:
                    r.read(self.ready)  # type: ignore[arg-type]
            if not self.ready:
                check()
                if deadline is not None and time.monotonic() >= deadline and on_timeout is not None:
                    on_timeout()
        return self.ready.popleft()

    def close(self) -> None:
        for r in self.receivers:
            r.conn.close()
        self.receivers.clear()
        self.ready.clear()


def deadline(timeout: float) -> float | None:
    """The `time.monotonic()` at which a wait of `timeout` seconds ends (None for 0: no limit)."""
    return time.monotonic() + timeout if timeout and timeout > 0 else None


def stop(procs: Iterable[mp.process.BaseProcess], grace: float = 1.0) -> None:
    """Join `procs` within `grace` seconds in all, then terminate (and if need be kill) the stragglers."""
    procs = [p for p in procs if p is not None and p.pid is not None]
    end = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    late = [p for p in procs if p.is_alive()]
    for p in late:
        p.terminate()
        if hasattr(signal, "SIGCONT") and p.pid is not None:
            try:  # A stopped process acts on SIGTERM only once continued.
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    end = time.monotonic() + 1.0
    for p in late:
        p.join(max(0.0, end - time.monotonic()))
    for p in late:
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
