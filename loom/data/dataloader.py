"""DataLoader: batches from a dataset, in the main process or in worker processes, as torch.utils.data.DataLoader."""
from __future__ import annotations

import itertools
import numbers
import pickle
from typing import Any, Callable, Iterable

from loom.data import _mp
from loom.data._random import seed_from
from loom.data.collate import default_collate, default_convert
from loom.data.dataset import Dataset, IterableDataset
from loom.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from loom.data.worker import Fetcher, worker_loop
from loom.errors import LoomError, LoomTypeError, LoomValueError
from loom.tensor import Generator

_OP = "loom.data.DataLoader"


class _InfiniteConstantSampler(Sampler):
    """For iterable datasets: an endless stream of None tasks."""

    def __iter__(self):
        return itertools.repeat(None)


class DataLoader:
    """Iterate over a dataset in batches, optionally with worker processes.

    Parameters
    ----------
    dataset : Dataset or IterableDataset
        Map-style (`__getitem__`/`__len__`) or iterable.
    batch_size : int or None
        Examples per batch. Default: 1. None turns automatic batching off: each
        example is passed through `collate_fn` (default `default_convert`) alone.
    shuffle : bool, optional
        Reshuffle every epoch (a `RandomSampler`). Default: False.
    sampler, batch_sampler : Sampler or iterable, optional
        Which indices (or index lists) to fetch; exclusive with shuffle, and
        batch_sampler also with batch_size and drop_last.
    num_workers : int
        Worker processes; 0 loads in the main process. Default: 0.
    collate_fn : callable, optional
        Merges a list of examples into a batch. Default: `default_collate`.
    pin_memory : bool
        Accepted for PyTorch compatibility; loom's CPU tensors need no pinning.
    drop_last : bool
        Drop the last incomplete batch. Default: False.
    timeout : float
        With workers: raise `LoomError` if no batch arrives within this many
        seconds of asking for it. Default: 0 (no limit).
    worker_init_fn : callable, optional
        Called as `worker_init_fn(worker_id)` in each worker after seeding.
    multiprocessing_context : str or context, optional
        Start method for workers. Default: the platform's (fork on Linux).
    generator : loom.Generator or numpy.random.Generator, optional
        Source of the shuffling order and of the workers' base seed.
    prefetch_factor : int, optional
        Batches in flight per worker (at most `prefetch_factor * num_workers`
        outstanding). Default: 2 with workers; must stay None without them.
    persistent_workers : bool
        Keep the workers alive between epochs. Default: False.
    in_order : bool
        Return batches in sampler order (the same order as `num_workers=0`).
        Default: True; False returns them as workers finish.
    seed : int, optional
        loom's shorthand for `generator=loom.Generator(seed)`.

    Notes
    -----
    Randomness is reproducible: each epoch draws one 64-bit key from the
    generator (default: loom's, reset by `loom.manual_seed`) that seeds a NumPy
    Generator for the permutation, and one more that seeds the workers (worker
    `i` gets `seed + i` for `random`, `numpy.random` and `loom`) and the random
    transforms of `loom.data.transforms`, reseeded per batch from (that key,
    batch index). So random augmentation gives the same batches for every
    `num_workers`.

    A worker that raises makes iteration raise `LoomError` naming the worker
    and carrying the original traceback; a worker that dies (a crash, a
    signal, `os._exit`), even half-way through sending a batch, raises
    `LoomError` at once, naming its id, pid and signal or exit code. Workers
    stop when the epoch ends, when the iterator is deleted, and on errors.

    Examples
    --------
    >>> ds = loom.data.TensorDataset(loom.arange(10.0))
    >>> [b[0].tolist() for b in loom.data.DataLoader(ds, batch_size=4)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    >>> len(loom.data.DataLoader(ds, batch_size=4, drop_last=True))
    2
    """

    _frozen = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Sampler | Iterable | None = None, batch_sampler: Sampler | Iterable | None = None,
                 num_workers: int = 0, collate_fn: Callable | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable | None = None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, pin_memory_device: str = "", in_order: bool = True,
                 seed: int | None = None) -> None:
        if not isinstance(num_workers, numbers.Integral) or num_workers < 0:
            raise LoomValueError(f"{_OP}: num_workers option should be non-negative; use num_workers=0 to disable "
                                 f"multiprocessing (got {num_workers!r})")
        if timeout < 0:
            raise LoomValueError(f"{_OP}: timeout option should be non-negative (got {timeout!r})")
        if num_workers == 0 and prefetch_factor is not None:
            raise LoomValueError(f"{_OP}: prefetch_factor option could only be specified in multiprocessing; let "
                                 "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and (not isinstance(prefetch_factor, numbers.Integral) or prefetch_factor < 1):
            raise LoomValueError(f"{_OP}: prefetch_factor option should be a positive integer (got "
                                 f"{prefetch_factor!r})")
        if persistent_workers and num_workers == 0:
            raise LoomValueError(f"{_OP}: persistent_workers option needs num_workers > 0")
        if seed is not None:
            if generator is not None:
                raise LoomValueError(f"{_OP}: give either generator or seed, not both")
            generator = Generator(seed)

        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (False, None):
                raise LoomValueError(f"{_OP}: with IterableDataset: expected unspecified shuffle option, but got "
                                     f"shuffle={shuffle}")
            if sampler is not None:
                raise LoomValueError(f"{_OP}: with IterableDataset: expected unspecified sampler option, but got "
                                     f"sampler={sampler}")
            if batch_sampler is not None:
                raise LoomValueError(f"{_OP}: with IterableDataset: expected unspecified batch_sampler option, but "
                                     f"got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise LoomValueError(f"{_OP}: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise LoomValueError(f"{_OP}: batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                     "sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise LoomValueError(f"{_OP}: batch_size=None option disables auto-batching and is mutually exclusive "
                                 "with drop_last")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = int(num_workers)
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if batch_sampler is not None else default_convert)
        self._iterable = iterable
        self._iterator: _MultiProcessIter | None = None
        self._initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_initialized", False) and name in self._frozen:
            raise LoomValueError(f"{_OP}: {name} attribute should not be set after DataLoader is initialized")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _fetcher(self) -> Fetcher:
        return Fetcher(self.dataset, self._auto_collation, self.collate_fn, self.drop_last, self.batch_size,
                       self._iterable)

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self.persistent_workers:
            if self._iterator is None or self._iterator._closed:
                self._iterator = _MultiProcessIter(self)
            else:
                self._iterator._reset()
            return self._iterator
        return _MultiProcessIter(self)

    def __len__(self) -> int:
        if self._iterable:
            try:
                n = len(self.dataset)  # type: ignore[arg-type]
            except TypeError:
                raise LoomTypeError(f"{_OP}: the IterableDataset {type(self.dataset).__name__} has no __len__, so the "
                                    "loader has no length") from None
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)  # type: ignore[arg-type]

    def __del__(self) -> None:
        it = self.__dict__.get("_iterator")
        if it is not None:
            it._shutdown()


class _Options:
    """What a worker-backed iterator needs from its DataLoader."""

    def __init__(self, loader: DataLoader) -> None:
        self.index_sampler = loader._index_sampler
        self.generator = loader.generator
        self.prefetch_factor = loader.prefetch_factor
        self.timeout = loader.timeout
        self.persistent_workers = loader.persistent_workers
        self.in_order = loader.in_order
        self.length = _length(loader)


def _length(loader: DataLoader) -> int | None:
    """The loader's number of batches, or None where it has none (an IterableDataset without __len__)."""
    try:
        return len(loader)
    except TypeError:
        return None


def _iter_len(length: int | None) -> int:
    if length is None:
        raise LoomTypeError(f"{_OP}: this iterator's IterableDataset has no __len__, so the iterator has no length")
    return length


class _SingleProcessIter:
    """Batches fetched in the main process."""

    def __init__(self, loader: DataLoader) -> None:
        self._seed = seed_from(loader.generator, _OP)
        self._sampler_iter = iter(loader._index_sampler)
        self._fetcher = loader._fetcher()
        self._idx = 0
        self._length = _length(loader)

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return _iter_len(self._length)

    def __next__(self):
        index = next(self._sampler_iter)
        data = self._fetcher.fetch(index, self._seed, self._idx)
        self._idx += 1
        return data


class _MultiProcessIter:
    """Batches fetched by worker processes and returned in sampler order.

    Each worker has its own index queue and answers through its own pipe
    (`_mp.Inbox`), so a worker killed half-way through a batch can neither
    block the main process nor corrupt another worker's messages. Task i goes
    to worker i mod num_workers (skipping workers whose iterable copy is
    exhausted); results arriving early wait in `_task_info` until their turn.
    """

    def __init__(self, loader: DataLoader) -> None:
        # The settings, not the loader: a loader holding its persistent iterator must not form a cycle with it.
        self._opts = _Options(loader)
        self._closed = False
        self._workers: list = []
        self._index_queues: list = []
        n = loader.num_workers
        ctx = _mp.context(loader.multiprocessing_context)
        self._inbox = _mp.Inbox()
        self._done = _mp.Flag(ctx)
        self._epoch = -1
        self._seed = seed_from(loader.generator, _OP)
        try:
            for wid in range(n):
                q = ctx.Queue()
                self._index_queues.append(q)
                result_conn, worker_conn = _mp.pipe(ctx)
                self._inbox.add(result_conn)
                w = ctx.Process(target=worker_loop, daemon=True,
                                args=(loader._fetcher(), q, worker_conn, self._done, self._seed,
                                      loader.worker_init_fn, wid, n))
                try:
                    w.start()
                finally:
                    worker_conn.close()  # The worker holds the only writing end: its pipe ends when it does.
                self._workers.append(w)
        except BaseException:
            self._shutdown()
            raise
        self._reset(first=True)

    def __len__(self) -> int:
        return _iter_len(self._opts.length)

    def _reset(self, first: bool = False) -> None:
        """Start an epoch: a fresh sampler pass and the first prefetch_factor * num_workers tasks."""
        if not first:
            self._seed = seed_from(self._opts.generator, _OP)
        self._epoch += 1
        self._sampler_iter = iter(self._opts.index_sampler)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info: dict[int, list] = {}  # idx -> [worker id] or [worker id, message] or [worker id, None, done]
        self._outstanding = 0
        self._active = [True] * len(self._workers)
        self._cycle = itertools.cycle(range(len(self._workers)))
        for _ in range(self._opts.prefetch_factor * len(self._workers)):
            self._try_put_index()

    def __iter__(self):
        return self

    def _try_put_index(self) -> None:
        if self._outstanding >= self._opts.prefetch_factor * len(self._workers):
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(len(self._workers)):
            wid = next(self._cycle)
            if self._active[wid]:
                break
        else:
            return
        self._index_queues[wid].put((self._epoch, self._send_idx, index, self._seed))
        self._task_info[self._send_idx] = [wid]
        self._outstanding += 1
        self._send_idx += 1

    def _check_workers(self) -> None:
        dead = [(wid, w) for wid, w in enumerate(self._workers) if not w.is_alive()]
        if dead:
            self._shutdown(grace=0.2)
            what = "; ".join(_mp.describe_exit(f"DataLoader worker {wid}", w) for wid, w in dead)
            raise LoomError(f"{_OP}: {what}, while batch {self._rcvd_idx} was awaited. A worker exited "
                            "unexpectedly while loading data (for example a crash, os._exit, or a signal such as "
                            "SIGKILL from the out-of-memory killer); check the dataset's __getitem__ / __iter__ "
                            "and the system log")

    def _on_timeout(self) -> None:
        self._shutdown(grace=0.2)
        raise LoomError(f"{_OP}: timed out after {self._opts.timeout} seconds waiting for batch "
                        f"{self._rcvd_idx} from the workers")

    def _get(self, deadline: float | None) -> tuple:
        blob = self._inbox.get(self._workers, self._check_workers, deadline, self._on_timeout)
        return pickle.loads(blob)

    def __next__(self):
        if self._closed:
            raise StopIteration
        deadline = _mp.deadline(self._opts.timeout)  # For this batch, however many messages come first.
        while True:
            # Skip tasks that will never be answered (exhausted iterable workers) or were already returned.
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or (len(info) == 1 and self._active[info[0]]):
                    break
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._opts.persistent_workers:
                    self._shutdown()
                raise StopIteration
            info = self._task_info[self._rcvd_idx]
            if len(info) == 2:
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._process(info[1])
            epoch, idx, kind, payload = self._get(deadline)
            if epoch != self._epoch:
                continue  # A late answer from an epoch the user left early (persistent workers).
            self._outstanding -= 1
            if kind == "end":
                self._active[payload] = False
                if idx >= self._rcvd_idx:
                    self._task_info[idx] = [payload, None, True]
                self._try_put_index()
                continue
            if idx == self._rcvd_idx:
                del self._task_info[idx]
                self._rcvd_idx += 1
                return self._process((kind, payload))
            if not self._opts.in_order:
                self._task_info[idx] = [self._task_info[idx][0], None, True]
                return self._process((kind, payload))
            self._task_info[idx].append((kind, payload))

    def _process(self, message: tuple):
        kind, payload = message
        self._try_put_index()
        if kind == "error":
            self._shutdown(grace=0.2)
            payload.reraise(_OP)
        return payload

    def _shutdown(self, grace: float = 1.0) -> None:
        """Stop the workers: ask them to exit, wait up to `grace` seconds, then terminate the rest."""
        if self._closed:
            return
        self._closed = True
        try:
            self._done.set()
            for q in self._index_queues:
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
            _mp.stop(self._workers, grace)
        finally:
            for q in self._index_queues:
                _mp.close_queue(q)
            self._inbox.close()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:
            pass  # Interpreter shutdown: multiprocessing stops daemon workers itself.
