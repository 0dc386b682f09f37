"""Eager values through the compiler: the pending subgraph is captured, compiled once per structure, run.

Every realised value behind the pending nodes becomes an input of the
captured graph, so the graph's structure does not depend on data and one
compiled executable serves every later realisation of the same structure
(an eager training loop compiles on its first iteration and replays after).

The runtime does not import the compiler: `loom.runtime.realize` calls the
function this module registers with it (`register_compiled`) when the
backend asks for compiled values.
"""
from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

from loom.compiler.pipeline import compile as compile_graph
from loom.compiler.remat import parse_budget
from loom.dtypes import DType
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import realize as _realize
from loom.runtime import reference
from loom.runtime.reference import pending_order

# Compiled plans by graph structure, least recently used first (a hit moves its entry to the end).
# Bounded in entries and in bytes (constants and plan metadata; the plans' intermediates live in one
# shared arena, `_lend_arena`), so a process that realises many differently shaped graphs (a test
# suite) does not keep hundreds of plans.
_CACHE: dict[Any, Any] = {}
_CACHE_LIMIT = 512
_CACHE_BYTES = int(os.environ.get("LOOM_EAGER_CACHE_BYTES", "") or 1 << 30)
_NODE_BYTES = 4096  # A rough charge per graph node for the plan's steps, views and metadata.
_ARENA_ALIGN = 64  # Slack for aligning the shared arena (loom.runtime.native aligns to 64 bytes).
_FOOTPRINT: dict[Any, int] = {}
stats = {"compiles": 0, "hits": 0, "evictions": 0, "bytes": 0, "tier_compiles": 0, "tier_failures": 0,
         "tier_mismatches": 0}


def set_cache_bytes(limit: int) -> None:
    """Bound the eager plan cache to about `limit` bytes of plans (default 1 GiB, or
    ``LOOM_EAGER_CACHE_BYTES``); least recently used plans are dropped first, and the arena they
    share goes with the last of them."""
    global _CACHE_BYTES
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        from loom.errors import LoomValueError
        raise LoomValueError(f"loom.compiler.eager.set_cache_bytes: expected a byte count >= 0, got {limit!r}")
    _CACHE_BYTES = limit
    with _CACHE_LOCK:
        _evict(0)
    if not _CACHE:
        _ARENA[0] = None
        _ARENA[1] += 1


def footprint(exe: Any) -> int:
    """Bytes a cached plan keeps alive: its constant buffers, a charge per node, and its own arena
    when it has no native program (a native program runs on the arena all plans share)."""
    arena = 0
    if getattr(exe, "_native", None) is None:
        arena = int(getattr(exe, "_arena_bytes", 0) or 0) * max(1, len(getattr(exe, "_arenas", None) or ()))
    graph = getattr(exe, "graph", None)
    nodes = consts = 0
    if isinstance(graph, Graph):
        nodes = len(graph)
        consts = sum(int(getattr(n.buffer, "nbytes", 0)) for n in graph if n.buffer is not None)
    return arena + consts + nodes * _NODE_BYTES


def _evict(incoming: int) -> None:
    """Drop least recently used plans until `incoming` more bytes (and one more entry) fit."""
    if len(_FOOTPRINT) != len(_CACHE):  # The cache was cleared or edited from outside: recount.
        for key in [k for k in _FOOTPRINT if k not in _CACHE]:
            del _FOOTPRINT[key]
        stats["bytes"] = sum(_FOOTPRINT.get(k, 0) for k in _CACHE)
    while _CACHE and (len(_CACHE) >= _CACHE_LIMIT or stats["bytes"] + incoming > _CACHE_BYTES):
        key = next(iter(_CACHE))
        del _CACHE[key]
        stats["bytes"] -= _FOOTPRINT.pop(key, 0)
        stats["evictions"] += 1
_BUDGET: tuple[int, bool] | None = None  # (bytes, strict) from set_memory_budget.


