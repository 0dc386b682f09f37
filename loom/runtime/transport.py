"""How actors' messages travel: in-process queues, or the communication layer between processes.

An actor talks to its neighbours only by putting messages into their
mailboxes: ``("data", input_index, register, value)`` from a producer,
``("ack", None, register, None)`` back from a consumer, ``("stop", ...)`` when
the plan stops. Both kinds of mailbox have one method, ``put(message)``:

- an actor in this process is reached through its own queue (`queue.SimpleQueue`);
- an actor in another process is reached through a `RemoteMailbox`, which hands
  the message to a `Transport` addressed to the actor's rank and name.

`MpiTransport` is the transport between ranks: each message is a tagged
non-blocking MPI send of a small header (who it is for, what kind, which
register) followed by the register's arrays as raw buffers (tuples and lists of
NumPy arrays travel without pickling). One receiving thread per process polls
for messages and puts each into the addressed local actor's queue. mpi4py is
imported only when an `MpiTransport` is made, never by importing this module.

A run ends without a master: when every actor of a rank has finished, the rank
sends ``bye`` to every other rank of the plan, after everything else it sent
(MPI keeps the order of one sender's messages on one tag), and its receiver
stops once every peer's ``bye`` has arrived. Messages for actors that have
already finished (late register returns) are dropped.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np

from loom.errors import LoomError

__all__ = ["Transport", "MpiTransport", "RemoteMailbox", "END"]

_TAG = 0x4C4F  # Headers.
_TAG_DATA = 0x4C50  # The arrays that follow a header.
END = "__loom_end__"  # The end-of-stream marker on the wire.


class Transport:
    """Carries actor messages between processes: `send` to (rank, actor name), `serve` delivers to this one's.

    Attributes
    ----------
    rank : int
        This process's rank among the transport's processes.
    """

    rank: int = 0

    def send(self, rank: int, actor: str, message: tuple) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def serve(self, deliver: Callable[[str, tuple], None], peers: list[int]) -> None:  # pragma: no cover
        """Start delivering incoming messages with ``deliver(actor_name, message)`` until `finish`."""
        raise NotImplementedError

    def finish(self, timeout: float | None = None) -> None:  # pragma: no cover - interface
        """Tell the peers this rank is done and wait until every peer said so too."""
        raise NotImplementedError


class RemoteMailbox:
    """An actor in another process, as its neighbours here see it: `put` sends through the transport.

    It stands in for the actor in the local wiring, so it carries the task
    (for names in status and errors).
    """

    def __init__(self, transport: Transport, rank: int, task: Any) -> None:
        self.transport = transport
        self.rank = rank
        self.task = task
        self.name = f"{task.plan.name}/{task.name}@rank{rank}"
        self.inbox = self

    def put(self, message: tuple) -> None:
        self.transport.send(self.rank, self.task.name, message)


def _arrays(value) -> list[np.ndarray] | None:
    """`value`'s arrays if it is an array or a tuple/list of arrays (sent as raw buffers), else None."""
    if type(value) is np.ndarray:
        return [value]
    if isinstance(value, (tuple, list)) and value and all(type(v) is np.ndarray for v in value):
        return list(value)
    return None


