"""A streaming input pipeline over record shards: reader -> transformers -> batcher, in separate processes.

    reader process ──in_q──► transformer processes ──one pipe each──► batcher (the iterating process)

The reader walks the epoch's example order (a pure function of the seed and
the epoch) and sends raw records; transformers check CRCs, decode and apply
the transform; the batcher puts examples back in sequence order and collates
batches. in_q is bounded, and the reader also holds one credit per example in
flight (returned when the batcher consumes it), so memory stays bounded
whichever stage is slow. The batcher reads the transformers' pipes without
ever blocking (`_mp.Inbox`), so a process killed half-way through sending an
example is reported, not waited for.
"""
from __future__ import annotations

import collections
import numbers
import os
import pickle
import queue
from typing import Callable, Iterator

import numpy as np

from loom.data import _mp
from loom.data._random import use_rng
from loom.data.collate import default_collate
from loom.data.records import RecordReader, check_record, count_records, decode_example, resolve_files
from loom.errors import LoomError, LoomValueError

_OP = "loom.data.RecordPipeline"
_SHUFFLE_MODES = {False: (False, False), True: (True, True), "chunks": (True, False), "examples": (False, True),
                  "both": (True, True), "none": (False, False)}


def example_order(counts: list[int], epoch: int, seed: int, shuffle_chunks: bool, shuffle_examples: bool,
                  chunk_size: int, shuffle_buffer: int) -> Iterator[tuple[int, int]]:
    """The epoch's (shard, record) sequence: a pure function of its arguments.

    Shards are cut into chunks of `chunk_size` consecutive records; with chunk
    shuffling the (shard, chunk) units are permuted by a NumPy Generator seeded
    with (seed, epoch, 0). With example shuffling the unit stream then passes
    through a shuffle buffer of `shuffle_buffer` slots driven by a Generator
    seeded with (seed, epoch, 1): once full, each incoming example replaces a
    uniformly chosen slot, whose old occupant is emitted; at the end the buffer
    is emitted in a random permutation.
    """
    units = [(s, lo, min(lo + chunk_size, n)) for s, n in enumerate(counts) for lo in range(0, n, chunk_size)]
    if shuffle_chunks:
        perm = np.random.default_rng([seed, epoch, 0]).permutation(len(units))
        units = [units[i] for i in perm]
    stream = ((s, r) for s, lo, hi in units for r in range(lo, hi))
    if shuffle_examples and shuffle_buffer > 1:
        return _shuffle_buffer(stream, shuffle_buffer, np.random.default_rng([seed, epoch, 1]))
    return stream


def _shuffle_buffer(stream, size: int, rng: np.random.Generator) -> Iterator:
    buf: list = []
    draws: list[int] = []
    for item in stream:
        if len(buf) < size:
            buf.append(item)
            continue
        if not draws:
            draws = rng.integers(0, size, 1024).tolist()[::-1]
        j = draws.pop()
        yield buf[j]
        buf[j] = item
    for j in rng.permutation(len(buf)).tolist():
        yield buf[j]


class _Readers:
    """Open RecordReaders by shard, at most `limit` at once (least recently used closed first)."""

    def __init__(self, files: list[str], verify: bool, limit: int = 32) -> None:
        self.files, self.verify, self.limit = files, verify, limit
        self.open: collections.OrderedDict[int, RecordReader] = collections.OrderedDict()

    def __call__(self, shard: int) -> RecordReader:
        r = self.open.pop(shard, None)
        if r is None:
            r = RecordReader(self.files[shard], self.verify)
            if len(self.open) >= self.limit:
                self.open.popitem(last=False)[1].close()
        self.open[shard] = r
        return r

    def close(self) -> None:
        for r in self.open.values():
            r.close()
        self.open.clear()


def _transform_one(files, verify, transform, seed, epoch, item):
    """Check, decode and transform one raw record; randomness is seeded by (seed, epoch, 2, sequence number)."""
    seq, shard, rec, offset, raw = item
    example = decode_example(check_record(files[shard], rec, offset, raw, verify))
    if transform is None:
        return example
    with use_rng(np.random.default_rng([seed, epoch, 2, seq])):
        return transform(example)


def _put(q, item, stop) -> bool:
    """Put unless told to stop; False if stopped."""
    while True:
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            if stop.is_set():
                return False


