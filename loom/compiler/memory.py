"""Static memory planning: every intermediate gets an offset in one arena, decided before running.

The schedule is the graph's topological order. A value is live from the step
that computes it to the last step that reads it (both inclusive), so a node's
result never shares bytes with the inputs it reads, unless the in-place pass
marked the node (``graph.meta["inplace"] = {node: input_index}``), in which
case it takes over that input's slot. Graph inputs, constants and outputs are
not placed: inputs and constants already have memory, and outputs get arrays
of their own so they can be returned. Views (reshape, permute, expand, slice,
flip) are not placed either: they read their source's memory through strides,
and the source stays live until the last reader of any view of it, so a
transposed operand is never copied (`MemoryPlan.alias` names each view's source).

Slots are placed greedily by size (largest first), each at the best-fitting
gap among the slots whose lifetimes overlap it. The plan reports the arena
size beside the lower bound: the most bytes simultaneously live at any step,
which no placement can beat.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loom.compiler.constants import nbytes
from loom.errors import fmt_shape
from loom.ir.graph import CONSTANT_OPS, Graph
from loom.ir.node import Node

ALIGNMENT = 64
VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "flip"})
_BLOCK = 32  # Schedule steps per block of the placement index.


def _aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


@dataclass(repr=False)
class MemoryPlan:
    """Where each intermediate of a graph lives in one arena of `arena_bytes` bytes.

    Attributes
    ----------
    order : list of Node
        The schedule (topological order) the intervals refer to.
    offsets : dict Node -> int
        Byte offset of each placed node (a multiple of `alignment`).
    sizes : dict Node -> int
        Bytes of each placed node's value.
    intervals : dict Node -> (int, int)
        First and last schedule step (inclusive) at which the node's slot is
        live; nodes sharing a slot in place share its interval.
    shares : dict Node -> Node
        For in-place nodes: the node whose slot they took over.
    arena_bytes : int
        The planned peak: the arena's size.
    lower_bound : int
        The most bytes simultaneously live at any step.
    """

    order: list[Node]
    offsets: dict[Node, int] = field(default_factory=dict)
    sizes: dict[Node, int] = field(default_factory=dict)
    intervals: dict[Node, tuple[int, int]] = field(default_factory=dict)
    shares: dict[Node, Node] = field(default_factory=dict)
    arena_bytes: int = 0
    lower_bound: int = 0
    alignment: int = ALIGNMENT
    pos: dict[Node, int] = field(default_factory=dict)
    spans: dict[Node, list[int]] = field(default_factory=dict)
    slot_of: dict[Node, Node] = field(default_factory=dict)
    alias: dict[Node, Node] = field(default_factory=dict)  # Unplaced views: the value whose memory they read.

    def view(self, arena: np.ndarray, node: Node) -> np.ndarray:
        """The C-contiguous array of `node`'s shape and stored dtype at its offset in `arena` (uint8)."""
        off, size = self.offsets[node], self.sizes[node]
        return arena[off:off + size].view(node.dtype.np).reshape(node.shape)

    @property
    def unplanned_bytes(self) -> int:
        """What the placed values would take with one array each (no reuse)."""
        return sum(self.sizes[n] for n in self.offsets if n not in self.shares)

    def __repr__(self) -> str:
        return (f"<loom.compiler.MemoryPlan: arena {self.arena_bytes} B, lower bound {self.lower_bound} B, "
                f"{len(self.offsets)} placed values>")

    def __str__(self) -> str:
        ratio = f" ({self.arena_bytes / self.lower_bound:.3f}x)" if self.lower_bound else ""
        lines = [f"memory plan: arena {self.arena_bytes} B, lower bound {self.lower_bound} B{ratio}, "
                 f"{len(self.offsets)} placed values, {len(self.shares)} in place, "
                 f"{self.unplanned_bytes} B without reuse"]
        for n in self.order:
            if n in self.offsets:
                first, last = self.intervals[n]
                shared = f" (in place of %{self.shares[n].id})" if n in self.shares else ""
                lines.append(f"  %{n.id:<6} {n.op:<10} {n.dtype.name}{fmt_shape(n.shape):<16} "
                             f"offset {self.offsets[n]:>10}  size {self.sizes[n]:>10}  live "
                             f"[{first}, {last}]{shared}")
        return "\n".join(lines)


