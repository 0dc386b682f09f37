"""What runs inside a DataLoader worker process, and how a dataset learns it is in one."""
from __future__ import annotations

import os
import pickle
import queue
import random
from typing import Any, Callable

import numpy as np

from loom.data import _mp
from loom.data._random import use_rng


class WorkerInfo:
    """Facts about the current DataLoader worker: `id`, `num_workers`, `seed` and its `dataset` copy."""

    __slots__ = ("id", "num_workers", "seed", "dataset")

    def __init__(self, id: int, num_workers: int, seed: int, dataset: Any) -> None:  # noqa: A002
        self.id = id
        self.num_workers = num_workers
        self.seed = seed
        self.dataset = dataset

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, dataset={self.dataset!r})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker, its `WorkerInfo`; in the main process, None.

    Examples
    --------
    >>> loom.data.get_worker_info() is None
    True
    """
    return _worker_info


class Fetcher:
    """Turns one task (a list of indices, one index, or None for iterable datasets) into a batch."""

    def __init__(self, dataset, auto_collation: bool, collate_fn: Callable, drop_last: bool,
                 batch_size: int | None, iterable: bool) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.batch_size = batch_size
        self.iterable = iterable
        self.iterator = None
        self.ended = False
        self.getitems = getattr(dataset, "__getitems__", None) if not iterable else None

    def restart(self) -> None:
        """Start a new pass (iterable datasets make a fresh iterator)."""
        self.iterator = iter(self.dataset) if self.iterable else None
        self.ended = False

    def fetch(self, index, seed: int, batch_idx: int):
        """The batch for `index`; random transforms draw from a generator seeded by (seed, batch_idx)."""
        with use_rng(np.random.default_rng([seed, batch_idx])):
            if self.iterable:
                return self._fetch_iterable()
            if self.auto_collation:
                data = self.getitems(index) if callable(self.getitems) else [self.dataset[i] for i in index]
                return self.collate_fn(data)
            return self.collate_fn(self.dataset[index])

    def _fetch_iterable(self):
        if self.ended:
            raise StopIteration
        if self.iterator is None:
            self.restart()
        if not self.auto_collation:
            try:
                return self.collate_fn(next(self.iterator))
            except StopIteration:
                self.ended = True
                raise
        data = []
        for item in self.iterator:
            data.append(item)
            if len(data) == self.batch_size:
                break
        if not data or (self.drop_last and len(data) < self.batch_size):
            self.ended = True
            raise StopIteration
        return self.collate_fn(data)


def send(sender: _mp.Sender, message: tuple, worker_id: int) -> bool:
    """Send `message` pickled here, so an unpicklable batch becomes an error the main process sees; False: stop."""
    try:
        blob = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        err = _mp.RemoteError(f"DataLoader worker {worker_id} (pid {os.getpid()}) while pickling batch "
                              f"{message[1]} to send it to the main process")
        blob = pickle.dumps((message[0], message[1], "error", err), protocol=pickle.HIGHEST_PROTOCOL)
    return sender.send(blob)


def worker_loop(fetcher: Fetcher, index_queue, result_conn, done: _mp.Flag, base_seed: int,
                init_fn: Callable | None, worker_id: int, num_workers: int) -> None:
    """A worker: take (epoch, batch index, indices, seed) tasks, answer (epoch, batch index, kind, payload).

    kind is "ok" (payload: the batch), "error" (a RemoteError) or "end" (an iterable
    dataset's copy is exhausted; payload: the worker id). None, the `done` flag or
    the main process's exit stops the worker.
    """
    global _worker_info
    watch = _mp.ParentWatch()

    def should_stop() -> bool:
        return done.is_set() or watch.parent_gone()

    sender = _mp.Sender(result_conn, should_stop)
    try:
        seed = base_seed + worker_id
        random.seed(seed)
        np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
        from loom import _api as loom
        loom.manual_seed(seed)
        _worker_info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
        init_error = None
        if init_fn is not None:
            try:
                init_fn(worker_id)
            except Exception:
                init_error = _mp.RemoteError(f"worker_init_fn of DataLoader worker {worker_id} (pid {os.getpid()})")
        epoch = None
        while True:
            try:
                task = index_queue.get(timeout=0.5)
            except queue.Empty:
                if should_stop():
                    break
                continue
            if task is None:
                break
            task_epoch, idx, index, seed = task
            if init_error is not None:
                message: tuple = (task_epoch, idx, "error", init_error)
            else:
                if task_epoch != epoch:
                    epoch = task_epoch
                    fetcher.restart()
                try:
                    message = (task_epoch, idx, "ok", fetcher.fetch(index, seed, idx))
                except StopIteration:
                    message = (task_epoch, idx, "end", worker_id)
                except Exception:
                    message = (task_epoch, idx, "error",
                               _mp.RemoteError(f"DataLoader worker {worker_id} (pid {os.getpid()}) "
                                               f"while fetching batch {idx}"))
            sent = send(sender, message, worker_id)
            del message
            if not sent:
                break
    except KeyboardInterrupt:
        pass  # The main process sees the interrupt too and shuts the workers down.
