"""A static schedule that runs one native step program on a team of threads at once (the driver's ``loom_run_team``).

The sequential walk runs one record after another and parallelises inside
them (a large GEMM cut across the team, a large kernel's loop), so every
parallel record wakes the team and joins it again, and two independent
products (a layer's weight gradient and its input gradient) run one after the
other, each cut in halves too small to run at full speed. Here the whole walk
is one call, run by the caller and loom's worker threads (the driver's own
team, sleeping between walks; see docs/threads.md): each record gets an owner
thread, or all of them (a large GEMM no other product can run beside), and an
order; a thread runs its records in that order, each once the records it
depends on are done.

Dependencies come from memory: record k depends on an earlier record j when k
writes bytes j reads or writes, or reads bytes j writes (arena offsets and
extents, an output donated over an input counted as that input). A record that
may stop the walk (an index or value check, a kernel with integer division, a
sparse product) depends on every earlier record and every later one on it, so
a failed call has written nothing after its failing step, as in the
sequential walk.

A large elementwise kernel may be shared too: each thread runs one block of
its output rows (the same argument block cut as a GEMM epilogue's,
`loom.codegen.gemm.row_blocks`).

Owners and order come from list scheduling on estimated costs (multiply-adds
for GEMMs, bytes for the rest): records are taken by their longest path to
the end of the step, each placed on the thread where it can start first. A
GEMM is shared by the team unless an independent product of at least half its
size can run beside it. Kernels run on one thread each, or in row blocks when
their body only adds, multiplies, divides, compares and selects (exact in any
block), and GEMMs are cut in whole row tiles (`loom_gemm_part`), so the bits
are those of a one-thread walk whatever the schedule.
"""
from __future__ import annotations

import heapq

import numpy as np

from loom.runtime import threads

KERNEL, GEMM, COPY, PY, GATHER, SCATTER, PAD, CHECK, HGEMM, SPMM = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
_FALLIBLE = frozenset({GATHER, SCATTER, CHECK, SPMM})
_MACS_PER_US = 45000.0      # A core's float32 GEMM rate (about 90 GFLOP/s on AVX2), for the costs.
_BYTES_PER_US = 100000.0    # Bytes a kernel moves per microsecond (in cache), for the costs.
_RECORD_US = 0.7            # A record's fixed cost.
# A parallel region's start and join (a sleeping thread woken): the mlp step's sequential walk at 2 threads,
# best of 300 on the loaded 2-core machine, took about 60 us per region more than its split GEMMs' share.
_REGION_US = 30.0
_PIECE_MIN = 1 << 21        # Multiply-adds a shared GEMM's piece gets at least (the driver's LOOM_GEMM_PIECE_MIN).
_GAIN = 0.95                # The team walk runs when its estimate is below this share of the sequential one's.
_KERNEL_ALONE = 8           # Kernels of this many times LOOM_PAR_MIN iterations keep the sequential walk.
_GAP_US = 0.5               # Idle time shorter than this is not worth planning a record into.
_TEAM_MAX = 256             # Threads the driver's team walk takes at most (LOOM_TEAM_MAX).


class Record:
    """What the schedule needs of one record: kind, memory read and written, cost, whether it may stop the walk."""

    __slots__ = ("kind", "reads", "writes", "cost", "fallible", "gemm", "work", "blocks")

    def __init__(self, kind: int, reads, writes, fallible: bool, gemm=None, work: int = 0, blocks=None):
        self.kind, self.reads, self.writes, self.fallible = kind, reads, writes, fallible
        self.gemm = gemm  # (M, multiply-adds, is_double, batch items) of a GEMM record.
        self.work = work  # A kernel's loop iterations (the output's elements).
        self.blocks = blocks  # A kernel's argument blocks for one row block per thread, when it may be shared.
        nbytes = sum(int(hi - lo) for _, lo, hi in list(reads) + list(writes))
        if gemm is not None:
            self.cost = _RECORD_US + gemm[1] / _MACS_PER_US * (3 if kind == HGEMM else 1)
        else:
            self.cost = _RECORD_US + nbytes / _BYTES_PER_US


