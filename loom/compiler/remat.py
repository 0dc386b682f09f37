"""Rematerialisation: fit a graph's planned arena under a memory budget by recomputing values.

A training step keeps forward activations alive until the backward reads
them, so its live bytes peak where the forward ends. Chen et al. (2016,
"Training deep nets with sublinear memory cost") trade that memory for
compute: keep a few values, recompute the others when the backward needs
them. In a static graph recomputing means duplicating nodes: a value `v`
live across the peak but not read there keeps its early readers, while its
readers after the peak read a clone of `v` computed just before the first of
them (the schedule is the graph's DFS order, which puts a new node right
before its first consumer). The clone's inputs must be there at that point:
an input still live then is read as is, any other is cloned too (a chain
back to values that are kept, which is Chen's recomputed segment), or, when
it cannot be recomputed, kept alive longer.

The pass first reschedules (`_reschedule`): pure work that frees memory,
such as weight gradients the traced step leaves to the optimizer, runs as
soon as its inputs are ready; and a small view read later than the rest of
its source (layer_norm_grad's dw and db rows, read by the optimizer) is
copied out right after the source is made (`_detach_small_views`), so the
source goes with its last other reader. Then, if the budget is still not met, it
weighs plans by a cost model and keeps the one that fits with the fewest
recomputed FLOPs (the smallest arena when none fits):

- segments (`_segment`): Chen's checkpointing with k segments, for each k in
  `SEGMENT_COUNTS`; the values the forward reads across a cut are kept, every
  other value that lives across the peak is recomputed once per segment; the
  greedy finishes a segmentation that misses the budget;
- greedy (`_greedy`): find the step where the most bytes are live, score
  every value live across it by bytes freed there per unit of recompute cost
  (an elementwise kernel costs its memory traffic, a matmul its
  multiply-adds), apply the best non-overlapping choices until that step
  fits, re-plan, repeat.

A kernel can read more at once than the budget holds: the GELU backward
reads u, u^2, tanh(...), 0.5u and 1 + tanh(...) of one 4 MiB activation,
each a kernel of its own in the forward (and recomputed as such). When the
peak step is such an elementwise kernel, the greedy first has it compute the
elementwise kernels it reads inline from what is there anyway (`_inlinable`,
`_inline`: the same element math in one kernel, so the same bits); those no
later step reads are then not kept for it, and those read later become
values the next round can recompute.

The nodes the pass makes (clones, inlined kernels) come after the inplace
pass, so `_plan` marks them in place where legal (`_made`): the GELU
backward recomputed inline writes its result over the incoming gradient, as
the original did. A value written in place over another is the last of its
slot's chain: it may be recomputed or offloaded like a value with a slot of
its own (the donors before it may not).

A value read across the peak only through views (a reshape or permute of
it: head splits, the flattened input of a weight gradient) moves too: its
late readers read the views rebuilt on the recomputed or reloaded copy
(`_clone_views`), while the early readers keep the original views.

Reordering pure nodes and recomputing run the same kernels on the same
inputs, so results are bit-identical.

The budget comes from ``graph.meta["memory_budget"]`` (bytes, strict); the
outcome goes to ``graph.meta["remat"]`` (a `RematReport`). It is the whole
step's memory: the arrays the step returns are allocated beside the arena
on every call, so their bytes are taken from the budget before the arena is
fitted (`output_bytes`).
"""
from __future__ import annotations

import itertools
import os
import re
import time
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from loom.compiler.constants import nbytes, reusable
from loom.compiler.memory import VIEW_OPS, MemoryPlan, live_slots, plan_memory
from loom.errors import LoomValueError, LoomWarning, MemoryBudgetError
from loom.ir.graph import CONSTANT_OPS, Graph
from loom.ir.node import Node
from loom.ir.ops import PRIMITIVES
from loom.runtime.storage import disk_bandwidth

# Primitive kinds whose nodes are pure functions of their inputs, so a clone computes the same bits.
RECOMPUTABLE_KINDS = frozenset({"unary", "binary", "compare", "ternary", "reduce", "movement",
                                "contraction", "sort", "fused"})
