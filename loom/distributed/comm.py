"""The communication layer on NumPy arrays: what the collective primitives of the IR call when they run.

Every function takes and returns NumPy arrays and names its group by the
tuple of its global ranks (the ``ranks`` attribute of a collective node), so
a graph node needs no live object. The group must exist on this process: the
default group, or one made by `loom.distributed.new_group` with the same
ranks. A group of one rank needs no MPI at all (every collective is then the
identity, or its one-rank meaning), so a program written for N ranks also
runs, and traces, in one plain process.

Blocking calls: a graph runs its collectives one after another in its
topological order, which is the same on every rank for the same program.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from loom.distributed.process_group import _ON_DESTROY, DistributedError, ProcessGroup, _mpi, _state, own
from loom.errors import fmt_shape

REDUCTIONS = ("sum", "avg")
# Messages a one-rank group sends to itself, by tag, oldest first (MPI's order for one sender and tag).
_SELF: dict[int, list[np.ndarray]] = {}
_ON_DESTROY.append(_SELF.clear)


def group_of(ranks: Sequence[int], op: str) -> ProcessGroup | None:
    """The process group whose global ranks are `ranks`; None for a one-rank group run without MPI.

    Raises naming `op` when this process is not in the group or no such
    group was created here.
    """
    ranks = tuple(int(r) for r in ranks)
    world = _state["world"]
    if world is None:
        if ranks == (0,):
            return None
        raise DistributedError(f"loom.distributed.{op}: the collective runs on ranks {list(ranks)} but the default "
                               "process group is not initialised; call loom.distributed.init_process_group() first "
                               "(launch with `python -m loom.distributed.run --nproc N script.py`)")
    me = world.rank()
    if me not in ranks:
        raise DistributedError(f"loom.distributed.{op}: rank {me} runs a collective of the group {list(ranks)}, "
                               "which it is not a member of")
    if len(ranks) == 1:
        return None
    for g in [world] + list(_state["groups"]):
        if tuple(g._ranks) == ranks and g._comm is not None:
            return g
    raise DistributedError(f"loom.distributed.{op}: no process group with global ranks {list(ranks)} exists on "
                           f"rank {me}; create it with loom.distributed.new_group({list(ranks)}) on every rank "
                           "before running the collective")


def agree(g: ProcessGroup, mine: tuple, op: str, what: str, part: str = "shape and dtype",
          problem: BaseException | None = None) -> None:
    """Check that every rank of `g` passed the same `mine` (a (shape or None, dtype name) pair) to `op`, so a
    mismatch is an error naming each rank's, on every rank, not a hang or a silent wrong result.

    `problem` is this rank's own error in its arguments (found before any data moved): then every rank raises,
    this one its `problem`, the others an error naming this rank's, so no rank goes on to a collective that
    another has abandoned (which would pair it with the next collective of that rank).

    It costs one 24-byte MAX all-reduce of a fingerprint (no pickling); only a mismatch pays for gathering every
    rank's description. It cannot ride in the collective's own message: MPI needs the counts to agree before
    the data moves (a longer message is a truncation error on one rank and a hang or garbage on the others).
    """
    h = zlib.crc32(repr(mine).encode())
    both = np.array([h, -h, problem is not None], np.int64)
    g._comm.Allreduce(_mpi().IN_PLACE, both, _mpi().MAX)
    if both[2] == 0 and both[0] == -both[1]:   # The largest fingerprint is the smallest: every rank's is the same.
        return
    every = g._comm.allgather((mine, None if problem is None else f"{type(problem).__name__}: {problem}"))
    if problem is not None:
        raise problem
    bad = [(g._ranks[k], said) for k, (_, said) in enumerate(every) if said is not None]
    if bad:
        raise DistributedError(f"loom.distributed.{op}: rank {bad[0][0]} passed arguments it could not use, so no "
                               f"rank of the group runs the collective; rank {bad[0][0]} raised {bad[0][1]}")
    said = ", ".join(f"rank {g._ranks[k]}: {d}" + ("" if s is None else fmt_shape(s))
                     for k, ((s, d), _) in enumerate(every))
    raise DistributedError(f"loom.distributed.{op}: the ranks passed {what}s that differ ({said}); every rank of "
                           f"the group must pass a {what} of the same {part}")


def _same(g: ProcessGroup, a: np.ndarray, op: str) -> None:
    agree(g, (tuple(a.shape), a.dtype.name), op, "tensor")


def _buf(a: np.ndarray) -> np.ndarray:
    """A private C-contiguous copy MPI may write into (bool travels as bytes)."""
    a = np.array(a, order="C", copy=True)
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def _back(buf: np.ndarray, like: np.dtype) -> np.ndarray:
    return buf.view(np.bool_) if like == np.bool_ else buf


def _average(a: np.ndarray, op: str, n: int) -> np.ndarray:
    if op != "avg":
        return a
    return (a / n).astype(a.dtype) if a.dtype.kind in "fc" else (a // n).astype(a.dtype)


def channel(ranks: Sequence[int], op: str = "channel") -> ProcessGroup | None:
    """A private communicator over the group `ranks` (collective: every member calls it, in the same order).

    Collectives on different channels may run at the same time from different
    threads (each channel sees its own calls in order), which lets actor tasks
    overlap their communication; None for a one-rank group. It belongs to the group it was made from:
    `loom.distributed.destroy_process_group` of that group (or of all) frees it.
    """
    g = group_of(ranks, op)
    if g is None:
        return None
    chan = ProcessGroup(own(g._comm.Dup()), g._ranks, g._backend)
    chan._parent = g
    g._children.append(chan)
    return chan


def all_reduce(a: np.ndarray, op: str, ranks: Sequence[int], group: ProcessGroup | None = None) -> np.ndarray:
    """The elementwise sum (``op="sum"``) or mean (``"avg"``) of every rank's `a` (on `group` if given)."""
    g = group if group is not None else group_of(ranks, "all_reduce")
    if g is None:
        return np.array(a, copy=True)
    _same(g, a, "all_reduce")
    buf = _buf(a)
    g._comm.Allreduce(_mpi().IN_PLACE, buf, _mpi().SUM)
    return _average(buf, op, g.size())