class MpiTransport(Transport):
    """Actor messages between MPI processes: tagged isend/irecv of a header and the register's buffers.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        The processes the plan spans; this transport works on a duplicate of
        it, so its messages never meet the program's own. Default: a duplicate
        of ``MPI.COMM_WORLD``. Ranks are ranks of this communicator. Making a
        transport is collective: every process of `comm` makes its transports
        in the same order.
    poll : float
        Longest pause, in seconds, between polls of the receiving thread when
        nothing arrives (it starts at a tenth of that and backs off), so an
        idle receiver does not spin on a core another rank needs.
    """

    def __init__(self, comm: Any = None, poll: float = 0.002) -> None:
        from mpi4py import MPI  # Loaded with the first transport, not with the runtime.
        self._MPI = MPI
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.poll = poll
        self._lock = threading.Lock()   # One MPI call at a time: needs no more than MPI_THREAD_SERIALIZED.
        self._sends: list = []          # Requests (and their buffers) not yet known to be complete.
        self._thread: threading.Thread | None = None
        self._byes: set[int] = set()
        self._peers: set[int] = set()
        self._closed = threading.Event()
        self._error: list[BaseException] = []
        self.bytes_sent = 0

    # Sending ----------------------------------------------------------------------------------------------

    def send(self, rank: int, actor: str, message: tuple) -> None:
        kind, k, reg, value = message
        arrays = _arrays(value) if kind == "data" else None
        if arrays is not None:
            arrays = [np.ascontiguousarray(a) for a in arrays]
            meta: Any = ("arrays", type(value) is np.ndarray, [(a.shape, a.dtype.str) for a in arrays])
        elif value is _END_OBJECT[0]:
            meta = ("end",)
        else:
            meta = ("object", value)
        header = (actor, kind, k, reg, meta)
        with self._lock:
            self._sends = [(r, keep) for r, keep in self._sends if not r.Test()]
            self._sends.append((self.comm.isend(header, dest=rank, tag=_TAG), None))
            for a in arrays or ():
                self._sends.append((self.comm.Isend(a, dest=rank, tag=_TAG_DATA), a))
                self.bytes_sent += a.nbytes

    # Receiving --------------------------------------------------------------------------------------------

    def serve(self, deliver: Callable[[str, tuple], None], peers: list[int]) -> None:
        if self._thread is not None:
            raise LoomError("loom.runtime.MpiTransport: already serving a plan; one plan at a time per transport")
        self._byes = set()
        self._peers = set(peers) - {self.rank}
        self._closed.clear()
        self._error = []
        self._thread = threading.Thread(target=self._receive, args=(deliver,), name=f"transport@rank{self.rank}",
                                        daemon=True)
        self._thread.start()

    def _take(self):
        """One header and its arrays if a message is waiting, else None."""
        MPI = self._MPI
        status = MPI.Status()
        with self._lock:
            if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG, status=status):
                return None
            src = status.Get_source()
            actor, kind, k, reg, meta = self.comm.recv(source=src, tag=_TAG)
            value: Any = None
            if meta[0] == "arrays":
                parts = []
                for shape, dtype in meta[2]:
                    buf = np.empty(shape, np.dtype(dtype))
                    self.comm.Recv(buf, source=src, tag=_TAG_DATA)  # Sent right after the header.
                    parts.append(buf)
                value = parts[0] if meta[1] else tuple(parts)
            elif meta[0] == "end":
                value = _END_OBJECT[0]
            else:
                value = meta[1]
        return src, actor, (kind, k, reg, value)

    def _receive(self, deliver) -> None:
        pause = self.poll / 10
        try:
            while not (self._closed.is_set() and self._byes >= self._peers):
                got = self._take()
                if got is None:
                    time.sleep(pause)
                    pause = min(self.poll, pause * 2)
                    continue
                pause = self.poll / 10
                src, actor, message = got
                if message[0] == "bye":
                    self._byes.add(src)
                    continue
                deliver(actor, message)
        except BaseException as e:  # Surfaces in finish(); the plan's actors time out or are stopped.
            self._error.append(e)

    def finish(self, timeout: float | None = None) -> None:
        for peer in sorted(self._peers):
            self.send(peer, "", ("bye", None, None, None))
        self._closed.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise LoomError(f"loom.runtime.MpiTransport: rank {self.rank} waited {timeout} s for ranks "
                                f"{sorted(self._peers - self._byes)} to finish the plan")
        with self._lock:
            for r, _ in self._sends:
                r.wait()
            self._sends = []
        if self._error:
            raise LoomError(f"loom.runtime.MpiTransport: rank {self.rank}'s receiver failed: "
                            f"{type(self._error[0]).__name__}: {self._error[0]}") from self._error[0]

    def close(self) -> None:
        """Free the duplicated communicator (after the last plan)."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None


# The actor runtime's end-of-stream object, installed by loom.runtime.actors (which owns it).
_END_OBJECT: list[Any] = [None]