MAX_DEPTH = 160     # Longest chain of clones behind one rematerialised value.
MAX_ROUNDS = 400    # Re-plans before giving up.
MAX_STALE = 6      # Rounds in a row without a smaller arena before giving up.

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BUDGET_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_budget(value, api: str = "loom.function") -> int:
    """A memory budget in bytes, from an int (bytes) or a string such as ``"256MB"`` or ``"1.5GiB"``.

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB,
    GiB, TiB) powers of 1024; case does not matter.

    Examples
    --------
    >>> parse_budget("256MB"), parse_budget("1 KiB"), parse_budget(4096)
    (256000000, 1024, 4096)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, str)):
        raise LoomValueError(f"{api}: memory_budget must be an int (bytes) or a string such as '256MB', "
                             f"got {type(value).__name__} {value!r}")
    if isinstance(value, str):
        m = _BUDGET_RE.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise LoomValueError(f"{api}: cannot read memory_budget {value!r}; expected a number and a unit "
                                 "among B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. '256MB')")
        value = int(float(m.group(1)) * _UNITS[unit])
    value = int(value)
    if value <= 0:
        raise LoomValueError(f"{api}: memory_budget must be positive, got {value} bytes")
    return value


def fmt_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1 (e.g. '1.50 MiB')."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


@dataclass
class RematReport:
    """What the rematerialisation pass did to fit a graph under its memory budget.

    Attributes
    ----------
    budget : int
        The budget in bytes.
    arena_before, arena_after : int
        The planned arena (peak) before and after, in bytes.
    lower_bound_before, lower_bound_after : int
        The most bytes simultaneously live, before and after.
    values : int
        Values whose late readers now read a recomputed copy.
    recomputed : int
        Nodes added to recompute them (clones, chains included).
    extra_flops : int
        Estimated floating-point operations the clones add per run.
    met : bool
        Whether ``arena_after <= budget``.
    strict : bool
        Whether missing the budget raises instead of warning.
    strategy : str
        The plan chosen: ``"none"`` (the graph already fits), ``"schedule"``
        (reordering alone fits), ``"greedy"``, ``"segments(k)"`` (Chen's checkpointing
        with `k` segments) or ``"segments(k)+greedy"`` (segments, then the
        greedy to close the gap).
    candidates : list of (str, int, int, bool, int, float)
        Every plan the cost model weighed: strategy, arena bytes, extra FLOPs,
        whether it meets the budget, bytes offloaded to disk, and the cost
        model's extra seconds per run.
    offload : str
        The disk tier setting: ``"never"``, ``"disk"`` or ``"auto"`` (the
        default of `loom.function` and the eager budget).
    offloaded, offload_bytes : int
        Values offloaded to the disk tier, and their bytes (written and read
        back once per run).
    seconds : float
        The cost model's estimate of the time the chosen plan adds per run.
    tiers : list of TierChoice
        Per value moved off the peak: recomputed or offloaded, with both
        estimates where both were possible.
    rescheduled : int
        Nodes the rescheduling moved earlier (pure work that frees memory,
        such as weight gradients, run as soon as its inputs are ready), and
        small views it copied out early (`_detach_small_views`).
    arena_rescheduled : int
        The planned arena after rescheduling, before any recomputation.
    outputs : int
        Bytes of the arrays the step returns (allocated beside the arena on
        every call), counted against the budget: the arena gets
        ``budget - outputs`` and ``met`` means ``arena_after + outputs <= budget``.
    peak : str
        The step where the chosen plan's live bytes peak (which sets
        ``lower_bound_after``) and the largest values live there: what a
        budget that is missed would have to hold at once.
    """

    budget: int
    arena_before: int
    arena_after: int
    lower_bound_before: int
    lower_bound_after: int
    values: int = 0
    recomputed: int = 0
    extra_flops: int = 0
    met: bool = True
    strict: bool = False
    strategy: str = "greedy"
    candidates: list[tuple] = field(default_factory=list)
    rescheduled: int = 0
    arena_rescheduled: int = 0
    offload: str = "never"
    offloaded: int = 0
    offload_bytes: int = 0
    seconds: float = 0.0
    tiers: list = field(default_factory=list)
    outputs: int = 0
    peak: str = ""

    def __str__(self) -> str:
        state = "met" if self.met else "NOT met (best plan found is used)"
        timed = self.offload != "never"
        weighed = "; ".join(f"{name}: {fmt_bytes(arena)}, {extra / 1e9:.2f} GFLOP"
                            + (f", {fmt_bytes(disk)} to disk, ~{sec * 1e3:.1f} ms" if timed else "")
                            + ("" if met else ", over")
                            for name, arena, extra, met, disk, sec in self.candidates)
        moved = (f"rescheduled {self.rescheduled} nodes to run earlier (arena "
                 f"{fmt_bytes(self.arena_rescheduled)} before recomputing); " if self.rescheduled else "")
        rule = "least estimated time" if timed else "fewest recomputed FLOPs"
        why = f" ({rule} among the plans that fit; weighed {weighed})" if weighed else ""
        return (f"{moved}strategy {self.strategy}{why}\n"
                f"memory budget {fmt_bytes(self.budget)} ({self.budget} B): {state}; "
                + (f"step outputs {fmt_bytes(self.outputs)} ({self.outputs} B) count against it; " if self.outputs
                   else "")
                + "planned arena "
                f"{fmt_bytes(self.arena_before)} -> {fmt_bytes(self.arena_after)} "
                f"({self.arena_before} B -> {self.arena_after} B), lower bound "
                f"{self.lower_bound_before} B -> {self.lower_bound_after} B; rematerialised {self.values} "
                f"values by recomputing {self.recomputed} nodes, about {self.extra_flops} extra FLOPs per run"
                + (f"\n{self.peak}" if self.peak else "") + self._tiers_text())

    def _tiers_text(self, limit: int = 60) -> str:
        """The disk tier line and the per-value choices (the first `limit`)."""
        if self.offload == "never" and not self.tiers:
            return ""
        out = [f"\nstorage tiers (offload={self.offload!r}): {self.offloaded} values offloaded to disk "
               f"({fmt_bytes(self.offload_bytes)} written and read back per run), estimated "
               f"{self.seconds * 1e3:.1f} ms extra per run"]
        if self.tiers:
            out.append(f"  {'value':<34} {'bytes':>11}  {'choice':<9}  cost model")
            out += [f"  {t}" for t in self.tiers[:limit]]
            if len(self.tiers) > limit:
                out.append(f"  ... {len(self.tiers) - limit} more")
        return "\n".join(out)


def flops(node: Node) -> int:
    """Rough floating-point operations of one node (matmul: 2 per multiply-add; others: per element)."""
    out = int(np.prod(node.shape, dtype=np.int64))
    if node.op == "matmul":
        return 2 * out * int(node.inputs[0].shape[-1])
    if node.op == "fused":
        body = node.attrs["body"]
        return out * max(1, sum(1 for n in body.topological_order() if n.op != "input"))
    if PRIMITIVES[node.op].kind == "reduce":
        return int(np.prod(node.inputs[0].shape, dtype=np.int64))
    if PRIMITIVES[node.op].kind == "movement":
        return 0
    return out


def _cost(node: Node) -> float:
    """Recompute cost for ranking: multiply-adds for a matmul, else memory traffic plus work, per element."""
    if node.op == "matmul":
        return float(flops(node))
    traffic = int(np.prod(node.shape, dtype=np.int64)) + sum(int(np.prod(i.shape, dtype=np.int64))
                                                            for i in node.inputs)
    return float(traffic + flops(node))


def recomputable(node: Node) -> bool:
    """Whether a clone of `node` is sure to compute the same value (a pure primitive or fused kernel)."""
    prim = PRIMITIVES.get(node.op)
    return prim is not None and prim.kind in RECOMPUTABLE_KINDS


def _plan(graph: Graph) -> MemoryPlan:
    """`plan_memory` of `graph` after marking in place (``meta["inplace"]``) the nodes the pass made.

    Clones and inlined kernels (``meta["remat_made"]``, see `_made`) come
    after the inplace pass: a recomputed GELU backward that is the last
    reader of its incoming gradient can write over it like the original did.
    The other nodes keep the marks they had: a value sharing a slot is not
    one the greedy may recompute.
    """
    marks = graph.meta.setdefault("inplace", {})
    outputs = set(graph.outputs)
    for n in graph.meta.get("remat_made") or ():
        if n in graph and (n not in marks or not reusable(graph, n, marks[n], outputs)):
            k = next((k for k in range(len(n.inputs)) if reusable(graph, n, k, outputs)), None)
            if k is not None:
                marks[n] = k
    return plan_memory(graph)


def _made(graph: Graph, node: Node) -> Node:
    """`node`, noted as made by the pass (a clone or an inlined kernel) for `_plan`; copies of `graph` carry
    the note."""
    graph.meta.setdefault("remat_made", {})[node] = None
    return node


class _State:
    """The liveness of the graph as it stands: schedule positions, readers' positions, live bytes per step."""

    def __init__(self, graph: Graph, live: MemoryPlan | None = None) -> None:
        # `live`: the graph's `live_slots` (a `plan_memory` of the graph as it stands is one).
        self.live = live if live is not None else live_slots(graph)
        pos = self.live.pos
        self.pos = pos
        self.readers = {n: sorted(pos[c] for c in graph.consumers(n)) for n in (*self.live.sizes, *self.live.alias)}
        # Values read through views live on for the views' readers; recomputing one would not free it.
        self.viewed = {v.inputs[0] for v in self.live.alias}
        # Per value read through views: its views (views of views too), in schedule order, or None when
        # one is a graph output (the value must then stay).
        self.views: dict[Node, list[Node] | None] = {}
        outputs = set(graph.outputs)
        for v in sorted(self.live.alias, key=pos.__getitem__):
            root = self.live.alias[v]
            got = self.views.setdefault(root, [])
            if got is not None:
                self.views[root] = None if v in outputs else [*got, v]
        for v in outputs:  # An output view is not in `alias`: its source must stay.
            if v.op in VIEW_OPS and v.inputs and v.inputs[0] in pos:
                self.views[self.live.alias.get(v.inputs[0], v.inputs[0])] = None
        # Values whose slot no later node takes over (in place): the last of each chain of in-place writers
        # holds its slot until its own last reader, so moving it off the peak frees the slot there.
        donors = set(self.live.shares.values())
        self.alone = {n for n in self.live.sizes if n not in donors}
        delta = [0] * (len(self.live.order) + 1)
        for slot, (first, last) in self.live.spans.items():
            delta[first] += self.live.sizes[slot]
            delta[last + 1] -= self.live.sizes[slot]
        self.profile = list(np.cumsum(delta[:-1])) if delta[:-1] else [0]

    def available(self, node: Node, at: int) -> bool:
        """Whether `node`'s value can be read at step `at` without keeping it longer."""
        node = self.live.alias.get(node, node)  # A view lives as long as the memory it reads.
        if node not in self.live.sizes:
            return True  # Inputs, constants and outputs are never freed.
        return self.live.spans[self.live.slot_of[node]][1] >= at and node in self.alone