def all_gather(a: np.ndarray, ranks: Sequence[int]) -> np.ndarray:
    """Every rank's `a`, stacked along a new leading axis in group-rank order."""
    g = group_of(ranks, "all_gather")
    if g is None:
        return np.array(a, copy=True)[None]
    _same(g, a, "all_gather")
    send = _buf(a)
    recv = np.empty((g.size(),) + send.shape, send.dtype)
    g._comm.Allgather(send, recv)
    return _back(recv, a.dtype)


def reduce_scatter(a: np.ndarray, op: str, ranks: Sequence[int]) -> np.ndarray:
    """Row r of the sum (or mean) over ranks of `a` (shape ``(n, ...)``), on group rank r."""
    g = group_of(ranks, "reduce_scatter")
    if g is None:
        return np.array(a[0], copy=True)
    _same(g, a, "reduce_scatter")
    send = _buf(a)
    recv = np.empty(send.shape[1:], send.dtype)
    g._comm.Reduce_scatter_block(send, recv, _mpi().SUM)
    return _average(recv, op, g.size())


def broadcast(a: np.ndarray, src: int, ranks: Sequence[int]) -> np.ndarray:
    """Global rank `src`'s `a`, on every rank."""
    g = group_of(ranks, "broadcast")
    if g is None:
        return np.array(a, copy=True)
    _same(g, a, "broadcast")
    buf = _buf(a)
    g._comm.Bcast(buf, root=g.group_rank(src, "broadcast"))
    return _back(buf, a.dtype)


def reduce(a: np.ndarray, dst: int, ranks: Sequence[int]) -> np.ndarray:
    """The sum over ranks of `a` on global rank `dst`; zeros on the other ranks."""
    g = group_of(ranks, "reduce")
    if g is None:
        return np.array(a, copy=True)
    root = g.group_rank(dst, "reduce")
    _same(g, a, "reduce")
    send = _buf(a)
    recv = np.zeros_like(send)
    g._comm.Reduce(send, recv if g.rank() == root else None, _mpi().SUM, root=root)
    return recv


def all_to_all(a: np.ndarray, ranks: Sequence[int]) -> np.ndarray:
    """Row r of `a` (shape ``(n, ...)``) goes to group rank r; row r of the result came from group rank r."""
    g = group_of(ranks, "all_to_all")
    if g is None:
        return np.array(a, copy=True)
    _same(g, a, "all_to_all")
    send = _buf(a)
    recv = np.empty_like(send)
    g._comm.Alltoall(send, recv)
    return _back(recv, a.dtype)


def send(a: np.ndarray, dst: int, tag: int, ranks: Sequence[int]) -> None:
    """Send `a` to global rank `dst` with `tag`; returns once the buffer may be reused."""
    g = group_of(ranks, "send")
    if g is None:  # A one-rank group sends to itself.
        _SELF.setdefault(int(tag), []).append(np.array(a, copy=True))
        return
    g._comm.Send(_buf(a), dest=g.group_rank(dst, "send"), tag=tag)


def recv(shape: tuple, dtype: np.dtype, src: int, tag: int, ranks: Sequence[int]) -> np.ndarray:
    """Receive an array of `shape` and `dtype` from global rank `src` with `tag`."""
    g = group_of(ranks, "recv")
    dtype = np.dtype(dtype)
    if g is None:
        queue = _SELF.get(int(tag))
        if not queue:
            raise DistributedError(f"loom.distributed.recv: the one-rank group {list(ranks)} has sent itself no "
                                   f"message with tag {tag}; a receive would wait forever")
        got = queue.pop(0)
        if got.shape != tuple(shape):
            raise DistributedError(f"loom.distributed.recv: expected shape {tuple(shape)} with tag {tag}, the "
                                   f"message has shape {got.shape}")
        return got.astype(dtype, copy=False)
    buf = np.empty(tuple(shape), np.uint8 if dtype == np.bool_ else dtype)
    MPI = _mpi()
    status = MPI.Status()
    nbytes: int | None
    try:
        g._comm.Recv(buf, source=g.group_rank(src, "recv"), tag=tag, status=status)
        nbytes = status.Get_count(MPI.BYTE)
    except MPI.Exception as e:
        if e.Get_error_class() != MPI.ERR_TRUNCATE:
            raise
        nbytes = None
    if nbytes != buf.nbytes:   # A shorter message would leave part of the buffer stale.
        size = "more" if nbytes is None else f"{nbytes}"
        raise DistributedError(f"loom.distributed.recv: the message from rank {src} (tag {tag}) has {size} bytes, "
                               f"the receiving {dtype.name}{fmt_shape(tuple(shape))} holds {buf.nbytes}; the sender "
                               "and receiver must use tensors of the same shape and dtype")
    return _back(buf, dtype)