class Schedule:
    """The driver's schedule (`array`, see ``loom_run_team``) and the argument blocks it points to (`keep`)."""

    __slots__ = ("array", "keep", "owner")

    def __init__(self, array: np.ndarray, keep: list, owner: list[int]):
        self.array, self.keep, self.owner = array, keep, owner


def plan(records: list[Record], nt: int, kernel_par_min: int, always: bool = False) -> Schedule | None:
    """The driver's schedule for `records` on `nt` threads, or None when the sequential walk is expected faster
    (unless `always`) or a record is a Python step."""
    n = len(records)
    if not 2 <= nt <= _TEAM_MAX or n < 2 or any(r.kind == PY for r in records):
        return None
    if not always and any(r.kind == KERNEL and r.blocks is None and r.work >= _KERNEL_ALONE * kernel_par_min
                          for r in records):
        return None  # A kernel large enough to want every thread: the sequential walk cuts it across them.
    deps = _dependencies(records)
    anc = _ancestors(deps)
    gemms = [k for k, r in enumerate(records) if r.gemm is not None]
    shared = [_shared(records, k, anc, nt, gemms) or
              (records[k].blocks is not None and records[k].work >= kernel_par_min) for k in range(n)]
    cost = [r.cost for r in records]
    split_cost = [records[k].cost / nt + 1.0 if shared[k] else 0.0 for k in range(n)]
    order, owner, span = _list_schedule(deps, cost, shared, split_cost, nt)
    sequential = sum(_sequential_cost(r, nt, kernel_par_min) for r in records)
    if not always and span + _REGION_US >= _GAIN * sequential:
        return None
    first = np.zeros(n + 1, np.int64)
    for k in range(n):
        first[k + 1] = first[k] + len(deps[k])
    flat = [d for k in range(n) for d in deps[k]]
    keep: list = []
    blocks = [0] * n
    for k, r in enumerate(records):
        if owner[k] < 0 and r.kind == KERNEL:
            table = np.array([int(m.ctypes.data) for m in r.blocks], np.int64)
            keep += [table, r.blocks]
            blocks[k] = int(table.ctypes.data)
    return Schedule(np.array([nt] + order + owner + list(first) + flat + blocks, np.int64), keep, owner)


def _sequential_cost(r: Record, nt: int, kernel_par_min: int) -> float:
    """The record's cost in the sequential walk at `nt` threads: large GEMMs and kernels cut across the team,
    each paying a parallel region."""
    if r.gemm is not None and r.gemm[1] >= threads.gemm_par_min():
        return r.cost / nt + _REGION_US
    if r.kind == KERNEL and r.work >= kernel_par_min:
        return r.cost / nt + _REGION_US
    return r.cost


def _dependencies(records: list[Record]) -> list[list[int]]:
    """Per record, the earlier records it must wait for (see the module docstring)."""
    n = len(records)
    deps: list[list[int]] = [[] for _ in range(n)]
    rows = [(k, w, b, lo, hi) for k, r in enumerate(records) for w, regs in ((0, r.reads), (1, r.writes))
            for b, lo, hi in regs]
    table = np.array(rows, np.int64).reshape(-1, 5)  # (record, written?, base, lo, hi) per region.
    owner, written, base, lo, hi = table.T
    starts = np.searchsorted(owner, np.arange(n + 1))
    barrier = -1  # The last record that may stop the walk: every later record waits for it.
    for k, r in enumerate(records):
        if r.fallible:
            deps[k] = ([barrier] if barrier >= 0 else []) + list(range(barrier + 1, k))
            barrier = k
            continue
        a, b = int(starts[barrier + 1]), int(starts[k])  # Regions of the records since the barrier.
        found: set[int] = set()
        for i in range(int(starts[k]), int(starts[k + 1])):
            # A region of k against those before: any overlap with a write, and with a read when k writes.
            hit = (base[a:b] == base[i]) & (lo[a:b] < hi[i]) & (lo[i] < hi[a:b])
            if not written[i]:
                hit &= written[a:b] == 1
            found.update(owner[a:b][hit].tolist())
        deps[k] = ([barrier] if barrier >= 0 else []) + sorted(found)
    return deps