def _chain(state: _State, node: Node, at: int, found: _Found, depth: int) -> bool:
    """Collect the clones (inputs first) and kept-longer values that recompute `node` at step `at`."""
    for i in node.inputs:
        if i in found.clones or i in found.extend or i in found.subs or state.available(i, at):
            continue
        earlier = next((c for c in reversed(found.copies.get(i, ())) if c in state.pos and state.pos[c] < at),
                       None)
        if earlier is not None:
            # A copy made for an earlier choice: read it, kept alive until `at` if need be, rather
            # than recompute it again (one recomputed segment serves the segment's whole backward).
            found.subs[i] = earlier
            if not state.available(earlier, at):
                found.extend[earlier] = None
        elif recomputable(i) and depth < MAX_DEPTH:
            if not _chain(state, i, at, found, depth + 1):
                return False
            found.clones[i] = None
        else:
            # Kept alive until `at`; a later node that meant to overwrite it in place then gets a
            # slot of its own (`plan_memory` only honours in-place marks on last readers).
            found.extend[i] = None
    return True


@dataclass
class _Found:
    """What one choice needs: clones (inputs first), values kept longer, earlier copies read instead."""

    copies: dict[Node, list[Node]]
    clones: dict[Node, None] = field(default_factory=dict)
    extend: dict[Node, None] = field(default_factory=dict)
    subs: dict[Node, Node] = field(default_factory=dict)


@dataclass
class _Choice:
    node: Node
    at: int
    clones: list[Node]
    extend: list[Node]
    subs: dict[Node, Node]
    saved: int
    cost: float
    seconds: float = 0.0            # The cost model's recompute time (set when tiers are weighed).
    transfer: float | None = None   # The disk tier's time for the same value, when weighed.

    @property
    def footprint(self) -> set[Node]:
        return {self.node, *self.clones, *self.extend, *self.subs, *self.subs.values()} \
            | {i for n in self.clones for i in n.inputs}

    def decision(self, state: _State) -> TierChoice:
        return TierChoice(_describe(self.node), self.saved, "recompute",
                          self.seconds or recompute_seconds(self.clones), self.transfer)


def _choices(graph: Graph, state: _State, peak: int, copies: dict[Node, list[Node]],
             futile: set[Node]) -> list[_Choice]:
    """Every value live across step `peak` without being read there, with what recomputing it takes."""
    out = []
    for n in state.alone:
        first, last = state.pos[n], state.live.spans[state.live.slot_of[n]][1]
        if not first < peak < last or not recomputable(n) or n in futile:
            continue
        if n in state.viewed and state.views.get(n) is None:
            continue
        if peak in _all_readers(state, n):
            continue
        later = _late_readers(state, n, peak)
        if not later:  # Read after the peak only by a flush (its write in flight): nothing to recompute for.
            continue
        at = min(later)
        found = _Found(copies)
        if not _chain(state, n, at, found, 1):
            continue
        clones, extend = found.clones, found.extend
        # Values kept longer cost their bytes at the peak if they would have been freed before it.
        roots = {state.live.alias.get(e, e) for e in extend}  # A view kept longer keeps its source.
        grown = sum(state.live.sizes[e] for e in roots
                    if e in state.live.sizes and state.live.spans[state.live.slot_of[e]][1] < peak)
        # Cloned inputs whose late readers move to their clones stop crossing the peak too.
        freed = sum(state.live.sizes[c] for c in clones if c in state.alone and state.pos[c] < peak
                    and not any(peak <= r < at for r in state.readers[c])
                    and state.live.spans[state.live.slot_of[c]][1] > peak)
        saved = state.live.sizes[n] + freed - grown
        if saved <= 0:
            continue
        cost = _cost(n) + sum(_cost(c) for c in clones)
        out.append(_Choice(n, at, [*clones, n, *(state.views.get(n) or ())], list(extend), found.subs, saved, cost))
    out.sort(key=lambda c: (-c.saved / (c.cost + 1.0), c.node.id))
    return out


def _apply(graph: Graph, state: _State, choice: _Choice, copies: dict[Node, list[Node]]) -> list[Node]:
    """Clone `choice`'s chain and rewire the readers from its step on; returns the clones."""
    mapping: dict[Node, Node] = dict(choice.subs)
    for n in choice.clones:
        mapping[n] = _made(graph, graph.add_node(n.op, [mapping.get(i, i) for i in n.inputs], dict(n.attrs)))
        copies.setdefault(n, []).append(mapping[n])
    # Every cloned value's readers from the choice's step on read the clone (Chen's recomputed
    # segment serves the whole backward of the segment), not only the chosen value's.
    for n in choice.clones:
        for reader in graph.consumers(n):
            if reader in state.pos and state.pos[reader] >= choice.at:
                for k, i in enumerate(reader.inputs):
                    if i is n:
                        graph.set_input(reader, k, mapping[n])
    return [mapping[n] for n in choice.clones]


def _prune_dead(graph: Graph) -> None:
    """Remove nodes that nothing reads any more (originals whose every reader moved to a clone)."""
    outputs = set(graph.outputs)
    dead = [n for n in graph.topological_order()
            if n.op != "input" and n not in outputs and not graph.consumers(n)]
    while dead:
        n = dead.pop()
        if n not in graph or graph.consumers(n):
            continue
        ins = n.inputs
        graph.remove_node(n)
        dead += [i for i in ins if i.op != "input" and i not in outputs and i in graph
                 and not graph.consumers(i)]


PULL_LIMIT = 8  # Most nodes pulled forward together by the rescheduling.


def _reschedule(graph: Graph) -> int:
    """Reorder `graph`'s schedule so pure work that frees memory runs as soon as it can; returns nodes moved.

    The traced backward leaves work such as weight gradients (`x^T @ dy`) to
    the optimizer, so the activation `x` and the gradient `dy` of every layer
    stay live across the whole backward. After each node this pulls forward
    any pure reader of its inputs or result (with at most `PULL_LIMIT`
    unscheduled pure ancestors) whose running now frees more bytes than it
    leaves live. Only pure nodes move and every node still follows its
    inputs, so each kernel reads the same values: results are unchanged.
    """
    order = graph.topological_order()
    rank = {n: k for k, n in enumerate(order)}
    outputs = set(graph.outputs)
    readers = {n: graph.consumers(n) for n in order}
    size = {n: 0 if n.op == "input" or n.op in CONSTANT_OPS or n in outputs else nbytes(n) for n in order}
    done: set[Node] = set()
    out: list[Node] = []
    moved = 0

    def closure(r: Node) -> list[Node] | None:
        """`r` and its unscheduled ancestors, inputs first, if all are pure and few enough."""
        found: dict[Node, None] = {}
        stack = [r]
        while stack:
            n = stack.pop()
            if n in found or n in done:
                continue
            if not recomputable(n) or len(found) >= PULL_LIMIT:
                return None
            found[n] = None
            stack += n.inputs
        return sorted(found, key=rank.__getitem__)

    def gain(group: list[Node]) -> int:
        inside = set(group)
        freed = sum(size[v] for v in {i for n in group for i in n.inputs if i not in inside}
                    if all(c in done or c in inside for c in readers[v]))
        kept = sum(size[n] for n in group if any(c not in inside for c in readers[n]))
        return freed - kept

    def emit(n: Node) -> None:
        done.add(n)
        out.append(n)

    for n in order:
        if n in done:
            continue
        emit(n)
        work = [n]
        while work:
            m = work.pop()
            for v in (*m.inputs, m):
                for r in sorted((c for c in readers[v] if c not in done), key=rank.__getitem__):
                    group = closure(r)
                    if group and gain(group) > 0:
                        for g in group:
                            emit(g)
                        work += group
                        moved += len(group)
    if moved:
        # The schedule is the graph's insertion order whenever that order is topological.
        graph._nodes = dict.fromkeys(out)
    return moved