def _reader_loop(files, verify, order_args, start, num_workers, in_q, out_conn, credits, stop, reader_done) -> None:
    watch = _mp.ParentWatch()
    readers = _Readers(files, verify)
    out = _mp.Sender(out_conn, lambda: stop.is_set() or watch.parent_gone())
    try:
        for seq, (shard, rec) in enumerate(example_order(*order_args)):
            if seq < start:
                continue
            while not credits.acquire(timeout=0.1):
                if stop.is_set() or watch.parent_gone():
                    return
            offset, raw = readers(shard).read_record(rec)
            if not _put(in_q, (seq, shard, rec, offset, raw), stop):
                return
        for _ in range(num_workers):
            if not _put(in_q, None, stop):
                return
        reader_done.set()
    except KeyboardInterrupt:
        pass
    except Exception:
        err = _mp.RemoteError(f"the record reader process (pid {os.getpid()})")
        out.send(pickle.dumps(("error", -1, err)))
    finally:
        readers.close()
        if stop.is_set():
            in_q.cancel_join_thread()


def _transform_loop(wid, files, verify, transform, seed, epoch, in_q, out_conn, stop) -> None:
    watch = _mp.ParentWatch()
    out = _mp.Sender(out_conn, lambda: stop.is_set() or watch.parent_gone())
    try:
        while True:
            try:
                item = in_q.get(timeout=0.1)
            except queue.Empty:
                if stop.is_set() or watch.parent_gone():
                    break
                continue
            if item is None:
                break
            try:
                blob = pickle.dumps(("ok", item[0], _transform_one(files, verify, transform, seed, epoch, item)),
                                    protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                err = _mp.RemoteError(f"transform worker {wid} (pid {os.getpid()}) on example {item[0]} of the "
                                      f"epoch ({files[item[1]]}, record {item[2]})")
                blob = pickle.dumps(("error", item[0], err))
            if not out.send(blob):
                break
    except KeyboardInterrupt:
        pass


class RecordPipeline:
    """Stream batches from record shards through reader, transformer and batcher processes.

    Parameters
    ----------
    files : str or list of str
        Shards: paths, a glob pattern, or the prefix given to `RecordWriter`.
    transform : callable, optional
        Applied to each decoded example (a dict of fields) in a transformer
        process; must be picklable under non-fork start methods. Random
        transforms from `loom.data.transforms` draw from a generator seeded by
        (seed, epoch, example's sequence number), so results do not depend on
        which process did the work.
    batch_size : int
        Examples per batch. Default: 1.
    collate_fn : callable
        Turns a list of examples into a batch. Default: `default_collate`.
    shuffle : bool or {"chunks", "examples"}
        True shuffles chunk order and passes examples through the shuffle
        buffer; "chunks" or "examples" does only one of them. Default: False.
    seed : int
        Seed of every random choice (with the epoch). Default: 0.
    chunk_size : int
        Consecutive records per shuffling unit. Default: 256.
    shuffle_buffer : int
        Slots of the example shuffle buffer. Default: 1024.
    num_transform_workers : int
        Transformer processes; 0 runs reading and transforming in the
        iterating process (same batches, no processes). Default: 2.
    queue_size : int
        Capacity of the reader's queue, and the most examples in flight. Default: 64.
    drop_last : bool
        Drop the epoch's last incomplete batch. Default: False.
    start_position : dict, optional
        A `position()` to resume from.
    verify : bool
        Check record CRCs. Default: True.
    timeout : float
        Raise `LoomError` if the next example does not arrive within this many
        seconds of asking for it (0: no limit).
    multiprocessing_context : str or context, optional
        Start method for the processes. Default: the platform's.

    Notes
    -----
    Each `for` loop over the pipeline runs the rest of the current epoch and
    then moves to the next (`position()` becomes {"epoch": e + 1, "examples": 0}).
    The order is deterministic for a (seed, epoch), whatever the timing of the
    processes: examples carry their sequence number and are reordered before
    batching. A transform that raises, a corrupt record and a process that dies
    (even half-way through sending an example) raise `LoomError` in the
    iterating process, naming the process, its pid and the signal or exit
    code; the processes are then stopped.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "d")
    >>> with loom.data.RecordWriter(p, num_shards=2) as w:
    ...     for i in range(10):
    ...         w.write({"x": np.float32(i)})
    >>> pipe = loom.data.RecordPipeline(p, batch_size=4, shuffle=True, chunk_size=2, shuffle_buffer=4)
    >>> first = next(iter(pipe))
    >>> pos = pipe.position(); pos
    {'epoch': 0, 'examples': 4}
    >>> rest = [b["x"].tolist() for b in loom.data.RecordPipeline(p, batch_size=4, shuffle=True, chunk_size=2,
    ...                                                          shuffle_buffer=4, start_position=pos)]
    >>> len(rest)
    2
    """

    def __init__(self, files, transform: Callable | None = None, batch_size: int = 1,
                 collate_fn: Callable | None = default_collate, shuffle: bool | str = False, seed: int = 0,
                 chunk_size: int = 256, shuffle_buffer: int = 1024, num_transform_workers: int = 2,
                 queue_size: int = 64, drop_last: bool = False, start_position: dict | None = None,
                 verify: bool = True, timeout: float = 0, multiprocessing_context=None) -> None:
        for name, v, low in (("batch_size", batch_size, 1), ("chunk_size", chunk_size, 1),
                             ("shuffle_buffer", shuffle_buffer, 0), ("num_transform_workers", num_transform_workers, 0),
                             ("queue_size", queue_size, 1), ("seed", seed, 0)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                raise LoomValueError(f"{_OP}: {name} should be an integer >= {low}, got {v!r}")
        if shuffle not in _SHUFFLE_MODES:
            raise LoomValueError(f"{_OP}: shuffle should be True, False, 'chunks' or 'examples', got {shuffle!r}")
        if timeout < 0:
            raise LoomValueError(f"{_OP}: timeout should be non-negative, got {timeout!r}")
        self.files = resolve_files(files)
        self.counts = count_records(self.files)
        self.transform = transform
        self.batch_size = int(batch_size)
        self.collate_fn = collate_fn if collate_fn is not None else (lambda batch: batch)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.chunk_size = int(chunk_size)
        self.shuffle_buffer = int(shuffle_buffer)
        self.num_transform_workers = int(num_transform_workers)
        self.queue_size = int(queue_size)
        self.drop_last = drop_last
        self.verify = verify
        self.timeout = timeout
        self._ctx = _mp.context(multiprocessing_context)
        self.epoch, self.examples = 0, 0
        if start_position is not None:
            self._load_position(start_position)

    # ---------------------------------------------------------------- position
    @property
    def num_examples(self) -> int:
        """Examples per epoch."""
        return sum(self.counts)

    def __len__(self) -> int:
        n, b = self.num_examples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def position(self) -> dict:
        """Where the stream stands: {"epoch": int, "examples": examples of that epoch already returned in batches}."""
        return {"epoch": self.epoch, "examples": self.examples}

    def _load_position(self, pos) -> None:
        if not isinstance(pos, dict) or not {"epoch", "examples"} <= set(pos):
            raise LoomValueError(f"{_OP}: start_position should be a dict from position() with keys 'epoch' and "
                                 f"'examples', got {pos!r}")
        epoch, examples = pos["epoch"], pos["examples"]
        if not (isinstance(epoch, numbers.Integral) and isinstance(examples, numbers.Integral)) or epoch < 0 \
                or not 0 <= examples <= self.num_examples:
            raise LoomValueError(f"{_OP}: start_position {pos!r} is out of range for {self.num_examples} examples per "
                                 "epoch")
        self.epoch, self.examples = int(epoch), int(examples)

    def set_epoch(self, epoch: int) -> None:
        """Make the next loop run epoch `epoch` (from its start, unless already positioned inside it)."""
        if not isinstance(epoch, numbers.Integral) or epoch < 0:
            raise LoomValueError(f"{_OP}.set_epoch: epoch should be a non-negative integer, got {epoch!r}")
        if epoch != self.epoch:
            self.epoch, self.examples = int(epoch), 0

    def order(self, epoch: int | None = None) -> list[tuple[int, int]]:
        """The (shard, record) order of an epoch (default: the current one)."""
        return list(example_order(*self._order_args(self.epoch if epoch is None else epoch)))

    def _order_args(self, epoch: int) -> tuple:
        chunks, examples = _SHUFFLE_MODES[self.shuffle]
        return (self.counts, epoch, self.seed, chunks, examples, self.chunk_size, self.shuffle_buffer)

    # ---------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator:
        return self._batches(self._examples_inline() if self.num_transform_workers == 0 else None)

    def _end(self) -> int:
        """The sequence number after the last example this epoch's batches use."""
        n = self.num_examples
        return n - n % self.batch_size if self.drop_last else n

    def _batches(self, inline: Iterator | None) -> Iterator:
        epoch, end = self.epoch, self._end()
        source = inline if inline is not None else _ProcessSource(self)
        try:
            batch: list = []
            seq = self.examples
            while seq < end:
                try:
                    example = next(source)
                except StopIteration:
                    break
                batch.append(example)
                seq += 1
                if len(batch) == self.batch_size or seq == end:
                    out = self.collate_fn(batch)
                    batch = []
                    self.examples = seq
                    yield out
            if self.epoch == epoch:
                self.epoch, self.examples = epoch + 1, 0
        finally:
            source.close()

    def _examples_inline(self) -> Iterator:
        readers = _Readers(self.files, self.verify)
        epoch = self.epoch
        try:
            for seq, (shard, rec) in enumerate(example_order(*self._order_args(epoch))):
                if seq < self.examples:
                    continue
                offset, raw = readers(shard).read_record(rec)
                try:
                    yield _transform_one(self.files, self.verify, self.transform, self.seed, epoch,
                                         (seq, shard, rec, offset, raw))
                except LoomError:
                    raise
                except Exception as e:
                    raise LoomError(f"{_OP}: transform raised {type(e).__name__} on example {seq} of the epoch "
                                    f"({self.files[shard]}, record {rec}): {e}") from e
        finally:
            readers.close()


class _ProcessSource:
    """The examples of one epoch, from `start`, produced by reader and transformer processes in sequence order."""

    def __init__(self, pipe: RecordPipeline) -> None:
        ctx = pipe._ctx
        self.pipe = pipe
        self.closed = False
        self.procs: list = []
        self.next_seq = pipe.examples
        self.end = pipe.num_examples
        self.pending: dict[int, object] = {}
        self.in_q = ctx.Queue(pipe.queue_size)
        self.inbox = _mp.Inbox()
        self.credits = ctx.Semaphore(pipe.queue_size)
        self.stop = _mp.Flag(ctx)
        self.reader_done = _mp.Flag(ctx)
        self.workers: list = []
        try:
            self.reader = self._start(ctx, _reader_loop, "loom-record-reader",
                                      (pipe.files, pipe.verify, pipe._order_args(pipe.epoch), pipe.examples,
                                       pipe.num_transform_workers, self.in_q), (self.credits, self.stop,
                                                                                 self.reader_done))
            for wid in range(pipe.num_transform_workers):
                self.workers.append(self._start(ctx, _transform_loop, f"loom-record-transform-{wid}",
                                                (wid, pipe.files, pipe.verify, pipe.transform, pipe.seed,
                                                 pipe.epoch, self.in_q), (self.stop,)))
        except BaseException:
            self.close()
            raise

    def _start(self, ctx, target, name: str, args: tuple, more_args: tuple):
        """Start a process running target(*args, its pipe's end, *more_args); its messages arrive in `inbox`."""
        inbox_conn, conn = _mp.pipe(ctx)
        self.inbox.add(inbox_conn)
        proc = ctx.Process(target=target, daemon=True, name=name, args=(*args, conn, *more_args))
        try:
            proc.start()
        finally:
            conn.close()  # The child holds the only writing end: its pipe ends when it does.
        self.procs.append(proc)
        return proc

    def __iter__(self):
        return self

    def __next__(self):
        if self.next_seq >= self.end or self.closed:
            self.close()
            raise StopIteration
        deadline = _mp.deadline(self.pipe.timeout)
        while self.next_seq not in self.pending:
            blob = self.inbox.get(self.procs, self._check, deadline, self._on_timeout)
            kind, seq, payload = pickle.loads(blob)
            if kind == "error":
                self.close(grace=0.2)
                payload.reraise(_OP)
            self.pending[seq] = payload
        self.credits.release()
        self.next_seq += 1
        return self.pending.pop(self.next_seq - 1)

    def _check(self) -> None:
        done = self.reader_done.is_set()
        named = [("record reader", self.reader)] + [(f"transform worker {wid}", w)
                                                      for wid, w in enumerate(self.workers)]
        dead = [_mp.describe_exit(what, p) for what, p in named if not p.is_alive() and (p.exitcode != 0 or not done)]
        if dead:
            self.close(grace=0.2)
            raise LoomError(f"{_OP}: {'; '.join(dead)}, while example {self.next_seq} of the epoch was awaited. "
                            "A pipeline process exited unexpectedly (a crash, os._exit, or a signal such as SIGKILL "
                            "from the out-of-memory killer)")
        if self.inbox.drained() and not any(p.is_alive() for p in self.procs):
            self.close()
            raise LoomError(f"{_OP}: every pipeline process has exited but example {self.next_seq} of the epoch "
                            "never arrived (a process was lost while holding it)")

    def _on_timeout(self) -> None:
        self.close(grace=0.2)
        raise LoomError(f"{_OP}: timed out after {self.pipe.timeout} seconds waiting for example {self.next_seq} "
                        "of the epoch")

    def close(self, grace: float = 1.0) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        try:
            _mp.stop(self.procs, grace)
        finally:
            _mp.close_queue(self.in_q)
            self.inbox.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # Interpreter shutdown: multiprocessing stops daemon processes itself.