def set_memory_budget(budget: int | str | None, strict: bool = False) -> None:
    """Fit every graph the compiled eager backend compiles from now on under `budget` bytes.

    The eager counterpart of ``loom.function(..., memory_budget=...)``: each
    pending subgraph realised under ``loom.set_backend("compiled")`` goes
    through the same rematerialisation pass (`loom.compiler.remat`) before
    its memory is planned; results stay bit-identical. `budget` is an int
    (bytes) or a string such as ``"256MB"``; None turns it off. A budget that
    cannot be met warns (`loom.LoomWarning`), or raises
    `loom.MemoryBudgetError` when `strict`. The reference backend has no
    arena and ignores it.

    Examples
    --------
    >>> import loom
    >>> loom.set_memory_budget("64MiB")
    >>> loom.get_memory_budget()
    67108864
    >>> loom.set_memory_budget(None)
    """
    global _BUDGET
    if budget is None:
        _BUDGET = None
        return
    _BUDGET = (parse_budget(budget, "loom.set_memory_budget"), bool(strict))


def get_memory_budget() -> int | None:
    """The eager memory budget in bytes (`set_memory_budget`), or None."""
    return _BUDGET[0] if _BUDGET is not None else None


def _attr_key(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return ("nan",)
    if hasattr(value, "name") and type(value).__name__ == "DType":
        return ("dtype", value.name)
    if isinstance(value, Graph):
        return ("graph", id(value))
    return value


_SIMPLE = frozenset({int, str, bool, type(None), DType})


def _attrs_key(attrs: dict) -> Any:
    """`_attr_key` of a node's attributes, without its recursion and sorting for the common case
    (scalars, dtypes and tuples of ints): this runs for every node of every eager step."""
    for v in attrs.values():
        t = type(v)
        if t in _SIMPLE or (t is float and v == v):
            continue
        if t is tuple and all(type(x) is int for x in v):
            continue
        return _attr_key(attrs)
    return tuple(attrs.items())


# References to a pending node that the capture itself accounts for: `sys.getrefcount`'s argument,
# the loop variable and the order list (each consumer's inputs tuple is counted separately).
_OWN_REFS = 3
# Held pending nodes up to this many elements become outputs (the loss and what it is computed from);
# larger ones (a parameter's pending gradient) stay pending, as computing them here would add writes.
_HELD_MAX = 2048


def _numel(shape: tuple[int, ...]) -> int:
    k = 1
    for d in shape:
        k *= d
    return k


def capture(targets: list[Node]) -> tuple[Any, list[Node], list[Node], list[Node]]:
    """The structural key of the pending subgraph, its order, its realised inputs and its outputs.

    The outputs are `targets` and every pending node that something outside the pending graph still
    holds (a tensor the program kept, such as the loss, or a pending node not computed now): each
    becomes a value, so reading it later costs nothing and its history (and the buffers that history
    holds) is freed with the rest of the graph.
    """
    order = pending_order(targets)
    index: dict[int, int] = {}
    inputs: list[Node] = []
    parts: list[Any] = []
    uses: dict[int, int] = {}  # Pending node id -> how many inputs tuples of the pending graph hold it.
    for n in order:
        ins = []
        for i in n.inputs:
            k = index.get(i.id)
            if k is None:  # Pending inputs come earlier in the order: this one is realised.
                k = index[i.id] = len(index)
                inputs.append(i)
                parts.append(("in", i.dtype, i.shape))
            elif i.buffer is None:
                uses[i.id] += 1
            ins.append(k)
        index[n.id] = len(index)
        uses[n.id] = 0
        parts.append((n.op, tuple(ins), _attrs_key(n.attrs) if n.attrs else (), n.dtype, n.shape))
    outs = [t for t in dict.fromkeys(targets) if t.buffer is None]
    wanted = {t.id for t in outs}
    n = i = None  # Drop the loops' references before counting.
    for n in order:
        if n.id not in wanted and _numel(n.shape) <= _HELD_MAX and sys.getrefcount(n) - _OWN_REFS > uses[n.id]:
            outs.append(n)
    parts.append(("out", tuple(index[t.id] for t in outs)))
    return tuple(parts), order, inputs, outs


def _build(order: list[Node], inputs: list[Node], outs: list[Node]) -> Graph:
    g = Graph()
    mapping: dict[int, Node] = {}
    for n in inputs:
        mapping[n.id] = g.add_input(n.shape, n.dtype)
    for n in order:
        mapping[n.id] = g.add_node(n.op, [mapping[i.id] for i in n.inputs], dict(n.attrs))
    g.outputs = [mapping[n.id] for n in outs]
    return g


def _compile(graph: Graph, budget: tuple[int, bool] | None) -> tuple[Any, int]:
    """The executable for a captured graph (fitted under `budget`) and its cache footprint."""
    if budget is not None:
        graph.meta["memory_budget"] = budget
    exe = compile_graph(graph)
    return exe, footprint(exe)


def _store(key: Any, exe: Any, size: int) -> None:
    """Put a compiled plan in the cache (the caller holds `_CACHE_LOCK`)."""
    _evict(size)  # A plan larger than the whole bound still runs; it is then the only one kept.
    _CACHE[key] = exe
    _FOOTPRINT[key] = size
    stats["bytes"] += size
    stats["compiles"] += 1


def realize(targets: list[Node]) -> None:
    """Compute `targets` with the compiled executable for their pending subgraph's structure."""
    key, order, inputs, outs = capture(targets)
    if not order:
        return
    key = (key, _BUDGET)
    with _CACHE_LOCK:
        exe = _CACHE.get(key)
        if exe is not None:
            _CACHE[key] = _CACHE.pop(key)  # Now the most recently used.
            stats["hits"] += 1
    if exe is None:
        exe, size = _compile(_build(order, inputs, outs), key[1])
        with _CACHE_LOCK:
            _store(key, exe, size)
    _replay(exe, inputs, outs)


def _replay(exe: Any, inputs: list[Node], outs: list[Node]) -> None:
    """Run a cached plan on the realised inputs and make its outputs buffer nodes."""
    arrays = [np.asarray(n.buffer) for n in inputs]
    if getattr(_BUSY, "on", False):  # Realised from inside a compiled call (a Python step): not on the shared arena.
        _take_back_arena(exe)
        results = exe(*arrays)
    else:
        with _LOCK:
            _BUSY.on = True
            try:
                _lend_arena(exe)
                results = exe(*arrays)
            finally:
                _BUSY.on = False
    for node, value in zip(outs, results):
        node.buffer = value
        node.op, node.inputs, node.attrs, node.depth = "buffer", (), {}, 0
    # The other pending nodes are now held only by each other: they and their history are freed.


# ---------------------------------------------------------------- the tiered backend
# A structure is compiled once it has been seen TIER_AFTER times (``LOOM_TIER_AFTER``) and its earlier
# sightings spent at least TIER_NODE_SECONDS (``LOOM_TIER_NODE_SECONDS``) per node on the reference path,
# a rough price of compiling it: a training step (tens of milliseconds and up) compiles within its first
# few iterations, while the small, short graphs of a test suite, which would never repay their compile
# and kernel builds, stay on the reference path. Graphs of fewer than TIER_MIN_NODES pending nodes (a
# lone `.item()`) are never counted.
TIER_AFTER = max(1, int(os.environ.get("LOOM_TIER_AFTER", "") or 2))
TIER_NODE_SECONDS = float(os.environ.get("LOOM_TIER_NODE_SECONDS", "") or 0.002)
TIER_MIN_NODES = max(1, int(os.environ.get("LOOM_TIER_MIN_NODES", "") or 4))
# ``LOOM_TIER_SYNC=1``: compile in the calling thread when a structure turns hot. With
# ``LOOM_TIER_NODE_SECONDS=0`` as well, the sighting at which a structure's results switch from the
# reference path's bits to the compiled plan's is the same in every run (the TIER_AFTER-th).
TIER_SYNC = os.environ.get("LOOM_TIER_SYNC", "") not in ("", "0")
_SEEN_LIMIT = 4096  # Structures whose sightings are counted (least recently seen dropped first).
# Hash of a key -> [sightings, seconds on the reference path]. By hash, not by key (a step's key holds a
# tuple per node): two structures that collide only share a count, which decides when to compile, never
# which plan runs.
_SEEN: dict[int, list] = {}
_PENDING: set[Any] = set()  # Keys whose plan the background thread is compiling or will compile.
_FAILED: dict[Any, str] = {}  # Keys whose compile or compiled run failed: the reference path keeps them.
_CACHE_LOCK = threading.Lock()  # Guards _CACHE, _FOOTPRINT, _SEEN, _PENDING, _FAILED and stats.
_QUEUE: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
_WORKER: list[threading.Thread | None] = [None]
_STOPPING = False  # Set at exit: no new compiles start.
_log = logging.getLogger("loom.eager")


def realize_tiered(targets: list[Node]) -> None:
    """Compute `targets` on the reference path, or with the compiled plan of their structure once the
    structure has repeated, spent TIER_NODE_SECONDS per node on the reference path, and its plan (compiled in the
    background) is ready and has reproduced a reference sighting's outputs bit for bit (`_promote`): the
    results are the reference path's bits whichever tier computes them."""
    key, order, inputs, outs = capture(targets)
    if not order:
        return
    if len(order) < TIER_MIN_NODES:
        del inputs, outs
        reference.realize(targets, order)
        return
    key = (key, _BUDGET)
    hot = False
    with _CACHE_LOCK:
        exe = _CACHE.get(key)
        if exe is not None:
            _CACHE[key] = _CACHE.pop(key)
            stats["hits"] += 1
        elif key not in _PENDING and key not in _FAILED:
            h = hash(key)
            seen = _SEEN.pop(h, None) or [0, 0.0]
            seen[0] += 1
            if seen[0] >= TIER_AFTER and seen[1] >= TIER_NODE_SECONDS * len(order) and not _STOPPING:
                _PENDING.add(key)
                hot = True
            else:
                _SEEN[h] = seen  # Now the most recently seen.
                if len(_SEEN) > _SEEN_LIMIT:
                    del _SEEN[next(iter(_SEEN))]
        else:
            seen = None
    if hot:
        _promote(key, targets, order, inputs, outs)
        return
    if exe is not None:
        try:
            _replay(exe, inputs, outs)
            return
        except Exception as e:  # noqa: BLE001 - the reference path below decides whether the user sees an error.
            why = f"{type(e).__name__}: {e}"
        del inputs, outs
        # Bad data (an index out of range) fails on both paths: the user gets the reference path's error
        # and the plan stays. A plan that failed where the reference path did not is dropped for good.
        reference.realize(targets, order)
        _fail(key, why)
        return
    del inputs, outs
    if seen is None:
        reference.realize(targets, order)
        return
    t0 = time.perf_counter()
    reference.realize(targets, order)
    seen[1] += time.perf_counter() - t0  # A list shared with _SEEN: no lock needed for one float.


def _promote(key: Any, targets: list[Node], order: list[Node], inputs: list[Node], outs: list[Node]) -> None:
    """Run the sighting that turned `key` hot on the reference path, and have its plan compiled and then
    checked against this sighting: the plan is promoted only if it gives the reference path's outputs bit
    for bit on the same inputs (`_tier_compile`).

    The inputs are copied before the reference run (it may write over an input nothing else reads) and
    the outputs after it (later steps may reuse their memory), once per structure. Random ops carry their
    seed as an attribute, which is part of the structure's key, so a plan draws exactly the numbers its
    reference sighting drew; a step whose dropout draws a fresh seed each time never repeats a structure
    and stays on the reference path."""
    graph = _build(order, inputs, outs)
    arrays = [np.array(n.buffer, copy=True) for n in inputs]
    refs = [weakref.ref(n) for n in outs]
    del inputs, outs
    reference.realize(targets, order)
    held = [r() for r in refs]
    if any(n is None or n.buffer is None for n in held):  # Cannot happen for held outputs; no check, no plan.
        with _CACHE_LOCK:
            _PENDING.discard(key)
        return
    want = [np.array(n.buffer, copy=True) for n in held]
    del held
    if TIER_SYNC:
        _tier_compile(key, graph, arrays, want)
    else:
        _submit(key, graph, arrays, want)


def _same_bits(got: Any, want: list[np.ndarray]) -> bool:
    """Whether a plan's outputs are the reference outputs bit for bit (a NaN equals the same NaN bits)."""
    if got is None or len(got) != len(want):
        return False
    for a, b in zip(got, want):
        a = np.asarray(a)
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.tobytes() != b.tobytes():
            return False
    return True


def _fail(key: Any, why: str) -> None:
    """Keep `key` on the reference path from now on."""
    with _CACHE_LOCK:
        _FAILED[key] = why
        _PENDING.discard(key)
        if _CACHE.pop(key, None) is not None:
            stats["bytes"] -= _FOOTPRINT.pop(key, 0)
        stats["tier_failures"] += 1
    _log.info("loom eager: a compiled plan failed (%s); its graph stays on the reference path", why)


def _tier_compile(key: Any, graph: Graph, arrays: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Compile `graph`, wait for its kernels, run the plan on `arrays` (a reference sighting's inputs) and
    publish it under `key` only if it reproduces `want` (that sighting's outputs) bit for bit; a plan that
    fails or differs is dropped and its structure stays on the reference path for good."""
    try:
        exe, size = _compile(graph, key[1])
        exe.wait()  # Kernels built: the first replay does not run their bodies on the reference path.
        _take_back_arena(exe)  # The check runs on the plan's own memory: no lock shared with the steps.
        got = exe(*arrays)
    except Exception as e:  # noqa: BLE001 - compiling is an optimisation; the reference path still answers.
        _fail(key, f"{type(e).__name__}: {e}")
        return
    del arrays
    if not _same_bits(got, want):
        with _CACHE_LOCK:
            _FAILED[key] = "its results differ from the reference path's bits"
            _PENDING.discard(key)
            stats["tier_mismatches"] += 1
        _log.info("loom eager: a compiled plan's results differ from the reference path's in the low bits; "
                  "its graph stays on the reference path")
        return
    with _CACHE_LOCK:
        if key in _PENDING:  # Not dropped meanwhile (`reset_tiers`).
            _PENDING.discard(key)
            _store(key, exe, size)
            stats["tier_compiles"] += 1


def _submit(key: Any, graph: Graph, arrays: list[np.ndarray], want: list[np.ndarray]) -> None:
    _QUEUE.put((key, graph, arrays, want))
    worker = _WORKER[0]
    if worker is None or not worker.is_alive():
        worker = _WORKER[0] = threading.Thread(target=_work, name="loom-eager-tier", daemon=True)
        worker.start()


def _work() -> None:
    """The background compiler: one graph at a time, in order of arrival."""
    while True:
        key, graph, arrays, want = _QUEUE.get()
        if key is None or _STOPPING:
            return
        _tier_compile(key, graph, arrays, want)
        del key, graph, arrays, want


def wait_tiered(timeout: float | None = None) -> bool:
    """Block until every queued background compile is done; True if none is left pending."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        with _CACHE_LOCK:
            if not _PENDING:
                return True
        if end is not None and time.monotonic() >= end:
            return False
        time.sleep(0.002)


def reset_tiers() -> None:
    """Forget every sighting, failure and pending compile (plans already compiled stay cached)."""
    with _CACHE_LOCK:
        _SEEN.clear()
        _PENDING.clear()
        _FAILED.clear()


@atexit.register
def _stop() -> None:
    """Let the interpreter exit without starting queued compiles."""
    global _STOPPING
    _STOPPING = True
    _QUEUE.put((None, None, None, None))


def _after_fork() -> None:
    global _CACHE_LOCK, _QUEUE
    _CACHE_LOCK = threading.Lock()
    _QUEUE = queue.SimpleQueue()
    _WORKER[0] = None
    _PENDING.clear()


os.register_at_fork(after_in_child=_after_fork)


# One arena for every cached plan: eager plans run one at a time (under _LOCK), so they share the memory
# for their intermediates, and the cache holds the largest arena once instead of one arena per plan.
_LOCK = threading.Lock()
_BUSY = threading.local()  # .on while this thread runs a plan on the shared arena.
_ARENA: list[Any] = [None, 0]  # [the buffer, its generation]


def _lend_arena(exe: Any) -> None:
    """Make `exe`'s native program run on the shared arena, growing it to fit."""
    prog = getattr(exe, "_native", None)
    if prog is None:
        return
    need = int(prog.arena_bytes) + _ARENA_ALIGN
    buf, gen = _ARENA
    if buf is None or buf.nbytes < need:
        _ARENA[0] = None  # Let the old buffer go before the new one is taken.
        buf = _ARENA[0] = np.empty(need, np.uint8)
        gen = _ARENA[1] = gen + 1
    if getattr(prog, "_eager_arena", None) != gen:
        prog.lend(buf)
        prog._eager_arena = gen


def _take_back_arena(exe: Any) -> None:
    prog = getattr(exe, "_native", None)
    if prog is not None and getattr(prog, "_eager_arena", None) is not None:
        prog.lend(None)
        prog._eager_arena = None


def arena_bytes() -> int:
    """Bytes of the arena the cached eager plans share (0 before the first compiled realisation)."""
    return 0 if _ARENA[0] is None else int(_ARENA[0].nbytes)


_realize.register_compiled(realize, realize_tiered)