# ---------------------------------------------------------------- kernels that read too much at once

_ELEMENTWISE = frozenset({"unary", "binary", "compare", "ternary"})


# Per kernel body (bodies are not edited once made): whether it is elementwise, and which of its placeholders
# it reads only element for element. The greedy asks about the same kernels round after round.
_BODY_FACTS: "weakref.WeakKeyDictionary[Graph, tuple[bool, tuple[bool, ...]]]" = weakref.WeakKeyDictionary()


def _body_facts(body: Graph) -> tuple[bool, tuple[bool, ...]]:
    facts = _BODY_FACTS.get(body)
    if facts is None:
        moved: set[Node] = set()
        elementwise = True
        for b in body.topological_order():
            if b.op in ("input", "const"):
                continue
            kind = PRIMITIVES[b.op].kind
            if kind == "movement" and b.op != "pad" and all(i.op == "input" or i in moved for i in b.inputs):
                moved.add(b)
            elif kind not in _ELEMENTWISE or any(i in moved and tuple(i.shape) != tuple(b.shape)
                                                 for i in b.inputs):
                elementwise = False
                break
        direct = tuple(all(PRIMITIVES[c.op].kind in _ELEMENTWISE for c in body.consumers(ph))
                       for ph in body.inputs)
        facts = _BODY_FACTS[body] = (elementwise, direct)
    return facts


def _elementwise_kernel(n: Node) -> bool:
    """A fused kernel computing each output element from the same element of its inputs (movement on inputs
    only, no reduction): another kernel may compute it inline, element by element, instead of reading it."""
    return n.op == "fused" and _body_facts(n.attrs["body"])[0]


def _direct(q: Node) -> set[Node]:
    """The inputs of kernel `q` its body reads only through elementwise ops (element for element)."""
    return {o for o, ok in zip(q.inputs, _body_facts(q.attrs["body"])[1]) if ok}


def _inlinable(state: _State, f: Node, at: int) -> list[Node]:
    """The producers of elementwise kernel `f` (at step `at`) it can compute inline: elementwise kernels of its
    shape, read element for element, whose own inputs are there at `at` anyway (read by `f`, inlined too, or
    live then). Inlining them frees those no later step reads."""
    from loom.compiler.fuse import MAX_GROUP

    if not _elementwise_kernel(f):
        return []
    direct = {f: _direct(f)}
    picked: dict[Node, None] = {}
    size = len(f.attrs["body"])
    grew = True
    while grew:
        grew = False
        for p in dict.fromkeys(i for q in direct for i in direct[q]):
            if p in picked or p not in state.pos or tuple(p.shape) != tuple(f.shape) or p.dtype is not f.dtype \
                    or not _elementwise_kernel(p) or size + len(p.attrs["body"]) > MAX_GROUP:
                continue
            mine = _direct(p)
            if any(p in q.inputs and p not in direct[q] for q in direct) \
                    or any(i in picked and i not in mine for i in p.inputs) \
                    or not all(i in f.inputs or i in picked or state.available(i, at) for i in p.inputs):
                continue
            picked[p] = None
            direct[p] = mine
            size += len(p.attrs["body"])
            grew = True
    return list(picked)


def _frees(state: _State, f: Node, producers: list[Node]) -> bool:
    """Whether computing `producers` inside `f` frees one of them at `f`'s step (no later step reads it)."""
    at = state.pos[f]
    inside = {f, *producers}
    order = state.live.order
    return any(p in state.live.sizes and all(r < at or order[r] in inside for r in _all_readers(state, p))
               for p in producers)


def _inline(graph: Graph, f: Node, producers: list[Node]) -> Node:
    """Replace kernel `f` by one that computes `producers` (elementwise kernels it reads) inline; the new
    kernel takes `f`'s place in the schedule."""
    inside = set(producers)
    body = Graph()
    outer: list[Node] = []
    ph: dict[Node, Node] = {}
    memo: dict[Node, Node] = {}

    def copy_body(b: Graph, args: list[Node]) -> Node:
        m = dict(zip(b.inputs, args))
        for n in b.topological_order():
            if n.op != "input":
                m[n] = body.add_node(n.op, [m[i] for i in n.inputs], dict(n.attrs))
        return m[b.outputs[0]]

    def value(o: Node) -> Node:
        if o not in memo:
            if o in inside:
                memo[o] = copy_body(o.attrs["body"], [value(i) for i in o.inputs])
            else:
                if o not in ph:
                    ph[o] = body.add_input(tuple(o.shape), o.dtype)
                    outer.append(o)
                memo[o] = ph[o]
        return memo[o]
    out = copy_body(f.attrs["body"], [value(i) for i in f.inputs])
    body.outputs = [out]
    new = _made(graph, graph.add_node("fused", outer, {"body": body}, name=f.name))
    order = graph.topological_order()
    graph.replace(f, new, check_cycles=False)
    graph.remove_node(f)
    # The schedule is the graph's insertion order whenever that order is topological.
    graph._nodes = dict.fromkeys(new if n is f else n for n in order if n is not new)
    return new


def _detach_small_views(graph: Graph) -> int:
    """Copy out, right after its source is made, each small view read later than the rest of the source; returns
    the copies made.

    A layer_norm_grad result holds dx, dw and db in one array: the optimizer
    reads the two 1-row views of dw and db at the end of the step, which keeps
    the whole array (1 MiB on the GPT step, one per layer norm) live across
    the backward. A copy of the view (its elements times 1.0: the same bits)
    lets the array go with its last other reader.
    """
    order = graph.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    outputs = set(graph.outputs)
    memo: dict[Node, int] = {}

    def last_read(n: Node) -> int:
        if n not in memo:
            m = pos[n]
            for c in graph.consumers(n):
                m = max(m, last_read(c) if c.op in VIEW_OPS and c not in outputs else pos[c])
            memo[n] = m
        return memo[n]
    made: dict[Node, list[Node]] = {}
    for n in order:
        if n.op in VIEW_OPS or n.op == "input" or n.op in CONSTANT_OPS or n in outputs:
            continue
        small = [v for v in graph.consumers(n) if v.op in VIEW_OPS and v not in outputs and len(v.inputs) == 1
                 and v.dtype.is_floating_point and 8 * nbytes(v) <= nbytes(n)]
        if not small:
            continue
        rest = max([pos[n]] + [last_read(c) if c.op in VIEW_OPS and c not in outputs else pos[c]
                               for c in graph.consumers(n) if c not in small])
        for v in small:
            if last_read(v) <= rest:
                continue
            body = Graph()
            view = body.add_node(v.op, [body.add_input(tuple(n.shape), n.dtype)], dict(v.attrs))
            one = body.add_node("const", [], {"value": 1.0, "shape": tuple(v.shape), "dtype": v.dtype})
            body.outputs = [body.add_node("mul", [view, one])]
            copy = graph.add_node("fused", [n], {"body": body})
            graph.replace(v, copy, check_cycles=False)
            made.setdefault(n, []).append(copy)
    if made:
        new = {c for cs in made.values() for c in cs}
        _prune_dead(graph)
        sched: list[Node] = []
        for m in graph.topological_order():
            if m not in new:
                sched.append(m)
                sched += made.get(m, [])
        # The schedule is the graph's insertion order whenever that order is topological.
        graph._nodes = dict.fromkeys(sched)
    return sum(len(c) for c in made.values())