def _ancestors(deps: list[list[int]]) -> list[int]:
    """Per record, the set (a bit mask) of records it depends on, directly or not."""
    anc: list[int] = []
    for ds in deps:
        m = 0
        for d in ds:
            m |= anc[d] | (1 << d)
        anc.append(m)
    return anc


def _shared(records: list[Record], k: int, anc: list[int], nt: int, gemms: list[int]) -> bool:
    """Whether the team shares GEMM `k` (cut in row tiles or batch items): it is large enough to cut and no
    independent product of at least half its size can run beside it."""
    g = records[k].gemm
    if g is None or records[k].kind != GEMM:
        return False
    M, macs, dbl, items = g
    if macs < threads.gemm_par_min():
        return False
    if items < nt:
        tiles = (M + 15) // 16
        if dbl or items != 1 or tiles < nt or (macs // nt) < _PIECE_MIN:
            return False
    for j in gemms:
        if j != k and records[j].gemm[1] * 2 >= macs and not (anc[k] >> j) & 1 and not (anc[j] >> k) & 1:
            return False
    return True


def _list_schedule(deps, cost, shared, split_cost, nt: int) -> tuple[list[int], list[int], float]:
    """(order, owner per record, estimated makespan): records taken by longest path to the end, each placed at
    the earliest time a thread is free for it after its dependencies (in a gap left earlier, too), a shared one
    where every thread is free; the order is by start time, so every record comes after those it depends on."""
    n = len(deps)
    succ: list[list[int]] = [[] for _ in range(n)]
    for k, ds in enumerate(deps):
        for d in ds:
            succ[d].append(k)
    level = [0.0] * n
    for k in reversed(range(n)):
        c = split_cost[k] if shared[k] else cost[k]
        level[k] = c + max((level[s] for s in succ[k]), default=0.0)
    waiting = [len(ds) for ds in deps]
    heap = [(-level[k], k) for k in range(n) if not waiting[k]]
    heapq.heapify(heap)
    lanes = [_Lane() for _ in range(nt)]
    start = [0.0] * n
    finish = [0.0] * n
    owner = [0] * n
    while heap:
        _, k = heapq.heappop(heap)
        ready = max((finish[d] for d in deps[k]), default=0.0)
        if shared[k]:
            c = split_cost[k]
            s = ready
            while True:  # The earliest time from `ready` when every thread is free for `c`.
                later = max(lane.fit(s, c) for lane in lanes)
                if later == s:
                    break
                s = later
            owner[k] = -1
            for lane in lanes:
                lane.take(s, s + c)
        else:
            c = cost[k]
            s, t = min((lanes[i].fit(ready, c), i) for i in range(nt))
            owner[k] = t
            lanes[t].take(s, s + c)
        start[k], finish[k] = s, s + c
        for j in succ[k]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(heap, (-level[j], j))
    order = sorted(range(n), key=lambda j: (start[j], finish[j], j))
    return order, owner, max(finish, default=0.0)


class _Lane:
    """One thread's planned time: the end of its last record and the idle gaps before it."""

    __slots__ = ("tail", "gaps")

    def __init__(self) -> None:
        self.tail = 0.0
        self.gaps: list[tuple[float, float]] = []

    def fit(self, ready: float, c: float) -> float:
        """The earliest start from `ready` of `c` free time."""
        for g0, g1 in self.gaps:
            s = max(g0, ready)
            if s + c <= g1:
                return s
        return max(self.tail, ready)

    def take(self, s: float, e: float) -> None:
        if s >= self.tail:
            if s - self.tail > _GAP_US:
                self.gaps.append((self.tail, s))
            self.tail = e
            return
        for i, (g0, g1) in enumerate(self.gaps):
            if g0 <= s and e <= g1:
                self.gaps[i:i + 1] = [g for g in ((g0, s), (e, g1)) if g[1] - g[0] > _GAP_US]
                return
