"""Eager memory budget: evict computed buffers and recompute them when read (DTR).

Dynamic Tensor Rematerialization (Kirisame et al., 2021; MegEngine's DTR)
for the reference eager path (`loom.runtime.reference.realize`). While a
`Pool` is active, every value that path computes keeps its recipe (op,
inputs, attrs). When the bytes of live computed buffers exceed the budget,
the pool evicts the buffer with the lowest

    cost / (bytes * staleness)

where `cost` is the measured time to compute it plus that of its evicted
inputs (which a recompute would need too) and `staleness` the time since it
was last read. Eviction turns the node back into a pending node with its
recipe, so any later read (a consumer in `realize`, ``.numpy()``, printing)
computes it again through the ordinary lazy path: the same primitive on the
same input values, so the same bits.

Not evicted: values being read right now, views (they own no memory),
buffers made outside the pool (user data, loaded weights), matmuls computed
transposed. A recipe holds its inputs; to keep that history bounded, a value
still resident after `WINDOW` realize calls drops its recipe and stays.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import time
import weakref
from typing import Iterator

import numpy as np

from loom.ir.node import Node

WINDOW = 4  # Realize calls a resident value stays evictable.


class _Record:
    __slots__ = ("node", "op", "inputs", "attrs", "depth", "nbytes", "cost", "last", "born", "evicted")

    def __init__(self, node: Node, op, inputs, attrs, depth, nbytes, cost, now, born):
        self.node = weakref.ref(node)
        self.op, self.inputs, self.attrs, self.depth = op, inputs, attrs, depth
        self.nbytes, self.cost, self.last, self.born = nbytes, cost, now, born
        self.evicted = False


class Pool:
    """The live computed buffers under one eager memory budget, and the eviction policy.

    Parameters
    ----------
    budget : int
        Bytes of live computed buffers above which the pool evicts.

    Attributes
    ----------
    live_bytes, peak_bytes : int
        Bytes of resident buffers the pool tracks, now and at most so far.
    evictions, recomputes : int
        Buffers evicted, and evicted buffers computed again.
    """

    def __init__(self, budget: int) -> None:
        self.budget = int(budget)
        self.live_bytes = 0
        self.peak_bytes = 0
        self.evictions = 0
        self.recomputes = 0
        self.calls = 0
        self._records: dict[int, _Record] = {}  # Node id -> record.
        self._pinned: dict[int, int] = {}  # Node id -> reads in progress (nested recomputes pin too).
        self._clock = itertools.count()

    # ------------------------------------------------------------ hooks from realize
    def begin(self) -> None:
        """A realize call starts: release recipes older than `WINDOW` calls (resident values only)."""
        self.calls += 1
        for key, rec in list(self._records.items()):
            if not rec.evicted and self.calls - rec.born > WINDOW:
                self._drop(key)

    def before(self, node: Node) -> None:
        """`node` is about to be computed: its inputs are read now (pinned; evicted ones computed again)."""
        now = next(self._clock)
        for i in node.inputs:
            rec = self._records.get(i.id)
            if rec is not None:
                rec.last = now
            self._pinned[i.id] = self._pinned.get(i.id, 0) + 1

    def after(self, node: Node, op: str, inputs, attrs, depth: int, out: np.ndarray, seconds: float,
              evictable: bool) -> None:
        """`node` was computed into `out`: track it (with its recipe when `evictable`), then fit the budget."""
        for i in inputs:
            left = self._pinned.get(i.id, 0) - 1
            if left > 0:
                self._pinned[i.id] = left
            else:
                self._pinned.pop(i.id, None)
        rec = self._records.get(node.id)
        if rec is not None and rec.evicted:  # Computed again after an eviction.
            rec.evicted = False
            self.recomputes += 1
            self.live_bytes += rec.nbytes
        elif evictable and out.base is None and out.nbytes:
            rec = _Record(node, op, inputs, attrs, depth, out.nbytes, seconds, next(self._clock), self.calls)
            key = node.id
            self._records[key] = rec
            weakref.finalize(node, self._forget, key)
            self.live_bytes += rec.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self._fit(keep=node.id)

    # ------------------------------------------------------------ policy
    def _score(self, rec: _Record, now: int) -> float:
        cost = rec.cost
        for i in rec.inputs:
            r = self._records.get(i.id)
            if r is not None and r.evicted:
                cost += r.cost
        return cost / (rec.nbytes * max(now - rec.last, 1))

    def _fit(self, keep: int) -> None:
        if self.live_bytes <= self.budget:
            return
        now = next(self._clock)
        ranked = sorted((self._score(r, now), k) for k, r in self._records.items()
                        if not r.evicted and k != keep and k not in self._pinned)
        for _, key in ranked:
            if self.live_bytes <= self.budget:
                break
            self._evict(key)

    def known(self, node: Node) -> bool:
        """Whether `node` was computed under this pool (a recompute must take the same path)."""
        return node.id in self._records

    def _evict(self, key: int) -> None:
        rec = self._records[key]
        node = rec.node()
        # Only a buffer nothing else holds (no view of it, no user array) frees memory when dropped.
        if node is None or node.buffer is None or sys.getrefcount(node.buffer) > 2:
            return
        node.buffer = None
        node.op, node.inputs, node.attrs, node.depth = rec.op, rec.inputs, rec.attrs, rec.depth
        rec.evicted = True
        self.live_bytes -= rec.nbytes
        self.evictions += 1

    def _drop(self, key: int) -> None:
        rec = self._records.pop(key, None)
        if rec is not None and not rec.evicted:
            self.live_bytes -= rec.nbytes

    def _forget(self, key: int) -> None:
        self._drop(key)

    def close(self) -> None:
        """Stop tracking. An evicted value stays a pending node with its recipe: read later, it is
        computed again on the ordinary path."""
        global ACTIVE
        if ACTIVE is self:
            ACTIVE = None
        self._records.clear()
        self._pinned.clear()
        self.live_bytes = 0


ACTIVE: Pool | None = None


def set_budget(budget: int | None) -> Pool | None:
    """Start a pool for `budget` bytes (None: stop the current one, bringing evicted values back)."""
    global ACTIVE
    if ACTIVE is not None:
        ACTIVE.close()
    ACTIVE = Pool(budget) if budget is not None else None
    return ACTIVE


@contextlib.contextmanager
def budget(nbytes: int) -> Iterator[Pool]:
    """A pool for the block; the previous one (if any) is stopped and not restored."""
    pool = set_budget(nbytes)
    try:
        yield pool
    finally:
        if ACTIVE is pool:
            set_budget(None)


def timer() -> float:
    return time.perf_counter()