SEGMENT_COUNTS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)  # Segmentations the cost model weighs.


def _greedy(graph: Graph, budget: int, plan: MemoryPlan, copies: dict[Node, list[Node]],
            tiers: str = "never", decisions: list | None = None, bound: float | None = None,
            timed: bool = False, inline_reads: bool = True) -> tuple[Graph, MemoryPlan, list]:
    """The greedy rounds (see the module docstring) from `plan`; returns the best state and its
    stats (`_STATS`).

    `tiers` says what the rounds may do with a value live across the peak:
    ``"never"`` recompute it, ``"disk"`` offload it, ``"auto"`` whichever the
    cost model (`recompute_seconds` against `transfer_seconds`) says is
    cheaper for that value, ``"disk-first"`` offload every value it can and
    recompute the others (what finishes a disk plan the disk alone cannot
    fit). Each choice is appended to `decisions`.

    `bound`: the rounds stop once their cost (extra FLOPs, or with `timed`
    the cost model's seconds) passes it: a plan that fits at less cost is
    already known, so this one cannot be chosen.

    `inline_reads`: whether a kernel reading too much at once may compute its
    elementwise inputs inline (``False``: the disk tier's offload-only plan).
    """
    stats: list[float] = [0] * len(_STATS)  # Counts and FLOPs (ints), seconds (a float).
    decisions = decisions if decisions is not None else []
    best: tuple[int, Graph | None, list, int] = (plan.arena_bytes, None, list(stats), 0)
    target = budget  # For the live bytes; lowered when placement needs room above them.
    stale = 0
    futile: set[Node] = set()  # Clones that did not lower the peak they were made for.
    for _ in range(MAX_ROUNDS):
        if plan.arena_bytes <= budget or (bound is not None and stats[5 if timed else 2] > bound):
            break
        # The plan's liveness serves when it is this graph's (not that of the graph it was copied from).
        state = _State(graph, plan if plan.order and plan.order[-1] in graph else None)
        peak = int(np.argmax(state.profile))
        if state.profile[peak] <= target:
            target -= max(plan.arena_bytes - budget, budget // 64, 64)
            if target <= 0:
                break
            continue
        need = int(state.profile[peak]) - target
        choices = _tier_choices(graph, state, peak, copies, futile, tiers)
        # When what is live across the peak cannot cover it (the peak kernel reads too much at once), every
        # step over the target that is an elementwise kernel reading elementwise kernels' results computes
        # those inline from what is there anyway, so those no later step reads are not kept for it. That never
        # adds live bytes: no fallback copy is needed for such a round. The disk tier cannot do it: reloading
        # every one of those values still has the kernel read them all at once.
        order = state.live.order
        inlines: list[tuple[Node, list[Node]]] = []
        taken: set[Node] = set()
        for k in sorted(range(len(order)), key=lambda k: -state.profile[k]) if inline_reads else ():
            if state.profile[k] <= target:
                break
            found = _inlinable(state, order[k], k) if order[k].op == "fused" else []
            if found and not taken & set(found) and _frees(state, order[k], found):
                inlines.append((order[k], found))
                taken.update(found)
        if inlines:
            for f, inline in inlines:
                # Inline, a value costs its arithmetic only: it is neither written nor read back.
                seconds = [flops(p) / flop_rate() for p in inline]
                decisions += [TierChoice(_describe(p), nbytes(p), "inline", t, None) for p, t in zip(inline, seconds)]
                stats[0] += len(inline)
                stats[1] += len(inline)
                stats[2] += sum(flops(p) for p in inline)
                stats[5] += sum(seconds)
                _inline(graph, f, inline)
            _prune_dead(graph)
            plan = _plan(graph)
            continue
        if plan.arena_bytes < best[0] or best[1] is None:
            # The best state so far: keep a copy to fall back to if later rounds only make it worse.
            best = (plan.arena_bytes, graph.copy(), list(stats), len(decisions))
        touched: set[Node] = set()
        applied = 0
        made: list[Node] = []
        moves: list[_Offload] = []
        for choice in choices:
            if need <= 0:
                break
            foot = choice.footprint
            if foot & touched:
                continue
            touched |= foot
            decisions.append(choice.decision(state))
            if isinstance(choice, _Offload):
                moves.append(choice)
                stats[3] += 1
                stats[4] += choice.saved
                stats[5] += transfer_seconds(choice.saved)
            else:
                made += _apply(graph, state, choice, copies)
                stats[0] += 1
                stats[1] += len(choice.clones)
                stats[2] += sum(flops(n) for n in choice.clones)
                stats[5] += recompute_seconds(choice.clones)
            need -= choice.saved
            applied += 1
        if not applied:
            break
        _place_offloads(graph, state, moves, peak, target)
        _prune_dead(graph)
        lower = plan.lower_bound
        plan = _plan(graph)
        if plan.lower_bound >= lower:
            # The clones landed no later than the peak (their reader's other inputs come first):
            # moving them again would do the same.
            futile.update(made)
        stale = stale + 1 if plan.arena_bytes >= best[0] else 0
        if stale >= MAX_STALE:
            break
    if best[1] is not None and (plan.arena_bytes, stats[0] + stats[3]) > (best[0], best[2][0] + best[2][3]):
        del decisions[best[3]:]
        return best[1], _plan(best[1]), best[2]
    return graph, plan, stats


# ---------------------------------------------------------------- the disk tier

# What a plan's stats list holds: recomputed values, recomputed nodes, extra FLOPs, offloaded values,
# offloaded bytes, estimated extra seconds per run (the cost model's).
_STATS = ("values", "recomputed", "extra_flops", "offloaded", "offload_bytes", "seconds")
OFFLOAD_MODES = ("never", "disk", "auto")
DEFAULT_OFFLOAD = "auto"  # Under a memory budget the cost model chooses recompute or disk per value.
MEMORY_BANDWIDTH = 4e9   # Bytes/s an elementwise kernel streams (assumed; such kernels are memory-bound).
_RATE: list[float] = []
_key_counter = itertools.count(1)


def flop_rate() -> float:
    """Matmul FLOP/s on this machine (a 192x192 sgemm, the median of five timings of four), measured once
    per process; ``LOOM_FLOP_RATE`` replaces the measurement."""
    if not _RATE:
        env = os.environ.get("LOOM_FLOP_RATE")
        if env:
            _RATE.append(float(env))
        else:
            a = np.ones((192, 192), np.float32)
            np.matmul(a, a)
            rates = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(4):
                    np.matmul(a, a)
                rates.append(4 * 2 * 192**3 / max(time.perf_counter() - t0, 1e-6))
            _RATE.append(sorted(rates)[2])
    return _RATE[0]


def recompute_seconds(nodes) -> float:
    """The cost model's time to recompute `nodes`: matmul FLOPs at `flop_rate`, other kernels' traffic at
    `MEMORY_BANDWIDTH`."""
    total = 0.0
    for n in nodes:
        if n.op == "matmul":
            total += flops(n) / flop_rate()
        else:
            total += (nbytes(n) + sum(nbytes(i) for i in n.inputs)) / MEMORY_BANDWIDTH + flops(n) / flop_rate()
    return total


def transfer_seconds(size: int) -> float:
    """The cost model's time to write `size` bytes to the disk tier and read them back (measured bandwidth)."""
    return size / disk_bandwidth()


@dataclass
class TierChoice:
    """Where one value live across the peak went: recomputed or offloaded, and what each would cost.

    Attributes
    ----------
    value : str
        The value (``%id op dtype[shape]``).
    nbytes : int
        Its size.
    choice : str
        ``"recompute"``, ``"offload"`` or ``"inline"`` (computed inside the kernel that reads it).
    recompute_s, transfer_s : float or None
        The cost model's estimates (None: that option was not available).
    """

    value: str
    nbytes: int
    choice: str
    recompute_s: float | None
    transfer_s: float | None

    def __str__(self) -> str:
        def ms(t):
            return "n/a" if t is None else f"{t * 1e3:.3f} ms"
        return (f"{self.value:<34} {fmt_bytes(self.nbytes):>11}  {self.choice:<9}  recompute {ms(self.recompute_s)}, "
                f"disk {ms(self.transfer_s)}")


def _describe(n: Node) -> str:
    return f"%{n.id} {n.op} {n.dtype.name}{list(n.shape)}"


@dataclass
class _Offload:
    """Offload `node` after its last reader before the peak, reload it before its first reader after."""

    node: Node
    at: int
    saved: int
    seconds: float
    recompute: float | None = None

    @property
    def footprint(self) -> set[Node]:
        return {self.node}

    def decision(self, state: _State) -> TierChoice:
        return TierChoice(_describe(self.node), self.saved, "offload", self.recompute, self.seconds)


def _offloads(state: _State, peak: int) -> list[_Offload]:
    """Every value live across step `peak` without being read there that the disk tier could hold."""
    out = []
    for n in state.alone:
        first, last = state.pos[n], state.live.spans[state.live.slot_of[n]][1]
        if not first < peak < last or n.op == "storage" or peak in _all_readers(state, n):
            continue
        if n in state.viewed and state.views.get(n) is None:
            continue
        later = _late_readers(state, n, peak)
        if not later:  # Live past the peak only as a view's source, an output or for a flush: nothing to reload.
            continue
        at = min(later)
        size = state.live.sizes[n]
        if size:
            out.append(_Offload(n, at, size, transfer_seconds(size)))
    return out


def _all_readers(state: _State, n: Node) -> list[int]:
    """Positions of the readers of `n` and of its views (not the views themselves)."""
    views = state.views.get(n) or ()
    inner = set(views)
    order = state.live.order
    return [r for m in (n, *views) for r in state.readers.get(m, ()) if order[r] not in inner]


def _late_readers(state: _State, n: Node, peak: int) -> list[int]:
    """Positions of the readers of `n` (directly or through its views) after `peak`, but for the disk tier's
    own nodes (a flush of its write)."""
    order = state.live.order
    return [r for r in _all_readers(state, n) if r > peak and order[r].op != "storage"]


def _clone_views(graph: Graph, state: _State, n: Node, mapping: dict[Node, Node]) -> list[Node]:
    """Views of `n` rebuilt on `mapping[n]` (into `mapping`), so late readers of a view read the new copy."""
    made = []
    for v in state.views.get(n) or ():
        src = mapping.get(v.inputs[0])
        if src is not None:
            mapping[v] = graph.add_node(v.op, [src, *v.inputs[1:]], dict(v.attrs))
            made.append(mapping[v])
    return made


def _rewire(graph: Graph, state: _State, mapping: dict[Node, Node], at: int) -> None:
    """Readers of each original in `mapping` at step `at` or later read its copy instead."""
    for n, copy in mapping.items():
        for reader in graph.consumers(n):
            if reader in state.pos and state.pos[reader] >= at:
                for k, i in enumerate(reader.inputs):
                    if i is n:
                        graph.set_input(reader, k, copy)


def _tier_choices(graph: Graph, state: _State, peak: int, copies, futile, tiers: str) -> list:
    """The moves one greedy round weighs, best first: recompute choices, offloads, or per value the cheaper."""
    if tiers == "never":
        return _choices(graph, state, peak, copies, futile)
    offloads = _offloads(state, peak)
    if tiers == "disk":
        return sorted(offloads, key=lambda c: (-c.saved, c.node.id))
    if tiers == "disk-first":
        # Every offload first (the largest first), then what only recomputing can move off the peak.
        offloads.sort(key=lambda c: (-c.saved, c.node.id))
        held = {c.node for c in offloads}
        rest = [c for c in _choices(graph, state, peak, copies, futile) if c.node not in held]
        for choice in rest:
            choice.seconds = recompute_seconds(choice.clones)
        return offloads + sorted(rest, key=lambda c: (-c.saved / (c.seconds + 1e-9), c.node.id))
    remat = {c.node: c for c in _choices(graph, state, peak, copies, futile)}
    picked: list = []
    for off in offloads:
        rc = remat.pop(off.node, None)
        if rc is not None:
            rc_s = recompute_seconds(rc.clones)
            if rc_s <= off.seconds:
                rc.seconds, rc.transfer = rc_s, off.seconds
                picked.append(rc)
                continue
            off.recompute = rc_s
        picked.append(off)
    for rc in remat.values():
        rc.seconds, rc.transfer = recompute_seconds(rc.clones), None
        picked.append(rc)
    return sorted(picked, key=lambda c: (-c.saved / (c.seconds + 1e-9), c.node.id))


def _place_offloads(graph: Graph, state: _State, moves: list[_Offload], peak: int, target: float) -> None:
    """Add each move's offload, flush, prefetch and reload nodes and put them where they belong in the schedule.

    The offload runs right after the value's last reader before the peak and
    starts an asynchronous write; the flush, which waits for that write and
    reads the value (so its slot stays untouched until then), goes after as
    many steps as cover the write's estimated time, but before the peak and
    before any step whose live bytes are over `target`. The
    reload runs right before the value's first reader after the peak (every
    later reader reads the reloaded copy), and the prefetch early enough
    before it that the estimated read time is covered by the compute between.
    """
    if not moves:
        return
    order = state.live.order
    after: dict[Node, list[Node]] = {}
    before: dict[Node, list[Node]] = {}
    new: set[Node] = set()
    for mv in moves:
        n = mv.node
        early = max((r for r in state.readers[n] if r < mv.at), default=state.pos[n])
        key = next(_key_counter)
        tok = graph.add_node("storage", [n], {"action": "offload", "key": key, "async": True})
        flush = graph.add_node("storage", [tok, n], {"action": "flush", "key": key})
        pre = graph.add_node("storage", [flush], {"action": "prefetch", "key": key})
        back = graph.add_node("storage", [pre], {"action": "reload", "key": key, "shape": tuple(n.shape),
                                                  "dtype": n.dtype})
        # Late readers of `n`, and of its views (rebuilt on the reloaded copy), read the copy.
        mapping = {n: back}
        views = _clone_views(graph, state, n, mapping)
        _rewire(graph, state, mapping, mv.at)
        # The flush goes on from the offload over steps whose estimated time covers the write (half the round
        # trip), staying before the peak, where the value's bytes must be free.
        # A step whose live bytes are over the round's `target` needs the value gone first: the flush never
        # passes one, whatever the write costs (the budget comes before the overlap).
        done, covered = early, 0.0
        while (done + 1 < min(peak, mv.at) and covered < mv.seconds / 2
               and state.profile[done + 1] <= target):
            done += 1
            covered += _step_seconds(order[done])
        # The prefetch goes back from the reload over steps whose estimated time covers the read.
        lead, covered = mv.at, 0.0
        while lead - 1 > done and covered < mv.seconds / 2:
            lead -= 1
            covered += _step_seconds(order[lead])
        after.setdefault(order[early], []).append(tok)
        after.setdefault(order[done], []).append(flush)
        before.setdefault(order[lead], []).append(pre)
        before.setdefault(order[mv.at], []).extend([back, *views])
        new |= {tok, flush, pre, back, *views}
    sched: list[Node] = []
    for m in graph.topological_order():
        if m in new:
            continue
        sched += before.get(m, [])
        sched.append(m)
        sched += after.get(m, [])
    # The schedule is the graph's insertion order whenever that order is topological.
    graph._nodes = dict.fromkeys(sched)


def _step_seconds(step: Node) -> float:
    """The cost model's time for one scheduled step (nothing for inputs, constants and the disk tier's nodes)."""
    if step.op in ("input", "storage") or step.op in CONSTANT_OPS:
        return 0.0
    return recompute_seconds([step])


def _boundaries(live: MemoryPlan, crossing: list[Node], fwd_last: dict[Node, int], peak: int,
                k: int) -> list[int]:
    """`k - 1` schedule positions cutting the forward (steps before `peak`) into `k` segments.

    Each segment should hold about the same bytes of crossing values (those it
    will recompute); around each ideal cut the position where the fewest bytes
    must be kept to restart the forward there (Chen's checkpoint) wins.
    """
    if peak < 2:
        return []
    cut = [0] * (peak + 2)      # Bytes computed before b and read by the forward at b or later.
    for n, last in fwd_last.items():
        cut[live.pos[n] + 1] += live.sizes[n]
        cut[last + 1] -= live.sizes[n]
    cut = list(np.cumsum(cut))
    weight = [0] * (peak + 1)   # Crossing bytes computed before b.
    for n in crossing:
        weight[live.pos[n] + 1] += live.sizes[n]
    weight = list(np.cumsum(weight))
    total = weight[peak]
    if total <= 0:
        return []
    cuts: list[int] = []
    for j in range(1, k):
        lo = int(np.searchsorted(weight, total * (j - 0.5) / k))
        mid = int(np.searchsorted(weight, total * j / k))
        hi = int(np.searchsorted(weight, total * (j + 0.5) / k))
        lo = max(lo, (cuts[-1] + 1) if cuts else 1)
        hi = min(hi, peak - 1)
        if lo > hi:
            continue
        cuts.append(min(range(lo, hi + 1), key=lambda b: (cut[b], abs(b - mid))))
    return cuts


def _segment(graph: Graph, k: int, decisions: list | None = None,
             seen: set | None = None) -> tuple[list, dict[Node, list[Node]]]:
    """Chen et al.'s checkpointing with `k` segments, applied to `graph` in place.

    The forward (the schedule before the live-bytes peak) is cut into `k`
    segments (`_boundaries`); values the forward reads across a cut are kept
    (the checkpoints), and every other value of segments 1..k-1 that lives
    across the peak is recomputed once, from the checkpoints, for its readers
    after the peak. The last segment is kept: its backward starts at once.
    Returns the stats (`_STATS`) and original -> clones; each recomputed value
    goes to `decisions`. With `seen` (the cut positions of segmentations
    already made), a segmentation whose cuts are among them is not made
    again: its stats are all zero and `graph` is left as it was (a short
    forward gives several `k` the same cuts).
    """
    state = _State(graph)
    live, pos = state.live, state.pos
    peak = int(np.argmax(state.profile))
    fwd_last: dict[Node, int] = {}
    for n in live.sizes:
        if pos[n] < peak:
            fwd_last[n] = max([r for r in state.readers[n] if r < peak], default=pos[n])
    crossing = [n for n in state.alone if recomputable(n) and pos[n] < peak < live.spans[live.slot_of[n]][1]
                and peak not in _all_readers(state, n) and (n not in state.viewed or state.views.get(n) is not None)]
    cuts = _boundaries(live, crossing, fwd_last, peak, k)
    stats: list[float] = [0] * len(_STATS)
    if seen is not None:
        if tuple(cuts) in seen:
            return stats, {}
        seen.add(tuple(cuts))
    kept = {n for n in fwd_last for b in cuts if pos[n] < b <= fwd_last[n]}  # The checkpoints.
    crossing_set = set(crossing)
    copies: dict[Node, list[Node]] = {}
    for lo, hi in zip([0, *cuts], cuts):
        targets = [n for n in crossing if lo <= pos[n] < hi and n not in kept]
        if not targets:
            continue
        # The segment's part that computes the targets, back to checkpoints and values kept anyway.
        need: set[Node] = set()
        stack = list(targets)
        while stack:
            n = stack.pop()
            if n in need:
                continue
            need.add(n)
            for i in n.inputs:
                if (i in live.sizes and lo <= pos[i] < hi and recomputable(i) and i not in kept
                        and (i in crossing_set or live.spans[live.slot_of[i]][1] < peak or i not in state.alone)):
                    stack.append(i)
        mapping: dict[Node, Node] = {}
        for n in sorted(need, key=pos.__getitem__):
            mapping[n] = _made(graph, graph.add_node(n.op, [mapping.get(i, i) for i in n.inputs], dict(n.attrs)))
            copies[n] = [mapping[n]]
        for n in sorted(need, key=pos.__getitem__):
            _clone_views(graph, state, n, mapping)  # Late readers of its views read views of the copy.
        _rewire(graph, state, mapping, peak + 1)
        stats[0] += len(targets)
        stats[1] += len(need)
        stats[2] += sum(flops(n) for n in need)
        seconds = recompute_seconds(need)
        stats[5] += seconds
        if decisions is not None:
            total = sum(live.sizes[n] for n in targets) or 1
            decisions += [TierChoice(_describe(n), live.sizes[n], "recompute", seconds * live.sizes[n] / total, None)
                          for n in targets]
    _prune_dead(graph)
    return stats, copies


def describe_peak(plan: MemoryPlan, largest: int = 6) -> str:
    """The step of `plan` where the most bytes are live, and the `largest` values live there (the floor no
    placement beats: to go lower, one of them must leave that step)."""
    if not plan.spans:
        return ""
    delta = [0] * (len(plan.order) + 1)
    for slot, (first, last) in plan.spans.items():
        delta[first] += plan.sizes[slot]
        delta[last + 1] -= plan.sizes[slot]
    profile = np.cumsum(delta[:-1])
    at = int(np.argmax(profile))
    live = sorted((s for s, (first, last) in plan.spans.items() if first <= at <= last),
                  key=lambda s: (-plan.sizes[s], s.id))
    names = ", ".join(f"{_describe(s)} {fmt_bytes(plan.sizes[s])}" for s in live[:largest])
    more = f" and {len(live) - largest} more" if len(live) > largest else ""
    return (f"live-bytes peak {fmt_bytes(int(profile[at]))} at step {at} ({_describe(plan.order[at])}), "
            f"live there: {names}{more}")


def output_bytes(graph: Graph) -> int:
    """Bytes of the arrays one run of `graph` returns, allocated outside the arena on every call.

    Each distinct computed output gets a fresh array; an output that is an
    input or a constant is copied once per place it appears (see
    `loom.runtime.executor.Executable`).
    """
    seen: set[Node] = set()
    total = 0
    for n in graph.outputs:
        if n.op == "input" or n.op in CONSTANT_OPS or n not in seen:
            total += nbytes(n)
        seen.add(n)
    return total


def rematerialize(graph: Graph, budget: int, strict: bool = False, offload: str = "never",
                  count_outputs: bool = True) -> tuple[Graph, RematReport]:
    """`graph` edited so its planned arena fits `budget` bytes, and what was done; see the module docstring.

    The budget is the whole step's memory: with `count_outputs` (default) the
    arrays the step returns (`output_bytes`: new parameters, optimizer state,
    gradients, the loss), which are allocated beside the arena on every call,
    count against it, so the arena gets ``budget - output_bytes(graph)``.

    Weighs the greedy against Chen's segmentation (`SEGMENT_COUNTS` segments,
    each finished by the greedy when it alone does not fit) and keeps the plan
    that fits with the fewest recomputed FLOPs, or the smallest arena when none
    fits. Returns the chosen graph (`graph` itself is left as it was or edited).

    Misses the budget with a `LoomWarning` (or `MemoryBudgetError` when
    `strict`) naming the budget and the smallest arena reached.

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((1024,), "float32")
    >>> a = g.add_node("exp", [x])                    # Read now and at the end: live throughout.
    >>> b = g.add_node("exp", [g.add_node("neg", [a])])
    >>> c = g.add_node("exp", [g.add_node("neg", [b])])
    >>> g.outputs = [g.add_node("mul", [g.add_node("add", [c, b]), a])]
    >>> g, report = rematerialize(g, 4 * 4096)          # The 4096 B output counts: the arena gets 12288 B.
    >>> report.arena_before, report.arena_after, report.outputs, report.values
    (16384, 12288, 4096, 1)
    """
    before = plan_memory(graph)
    if offload not in OFFLOAD_MODES:
        raise LoomValueError(f"loom: offload must be one of {OFFLOAD_MODES} ('never': recompute only, 'disk': "
                             f"offload only, 'auto': the cheaper per value), got {offload!r}")
    outputs = output_bytes(graph) if count_outputs else 0
    room = max(budget - outputs, 0)  # What the arena may take: the outputs are allocated beside it.
    source = graph
    report = RematReport(budget, before.arena_bytes, before.arena_bytes, before.lower_bound,
                         before.lower_bound, strict=strict, strategy="none", offload=offload, outputs=outputs)
    plan = before
    if before.arena_bytes > room:
        sched = graph.copy()
        moved = _detach_small_views(sched) + _reschedule(sched)
        sched_plan = plan_memory(sched) if moved else before
        if sched_plan.arena_bytes <= before.arena_bytes:
            graph, plan, report.rescheduled = sched, sched_plan, moved
            report.arena_rescheduled = sched_plan.arena_bytes
    if plan.arena_bytes > room:
        # (arena, cost, name, graph, plan, stats, decisions) per plan weighed; the cost is the extra FLOPs
        # (recomputation only) or the cost model's extra seconds (with the disk tier). Segmentations first
        # (cheap); the greedy finishes one that misses only while it could still beat the best fit found.
        timed = offload != "never"
        found: list[tuple] = []
        if offload != "disk":
            segmented: list = []
            cuts_seen: set[tuple[int, ...]] = set()
            for k in SEGMENT_COUNTS:
                g, dec = graph.copy(), list[TierChoice]()
                stats, copies = _segment(g, k, dec, cuts_seen)
                if stats[0]:
                    segmented.append((stats[5 if timed else 2], k, g, _plan(g), stats, copies, dec))
            for cost, k, g, p, stats, copies, dec in sorted(segmented, key=lambda c: (c[0], c[1])):
                name = f"segments({k})"
                if p.arena_bytes > room:
                    best_fit = min((f[1] for f in found if f[0] <= room), default=None)
                    if best_fit is not None and cost >= best_fit:
                        found.append((p.arena_bytes, cost, name, g, p, stats, dec))
                        continue
                    g, p, more = _greedy(g, room, p, copies, offload, dec,
                                         None if best_fit is None else best_fit - cost, timed)
                    stats = [a + b for a, b in zip(stats, more)]
                    name += ("+offload" if more[3] else "") + ("+greedy" if more[0] else "")
                found.append((p.arena_bytes, stats[5 if timed else 2], name, g, p, stats, dec))
            dec = []
            best_fit = min((f[1] for f in found if f[0] <= room), default=None)
            g, p, stats = _greedy(graph.copy(), room, plan, {}, offload, dec, best_fit, timed)
            name = "greedy" if not stats[3] else "offload+greedy" if stats[0] else "offload"
            found.append((p.arena_bytes, stats[5 if timed else 2], name, g, p, stats, dec))
        if offload != "never":
            dec = []
            best_fit = min((f[1] for f in found if f[0] <= room), default=None)
            g, p, stats = _greedy(graph.copy(), room, plan, {}, "disk", dec, best_fit, True, inline_reads=False)
            found.append((p.arena_bytes, stats[5], "offload", g, p, stats, dec))
            if p.arena_bytes > room:
                # The disk tier alone cannot fit it: a kernel reads more at once than the budget holds (the
                # GELU backward and the five values it reads), and reloading them does not change that. Offload
                # again with such kernels computing their elementwise inputs inline, and if that still misses,
                # finish with what only recomputing does (offloading first wherever that still frees bytes):
                # the budget is a promise with offload="disk" too.
                dec = []
                best_fit = min((f[1] for f in found if f[0] <= room), default=None)
                g, p, stats = _greedy(graph.copy(), room, plan, {}, "disk", dec, best_fit, True)
                name = "offload+inline" if stats[0] else "offload"
                if p.arena_bytes > room and (best_fit is None or stats[5] < best_fit):
                    g, p, more = _greedy(g, room, p, {}, "disk-first", dec,
                                         None if best_fit is None else best_fit - stats[5], True)
                    stats = [a + b for a, b in zip(stats, more)]
                    name += "+greedy" if more[0] else ""
                found.append((p.arena_bytes, stats[5], name, g, p, stats, dec))
        if offload == "auto" and not any(f[0] <= room for f in found):
            # The per-value choice depends on measured rates: where the disk looked cheaper, its reload
            # buffers can keep the plan just above the budget that recomputing alone meets. The budget
            # comes first, so recomputation only is weighed too before the budget is called missed.
            dec = []
            g, p, stats = _greedy(graph.copy(), room, plan, {}, "never", dec, None, True)
            found.append((p.arena_bytes, stats[5], "greedy", g, p, stats, dec))
        report.candidates = [(name, arena, st[2], arena <= room, st[4], st[5])
                             for arena, _, name, _, _, st, _ in found]
        fits = [f for f in found if f[0] <= room]
        arena, _, report.strategy, graph, plan, stats, report.tiers = (
            min(fits, key=lambda f: (f[1], f[0])) if fits else min(found, key=lambda f: (f[0], f[1])))
        (report.values, report.recomputed, report.extra_flops, report.offloaded, report.offload_bytes,
         report.seconds) = stats
    elif report.rescheduled:
        report.strategy = "schedule"
    graph.meta.pop("remat_made", None)
    source.meta.pop("remat_made", None)
    report.arena_after, report.lower_bound_after = plan.arena_bytes, plan.lower_bound
    report.met = plan.arena_bytes + outputs <= budget
    report.peak = describe_peak(plan)
    if not report.met:
        msg = (f"loom: memory budget {fmt_bytes(budget)} ({budget} B) cannot be met by rematerialisation: "
               f"the smallest planned arena reached is {fmt_bytes(plan.arena_bytes)} ({plan.arena_bytes} B, "
               f"from {before.arena_bytes} B; at least {plan.lower_bound} B are live at once; {report.peak})"
               + (f" beside {fmt_bytes(outputs)} ({outputs} B) of output arrays the step returns, which count "
                  f"against the budget (the arena may take {room} B)" if outputs else ""))
        if strict:
            raise MemoryBudgetError(msg + "; raise the budget or pass strict=False to run with the best plan")
        warnings.warn(msg + "; running with that plan", LoomWarning, stacklevel=2)
    return graph, report
