"""`torch.multiprocessing`: Python's multiprocessing (loom tensors pickle by value) plus `spawn`.

Examples
--------
>>> import loom.torch.multiprocessing as mp
>>> mp.get_start_method(allow_none=True) in (None, "fork", "spawn", "forkserver")
True
"""
from __future__ import annotations

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403

from loom.errors import LoomError

__all__ = [n for n in dir(_mp) if not n.startswith("_")] + ["spawn", "start_processes", "ProcessRaisedException",
                                                             "ProcessExitedException", "get_all_sharing_strategies",
                                                             "get_sharing_strategy", "set_sharing_strategy"]


class ProcessRaisedException(LoomError):
    """A process started by `spawn` raised; the message names its index."""


class ProcessExitedException(LoomError):
    """A process started by `spawn` exited with a non-zero code."""


def get_all_sharing_strategies() -> set:
    """Tensors travel between processes by pickling in loom; "file_system" is reported for compatibility."""
    return {"file_system"}


def get_sharing_strategy() -> str:
    return "file_system"


def set_sharing_strategy(new_strategy: str) -> None:
    """Accepted and ignored (loom pickles tensors by value)."""


def _wrap(fn, i, args, error_queue) -> None:
    import traceback
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except BaseException:
        error_queue.put(traceback.format_exc())
        raise SystemExit(1) from None


class ProcessContext:
    """The processes of one `spawn` call; `join()` waits for them and raises if one failed."""

    def __init__(self, processes, error_queues) -> None:
        self.processes, self.error_queues = processes, error_queues

    def pids(self) -> list:
        return [p.pid for p in self.processes]

    def join(self, timeout=None) -> bool:
        for p in self.processes:
            p.join(timeout)
        for i, (p, q) in enumerate(zip(self.processes, self.error_queues)):
            if not q.empty():
                for other in self.processes:
                    if other.is_alive():
                        other.terminate()
                raise ProcessRaisedException(f"loom.torch.multiprocessing.spawn: process {i} raised:\n{q.get()}")
            if p.exitcode not in (0, None):
                raise ProcessExitedException(f"loom.torch.multiprocessing.spawn: process {i} exited with code "
                                             f"{p.exitcode}")
        return all(not p.is_alive() for p in self.processes)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
                    start_method: str = "spawn"):
    """Run ``fn(i, *args)`` for i in range(nprocs), each in its own process started by `start_method`."""
    ctx = _mp.get_context(start_method)
    procs, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, tuple(args), q), daemon=daemon)
        p.start()
        procs.append(p)
        queues.append(q)
    context = ProcessContext(procs, queues)
    if not join:
        return context
    context.join()
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False, start_method: str = "spawn"):
    """`start_processes` with the "spawn" start method, as `torch.multiprocessing.spawn`."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