def plan_memory(graph: Graph) -> MemoryPlan:
    """Plan one arena for the intermediates of `graph` (see the module docstring).

    Examples
    --------
    >>> import loom
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((256,), "float32")
    >>> a = g.add_node("exp", [x])
    >>> b = g.add_node("neg", [a])
    >>> c = g.add_node("exp", [b])
    >>> g.outputs = [g.add_node("sum", [c], {"axes": (0,), "keepdim": False})]
    >>> plan = plan_memory(g)
    >>> plan.arena_bytes, plan.lower_bound   # a and c share a slot; b needs another
    (2048, 2048)
    """
    plan = live_slots(graph)
    span = plan.spans

    # Greedy by size: the largest slot first, into the tightest gap among those live at the same time.
    # Placed slots are filed by blocks of schedule steps, so finding the ones a slot's lifetime
    # meets reads a few blocks instead of every slot placed so far.
    offset_of: dict[Node, int] = {}
    done: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    blocks: dict[int, list[int]] = {}
    for slot in sorted(span, key=lambda s: (-plan.sizes[s], span[s][0], s.id)):
        first, last = span[slot]
        size = _aligned(plan.sizes[slot])
        near = {k for b in range(first // _BLOCK, last // _BLOCK + 1) for k in blocks.get(b, ())}
        busy = sorted((o, e) for o, e, f, la in (done[k] for k in near) if f <= last and first <= la)
        best, best_gap, cursor = None, None, 0
        for o, e in busy:
            gap = o - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, e)
        offset = best if best is not None else cursor
        offset_of[slot] = offset
        if size:
            for b in range(first // _BLOCK, last // _BLOCK + 1):
                blocks.setdefault(b, []).append(len(done))
            done.append((offset, offset + size, first, last))
        plan.arena_bytes = max(plan.arena_bytes, offset + size)
    for n, slot in plan.slot_of.items():
        plan.offsets[n] = offset_of[slot]
    return plan


def live_slots(graph: Graph) -> MemoryPlan:
    """The schedule, slots and live intervals of `graph`'s intermediates, and the lower bound; no offsets.

    `plan_memory` places these slots; the rematerialisation pass reads them to
    find what is live at the peak.
    """
    from loom.compiler.constants import reusable

    order = graph.topological_order()
    pos = {n: k for k, n in enumerate(order)}
    outputs = set(graph.outputs)
    plan = MemoryPlan(order)
    plan.pos = pos
    # A view (reshape, permute, ...) is not placed: it reads its source's memory through strides, and the
    # source stays live until the view's (and its own views') last reader. A transpose is never a copy.
    alias: dict[Node, Node] = {}
    for n in order:
        if n.op in VIEW_OPS and n not in outputs and n.inputs:
            alias[n] = alias.get(n.inputs[0], n.inputs[0])
    placed = [n for n in order if n.op != "input" and n.op not in CONSTANT_OPS and n not in outputs
              and n not in alias]

    # Slots: a node starts its own, or continues its donor's when marked in place.
    slot_of: dict[Node, Node] = {}
    marks = graph.meta.get("inplace") or {}
    for n in placed:
        k = marks.get(n)
        donor = n.inputs[k] if k is not None and reusable(graph, n, k, outputs) else None
        if donor is not None and donor in slot_of:
            slot_of[n] = slot_of[donor]
            plan.shares[n] = donor
        else:
            slot_of[n] = n
        plan.sizes[n] = nbytes(n)

    reads: dict[Node, int] = {}  # Last reader of each value, through the views of it.
    users = graph._users  # Read only (consumers() copies).
    for n in reversed(order):
        last = pos[n]
        for c in users[n]:
            last = max(last, pos[c], reads[c] if c.inputs[0] is n and alias.get(c) is not None else last)
        reads[n] = last
    span: dict[Node, list[int]] = {}
    for n in placed:
        last = reads[n]
        s = span.setdefault(slot_of[n], [pos[n], last])
        s[0], s[1] = min(s[0], pos[n]), max(s[1], last)
    for n in placed:
        plan.intervals[n] = (span[slot_of[n]][0], span[slot_of[n]][1])

    # Lower bound: a sweep over the schedule, adding slots as they start and dropping them after they end.
    delta = [0] * (len(order) + 1)
    for slot, (first, last) in span.items():
        delta[first] += plan.sizes[slot]
        delta[last + 1] -= plan.sizes[slot]
    live = 0
    for d in delta:
        live += d
        plan.lower_bound = max(plan.lower_bound, live)

    plan.spans = span
    plan.slot_of = slot_of
    plan.alias = alias
    return plan
