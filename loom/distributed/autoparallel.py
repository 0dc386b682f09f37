"""Auto-parallel: choose an SBP signature for every node of a traced graph by a cost model, and run the choice.

Given a graph (a `loom.function` training step, or any `loom.ir.Graph`) and a
1-D placement of ``n`` ranks, `plan` picks for each node one of its legal
rules from `loom.distributed.sbp_rules` (which input signatures it consumes,
which output signature it makes), minimising the predicted step time:

- **communication**: every edge whose producer's output signature is not the
  signature its consumer's rule wants is boxed; its cost is the collective's
  bytes per rank at the measured bandwidth plus its message hops at the
  measured latency (`sbp_rules.boxing_bytes`, `CostModel.link`);
- **computation**: each node's time at the measured rate (matmul FLOPs,
  bytes for the rest), divided by ``n`` when the rule shares the work out
  (any split or partial sum) and whole when every rank repeats it;
- **state**: a parameter the step updates must come back in the signature it
  went in with (its new value is boxed into it), so a replicated weight's
  gradient pays its all-reduce and a sharded weight pays nothing; values the
  step returns (the loss) are read whole, as ``broadcast``.

Inputs and parameters may start in any split or broadcast layout (the data
loader and the checkpoint loader shard them for free). The search is a
dynamic program over the DAG in topological order (each node's cheapest cost
per rule, given its inputs' cheapest costs) followed by greedy sweeps that
change one node at a time while the exact total falls, which settles the
nodes the tree-shaped program double counts (values with several consumers).

On a mesh of several axes (a 2-D placement) a node's candidates are tuples
of rules, one per axis, that never split a tensor dimension along two axes;
an edge costs each one-axis step of its boxing (in the order `sbp._box`
takes them), priced on the value as the other axes leave it, and a node's
work is divided by the ranks of every axis that shares it. The same search
runs over these tuples (jointly: what one axis chooses is priced with what
it costs the others), started from the axis-by-axis choice as well, so it
never ends above it; ``plan(..., joint=False)`` gives the axis-by-axis one.

`explain` prints the choice: each node's signature, the collectives inserted
and their predicted times, the predicted step time, and for each node the
cheapest alternative it rejected. `execute` runs a plan on the ranks (each
node on its local parts, NumPy reference kernels, boxing by MPI), so a plan's
result can be checked against one process.

Examples
--------
.. code-block:: python

    step(x, t)                                    # a loom.function, traced by its first calls
    p = autoparallel.plan(step, placement=sbp.placement())
    print(autoparallel.explain(p))                # chosen signatures, collectives, predicted time
"""
from __future__ import annotations

import math
import operator
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from loom.distributed import sbp_rules as R
from loom.distributed.sbp_rules import SBP, Link, broadcast, partial_sum, split
from loom.distributed.process_group import DistributedError
from loom.errors import LoomError, fmt_shape
from loom.ir.graph import Graph
from loom.ir.node import Node

__all__ = ["CostModel", "Plan", "NdPlan", "plan", "explain", "execute", "calibrate", "inputs_of", "DEFAULT_COST"]


@dataclass(frozen=True)
class CostModel:
    """Rates the plan is predicted with: the data plane `link`, matmul FLOP/s, and bytes/s for other ops."""

    link: Link
    matmul_flops: float
    bytes_per_s: float

    def boxing(self, src: SBP, dst: SBP, nbytes: float, parts: int) -> float:
        moved, hops = R.boxing_bytes(src, dst, nbytes, parts)
        return self.link.seconds(moved, hops) if hops else 0.0


DEFAULT_COST = CostModel(R.LOOPBACK_MPI, matmul_flops=2e10, bytes_per_s=5e9)
_CALIBRATED: dict[int, CostModel] = {}


def calibrate(group=None) -> CostModel:
    """Measure this job once: MPI all-reduce latency and bandwidth (`simulator.measure_allreduce`) and this
    rank's matmul and elementwise rates. Collective: every rank calls it; later calls return the same figures."""
    from loom.distributed.process_group import resolve
    from loom.distributed.simulator import measure_allreduce
    g = resolve(group, "autoparallel.calibrate")
    key = id(g)
    if g is None:
        raise DistributedError("loom.distributed.autoparallel.calibrate: this process is not in the group")
    if key not in _CALIBRATED:
        link = measure_allreduce(sizes=(2 ** 10, 2 ** 18, 2 ** 21), repeats=3)
        a = np.ones((256, 256), np.float32)
        t = time.perf_counter()
        for _ in range(3):
            a @ a
        flops = 3 * 2 * 256 ** 3 / max(time.perf_counter() - t, 1e-9)
        v = np.ones(2 ** 20, np.float32)
        t = time.perf_counter()
        for _ in range(3):
            v + v
        rate = 3 * 3 * v.nbytes / max(time.perf_counter() - t, 1e-9)
        # Every rank plans with the same figures: take rank 0's.
        figures = g._comm.bcast((link.latency, link.bandwidth, flops, rate), root=0)
        _CALIBRATED[key] = CostModel(Link(figures[0], figures[1]), figures[2], figures[3])
    return _CALIBRATED[key]


@dataclass
class Plan:
    """A signature per node of `graph` for a mesh of `parts` ranks, and what it is predicted to cost."""

    graph: Graph
    parts: int
    cost: CostModel
    rules: dict[Node, R.Rule]
    state: dict[Node, Node] = field(default_factory=dict)   # output node -> the input node it updates
    returned: tuple[Node, ...] = ()
    alternatives: dict[Node, tuple[R.Rule, float]] = field(default_factory=dict)
    # On an axis of a larger mesh: how much smaller each value (size_div) and each node's work (work_div) are
    # already, from the splits chosen on the axes before it.
    size_div: dict[Node, float] = field(default_factory=dict)
    work_div: dict[Node, float] = field(default_factory=dict)
    evaluations: int = 0   # How many times the search asked the cost model (`_Prices`), for the whole plan.

    def signature(self, node: Node) -> SBP:
        """The output signature chosen for `node`."""
        return self.rules[node][1]

    def boxings(self) -> list[tuple[Node, Node | None, SBP, SBP, str, float]]:
        """(producer, consumer or None for a state/returned value, from, to, collective, seconds) per boxing."""
        out: list[tuple[Node, Node | None, SBP, SBP, str, float]] = []
        for v in self.graph.topological_order():
            for u, want in zip(v.inputs, self.rules[v][0]):
                have = self.signature(u)
                if have != want:
                    out.append((u, v, have, want, R.boxing_kind(have, want),
                                self.cost.boxing(have, want, self.nbytes(u), self.parts)))
        for o in self.graph.outputs:
            back = self.signature(self.state[o]) if o in self.state else (broadcast if o in self.returned else None)
            if back is not None and self.signature(o) != back:
                out.append((o, None, self.signature(o), back, R.boxing_kind(self.signature(o), back),
                            self.cost.boxing(self.signature(o), back, self.nbytes(o), self.parts)))
        return out

    def nbytes(self, node: Node) -> float:
        """Bytes of `node`'s value as this axis sees it (after the splits of the axes before it)."""
        return _nbytes(node) / self.size_div.get(node, 1.0)

    @property
    def comm_time(self) -> float:
        return sum(b[-1] for b in self.boxings())

    @property
    def compute_time(self) -> float:
        return sum(_compute(v, self.rules[v], self.parts, self.cost) / self.work_div.get(v, 1.0)
                   for v in self.graph.topological_order())

    @property
    def predicted(self) -> float:
        """Predicted seconds per step: computation plus communication (not overlapped)."""
        return self.compute_time + self.comm_time


# ----------------------------------------------------------------------------- the cost of one choice
def _nbytes(n: Node) -> float:
    return float(math.prod(n.shape)) * n.dtype.itemsize


class _Prices:
    """The cost model's answers, each computed once per class: a node's whole time per (op, input shapes and
    item sizes, output shape and item size), a boxing per (bytes, from, to, ranks). `evaluations` counts the
    times the model itself was asked (what the search costs, beside its table look-ups)."""

    def __init__(self, cost: CostModel):
        self.cost = cost
        self.evaluations = 0
        self._whole: dict[tuple, float] = {}
        self._box: dict[tuple, float] = {}

    def whole(self, v: Node) -> float:
        """`v`'s time on one rank doing all of it."""
        key = (v.op, tuple((i.shape, i.dtype.itemsize) for i in v.inputs), v.shape, v.dtype.itemsize)
        t = self._whole.get(key)
        if t is None:
            self.evaluations += 1
            t = self._whole[key] = _whole_time(v, self.cost)
        return t

    def boxing(self, src: SBP, dst: SBP, nbytes: float, parts: int) -> float:
        key = (src, dst, nbytes, parts)
        t = self._box.get(key)
        if t is None:
            self.evaluations += 1
            t = self._box[key] = self.cost.boxing(src, dst, nbytes, parts)
        return t


def _whole_time(v: Node, cost: CostModel) -> float:
    if v.op in ("input", "buffer", "const"):
        return 0.0
    if v.op == "matmul":
        k = v.inputs[0].shape[-1]
        return 2.0 * math.prod(v.shape) * k / cost.matmul_flops
    if v.op in ("reshape", "permute", "expand"):
        return 0.0  # Views: no data moves until something reads them.
    return (sum(_nbytes(i) for i in v.inputs) + _nbytes(v)) / cost.bytes_per_s


def _compute(v: Node, rule: R.Rule, parts: int, cost: "CostModel | _Prices") -> float:
    t = cost.whole(v) if isinstance(cost, _Prices) else _whole_time(v, cost)
    shared = rule[1] != broadcast or any(s != broadcast for s in rule[0])
    return t / parts if shared else t


def _candidates(v: Node, parts: int) -> list[R.Rule]:
    if v.op in ("input", "buffer"):
        sigs = [split(d) for d in range(len(v.shape)) if v.shape[d] >= parts] + [broadcast]
        return [((), s) for s in sigs]
    if v.op == "rand":  # Every rank draws the same numbers; a split is a slice of them.
        return [((), broadcast)]
    return R.signatures(v.op, [i.shape for i in v.inputs], v.shape, v.attrs, parts)


# ----------------------------------------------------------------------------- the search
def plan(fn_or_graph, placement=None, *, parts: int | Sequence[int] | None = None, cost: CostModel | None = None,
         state: dict | None = None, returned: Sequence | None = None, sweeps: int = 4, joint: bool = True):
    """Choose a signature for every node of a graph on a mesh.

    On a placement of several axes (a 2-D mesh) each node gets one signature
    per axis, searched jointly: a node's candidates are the tuples of its
    per-axis rules that never split one tensor dimension along two axes, and
    an edge costs the collectives of every axis its value is boxed along
    (each moving the value as the other axes leave it). The result is an
    `NdPlan`. With ``joint=False`` the axes are searched one after the other
    instead, each seeing the values the axes before it split (cheaper to
    search, but blind to what a choice on the first axis costs the next).

    Parameters
    ----------
    fn_or_graph : loom.function or loom.ir.Graph
        A `loom.function` already called (its first traced graph is used:
        parameters it updates are paired with their new values, the values it
        returns are read whole), or a Graph.
    placement : sbp.Placement, optional
        The mesh; or give `parts`: its number of ranks, or its shape.
    cost : CostModel, optional
        Rates to predict with (`calibrate()` measures them on a live job);
        `DEFAULT_COST` otherwise.
    state : dict, optional
        For a Graph: ``{output node: input node}`` for each value the step
        updates (its new value goes back into the input's signature).
    returned : sequence of Node, optional
        For a Graph: outputs read whole (default: every output not in `state`).
    joint : bool
        On a mesh of several axes: search the axes jointly (default) or one
        after the other.
    """
    if placement is not None:
        shape = tuple(placement.shape)
    elif isinstance(parts, int):
        shape = (parts,)
    elif parts is not None:
        shape = tuple(parts)
    else:
        shape = ()
    if not shape or any(k < 1 for k in shape):
        raise LoomError("loom.distributed.autoparallel.plan: give a placement or parts (the number of ranks, or "
                        "a mesh shape)")
    graph, st, ret = _graph_of(fn_or_graph, state, returned)
    prices = _Prices(cost or DEFAULT_COST)
    result = _plan(graph, st, ret, shape, prices, sweeps, joint)
    result.evaluations = prices.evaluations
    return result


def _plan(graph: Graph, st: dict, ret: list, shape: tuple[int, ...], prices: "_Prices", sweeps: int, joint: bool):
    cost = prices.cost
    if len(shape) == 1:
        return _plan_axis(graph, st, ret, shape[0], prices, sweeps, [], {}, {})
    if joint:
        return _plan_joint(graph, st, ret, shape, prices, sweeps)
    # One axis after another, each seeing the values already split by the ones before (smaller values, less
    # work per rank) and never splitting a dimension they split.
    axes: list[Plan] = []
    size_div: dict[Node, float] = {}
    work_div: dict[Node, float] = {}
    for k in shape:
        p = _plan_axis(graph, st, ret, k, prices, sweeps, axes, dict(size_div), dict(work_div))
        axes.append(p)
        for v, (ins, out) in p.rules.items():
            if out.is_split:
                size_div[v] = size_div.get(v, 1.0) * k
            if out != broadcast or any(x != broadcast for x in ins):
                work_div[v] = work_div.get(v, 1.0) * k
    rules = {v: (tuple(zip(*[q.rules[v][0] for q in axes])), tuple(q.rules[v][1] for q in axes))
             for v in graph.topological_order()}
    return _nd_plan(graph, st, ret, shape, cost, rules, axes=axes, joint=False, prices=prices)


def _consumers(order: list[Node]) -> dict[Node, list[tuple[Node, int]]]:
    out: dict[Node, list[tuple[Node, int]]] = {v: [] for v in order}
    for v in order:
        for k, u in enumerate(v.inputs):
            out[u].append((v, k))
    return out


class _Costs:
    """The exact cost of a choice of rules (a dict node -> rule), and of the terms one node's rule touches.

    `box(u, have, want)` and `compute(v, rule)` give the prices; `whole` is
    the signature a returned value is read in. Rules are 1-D (`sbp_rules.Rule`)
    or one per mesh axis: the search does not look inside them.
    """

    def __init__(self, graph: Graph, st: dict, ret: list, box, compute, whole):
        self.order = graph.topological_order()
        self.inputs, self.outputs = list(graph.inputs), list(graph.outputs)
        self.st, self.ret, self.box, self.compute, self.whole = st, ret, box, compute, whole
        self.consumers = _consumers(self.order)
        self.paired_in = {i: o for o, i in st.items()}

    def local(self, chosen: dict, v: Node, rule) -> float:
        """The cost terms that involve `v`: its compute, its in-edges, out-edges, state pairing, being read."""
        box = self.box
        c = self.compute(v, rule)
        for u, want in zip(v.inputs, rule[0]):
            c += box(u, chosen[u][1], want)
        for w, k in self.consumers[v]:
            c += box(v, rule[1], chosen[w][0][k])
        if v in self.st:
            c += box(v, rule[1], chosen[self.st[v]][1])
        if v in self.paired_in:
            c += box(self.paired_in[v], chosen[self.paired_in[v]][1], rule[1])
        if v in self.ret:
            c += box(v, rule[1], self.whole)
        return c

    def total(self, chosen: dict) -> float:
        box = self.box
        c = sum(self.compute(v, chosen[v]) for v in self.order)
        for v in self.order:
            c += sum(box(u, chosen[u][1], want) for u, want in zip(v.inputs, chosen[v][0]))
        c += sum(box(o, chosen[o][1], chosen[i][1]) for o, i in self.st.items())
        return c + sum(box(o, chosen[o][1], self.whole) for o in self.ret)

    def alternatives(self, chosen: dict, cands: dict) -> dict:
        """For each node, its cheapest rejected rule and how much more the whole choice would cost with it."""
        out = {}
        for v in self.order:
            now = self.local(chosen, v, chosen[v])
            others = [(self.local(chosen, v, r) - now, r) for r in cands[v] if r != chosen[v]]
            if others:
                delta, rule = min(others, key=lambda x: x[0])
                out[v] = (rule, delta)
        return out


def _search(costs: _Costs, cands: dict, sweeps: int, start: dict | None = None) -> dict:
    """The cheapest rule per node that the search finds (see the module docstring for its four steps); `start`,
    a choice made otherwise (the axis-by-axis one), is improved by the same sweeps and kept if it ends cheaper.

    What makes it fast without changing what it finds: a sweep re-examines only the nodes whose neighbours
    changed since they were last examined (the others would keep their rule); the dynamic program's row for a
    node is kept for the layouts of the graph inputs it depends on, so a trial that flips one input recomputes
    only the rows downstream of it; and a trial already searched is not searched again.
    """
    order, box, compute = costs.order, costs.box, costs.compute
    neighbours: dict[Node, list[Node]] = {v: list(v.inputs) + [w for w, _ in costs.consumers[v]] for v in order}
    for o, i in costs.st.items():
        neighbours[o].append(i)
        neighbours[i].append(o)
    index = {v: k for k, v in enumerate(costs.inputs)}
    ancestors: dict[Node, tuple[int, ...]] = {}   # The graph inputs each node's value depends on.
    for v in order:
        deps = set()
        if v in index:
            deps.add(index[v])
        for u in v.inputs:
            deps.update(ancestors[u])
        ancestors[v] = tuple(sorted(deps))
    rows: dict[tuple, list] = {}   # (node, its inputs' fixed layouts) -> [row, outs, delivered or None, settled]
    decided: dict[tuple, int | None] = {}   # (node, its rule's rank, its neighbours' signatures) -> rank it takes.
    layouts_of = {v: (lambda ls: ()) if not ancestors[v] else
                  (lambda ls, k=ancestors[v][0]: (ls[k],)) if len(ancestors[v]) == 1 else
                  operator.itemgetter(*ancestors[v]) for v in order}

    def improve(chosen: dict, options: dict) -> dict:
        # 3. Greedy sweeps: change one node's rule while the exact total falls.
        stale = set(order)
        for _ in range(sweeps):
            improved = False
            for v in order:
                if v not in stale:
                    continue
                stale.discard(v)
                if _improve_node(chosen, v, options[v]):
                    improved = True
                    stale.update(neighbours[v])
            if not improved:
                break
        return chosen

    def _improve_node(chosen: dict, v: Node, opts: list) -> bool:
        """Give `v` the rule whose local cost is lowest (scanning in order, switching on a strict fall)."""
        j0 = rank_of[v].get(chosen[v]) if opts is cands[v] else None
        if j0 is not None:
            # The answer depends only on `v`'s rule and what its neighbours make and want: trials that leave
            # them as they were (most of the graph, most of the time) take it from here.
            key = (v, j0, *[chosen[u][1] for u in v.inputs], *[chosen[w][0][k] for w, k in costs.consumers[v]],
                   chosen[costs.st[v]][1] if v in costs.st else None,
                   chosen[costs.paired_in[v]][1] if v in costs.paired_in else None)
            best = decided.get(key, -1)
            if best == -1:
                best = decided[key] = _best_of(chosen, v, j0)
            if best is not None:
                if best == j0:
                    return False
                chosen[v] = opts[best]
                return True
        return _improve_one_at_a_time(chosen, v, opts)

    def _best_of(chosen: dict, v: Node, j0: int) -> int | None:
        """The rank of `v`'s cheapest candidate (the first strict fall below its current one), None off the tables."""
        prices_now = local_all(chosen, v)
        if prices_now is None:
            return None
        now, best = prices_now[j0], j0
        for j, c in enumerate(prices_now):
            if j != j0 and c < now - 1e-12:
                best, now = j, c
        return best

    def _improve_one_at_a_time(chosen: dict, v: Node, opts: list) -> bool:
        """A rule from outside the candidates (or a fixed input): its options priced one at a time."""
        now, changed = costs.local(chosen, v, chosen[v]), False
        for rule in opts:
            if rule != chosen[v]:
                c = costs.local(chosen, v, rule)
                if c < now - 1e-12:
                    chosen[v], now, changed = rule, c, True
        return changed

    # The dynamic program on arrays: per node its distinct output signatures, the signatures its consumers may
    # want, the boxing prices between them, and per candidate its compute price and the positions it reads.
    outs_of = {v: list(dict.fromkeys(r[1] for r in cands[v])) for v in order}
    opos = {v: {sig: k for k, sig in enumerate(outs_of[v])} for v in order}
    wants_of: dict[Node, list] = {v: [] for v in order}
    for v in order:
        for k, u in enumerate(v.inputs):
            wants_of[u].extend(r[0][k] for r in cands[v])
    for o, i in costs.st.items():   # The state pairings and the returned values are priced from the tables too.
        wants_of[o].extend(r[1] for r in cands[i])
    for o in costs.ret:
        wants_of[o].append(costs.whole)
    wpos = {}
    for u in order:
        wants_of[u] = list(dict.fromkeys(wants_of[u]))
        wpos[u] = {sig: k for k, sig in enumerate(wants_of[u])}
    price = {u: np.array([[box(u, o, w) for w in wants_of[u]] for o in outs_of[u]], dtype=np.float64)
             .reshape(len(outs_of[u]), len(wants_of[u])) for u in order}
    comp = {v: np.array([compute(v, r) for r in cands[v]], dtype=np.float64) for v in order}
    reads = {v: [np.array([wpos[u][r[0][k]] for r in cands[v]], dtype=np.intp) for k, u in enumerate(v.inputs)]
             for v in order}
    makes = {v: np.array([opos[v][r[1]] for r in cands[v]], dtype=np.intp) for v in order}
    rank_of = {v: {r: j for j, r in enumerate(cands[v])} for v in order}
    pairs = {i: np.array([wpos[o][r[1]] for r in cands[i]], dtype=np.intp) for o, i in costs.st.items()}

    def local_all(chosen: dict, v: Node) -> list | None:
        """`costs.local` of every candidate of `v` at once (the same sums in the same order), or None when a
        neighbour's rule is not in the tables."""
        try:
            c = comp[v].copy()
            for u, at in zip(v.inputs, reads[v]):
                c += price[u][opos[u][chosen[u][1]]][at]
            for w, k in costs.consumers[v]:
                c += price[v][:, wpos[v][chosen[w][0][k]]][makes[v]]
            if v in costs.st:
                c += price[v][:, wpos[v][chosen[costs.st[v]][1]]][makes[v]]
            if v in costs.paired_in:
                o = costs.paired_in[v]
                c += price[o][opos[o][chosen[o][1]]][pairs[v]]
            if v in costs.ret:
                c += price[v][:, wpos[v][costs.whole]][makes[v]]
        except KeyError:
            return None
        return c.tolist()

    def search(fixed: dict) -> dict:
        options = {v: ([((), fixed[v])] if v in fixed else cands[v]) for v in order}
        layouts = [fixed.get(i) for i in costs.inputs]
        # 1. Dynamic program, inputs before consumers: each node's cheapest cost under each of its rules, and the
        # cheapest cost of its value delivered in each signature a consumer may want.
        entry: dict[Node, list] = {}

        def delivered(u: Node) -> np.ndarray:
            e = entry[u]
            if e[2] is None:
                e[2] = (e[1][:, None] + price[u]).min(axis=0) if len(wants_of[u]) else np.zeros(0)
            return e[2]
        for v in order:
            key = (v, layouts_of[v](layouts))
            e: list | None = rows.get(key)
            if e is None:
                if v in fixed:
                    row, made = np.array([compute(v, options[v][0])]), np.array([opos[v][fixed[v]]], dtype=np.intp)
                else:
                    row, made = comp[v].copy(), makes[v]
                    for u, at in zip(v.inputs, reads[v]):
                        row += delivered(u)[at]
                best_out = np.full(len(outs_of[v]), math.inf)
                np.minimum.at(best_out, made, row)
                e = rows[key] = [row, best_out, None, {}]
            entry[v] = e
        # 2. Backtrack from the outputs: each node takes the rule its first consumer found cheapest.
        chosen: dict = {}

        def settle(v: Node, want) -> None:
            if v in chosen:
                return
            opts, e = options[v], entry[v]
            j = e[3].get(want)   # The same row and the same wish choose the same rule.
            if j is None:
                if len(opts) == 1:
                    j = 0
                elif want is None:
                    j = int(np.argmin(e[0]))   # The first of equals, as min() takes.
                else:
                    j = int(np.argmin(e[0] + price[v][:, wpos[v][want]][makes[v]]))
                e[3][want] = j
            chosen[v] = opts[j]
            for u, w in zip(v.inputs, chosen[v][0]):
                if u not in chosen:
                    settle(u, w)
        for o in costs.outputs:
            settle(o, costs.whole if o in costs.ret else None)
        for v in order:
            if v not in chosen:
                chosen[v] = options[v][-1]
        return improve(chosen, options)

    # 4. Outer greedy over the layouts of inputs and parameters (what couples the forward pass, the backward
    # pass and the update): flip one input's signature, search the rest, keep the flip if the total falls.
    chosen = search({})
    best_total = costs.total(chosen)
    if start is not None:
        other = improve(dict(start), cands)
        if costs.total(other) < best_total - 1e-12:
            chosen, best_total = other, costs.total(other)
    tried: dict[tuple, float] = {}   # The inputs' layouts of a trial -> its total.
    for _ in range(3):
        improved = False
        for v in costs.inputs:
            for rule in cands[v]:
                if rule == chosen[v]:
                    continue
                fixed = {i: chosen[i][1] for i in costs.inputs}
                fixed[v] = rule[1]
                key = tuple(fixed[i] for i in costs.inputs)
                if key in tried and tried[key] >= best_total - 1e-12:
                    continue  # Searched before, and no better than what we have now.
                trial = search(fixed)
                t = tried[key] = costs.total(trial)
                if t < best_total - 1e-12:
                    chosen, best_total, improved = trial, t, True
        if not improved:
            break
    return chosen


def _memo(fn):
    """`fn(*key)` remembered by its arguments (the search asks for the same prices many times)."""
    memo: dict = {}

    def get(*key):
        c = memo.get(key)
        if c is None:
            c = memo[key] = fn(*key)
        return c
    return get


def _plan_axis(graph: Graph, st: dict, ret: list, parts: int, prices: "_Prices", sweeps: int, earlier: list,
               size_div: dict, work_div: dict) -> Plan:
    """The search on one mesh axis of `parts` ranks, given the plans of the axes before it."""
    order = graph.topological_order()

    def allowed(v: Node, rule: R.Rule) -> bool:  # No tensor dimension split along two axes.
        for q in earlier:
            ins, out = q.rules[v]
            if rule[1].is_split and out.is_split and rule[1].dim == out.dim:
                return False
            if any(a.is_split and b.is_split and a.dim == b.dim for a, b in zip(rule[0], ins)):
                return False
        return True
    cands = {v: [r for r in _candidates(v, parts) if allowed(v, r)] for v in order}
    boxing = _memo(lambda u, have, want: prices.boxing(have, want, _nbytes(u) / size_div.get(u, 1.0), parts))

    def box(u: Node, have: SBP, want: SBP) -> float:
        return 0.0 if have is want or have == want else boxing(u, have, want)
    compute = _memo(lambda v, rule: _compute(v, rule, parts, prices) / work_div.get(v, 1.0))
    costs = _Costs(graph, st, ret, box, compute, broadcast)
    chosen = _search(costs, cands, sweeps)
    return Plan(graph, parts, prices.cost, chosen, st, tuple(ret), costs.alternatives(chosen, cands), size_div,
                work_div)


# ----------------------------------------------------------------------------- the joint search on a mesh
NdSig = tuple[SBP, ...]
NdRule = tuple[tuple[NdSig, ...], NdSig]


def _one_split_per_dim(sigs: Sequence[SBP]) -> bool:
    dims = [s.dim for s in sigs if s.is_split]
    return len(dims) == len(set(dims))


def _joint_candidates(v: Node, shape: tuple[int, ...]) -> list[NdRule]:
    """`v`'s rules on a mesh: one legal rule per axis, no tensor dimension split along two axes; all-broadcast
    last (the rules of each axis keep their table order, the first axis varying slowest)."""
    import itertools
    per_axis = [_candidates(v, k) for k in shape]
    out: list[NdRule] = []
    for combo in itertools.product(*per_axis):
        outs = tuple(r[1] for r in combo)
        ins = tuple(tuple(r[0][k] for r in combo) for k in range(len(v.inputs)))
        if _one_split_per_dim(outs) and all(_one_split_per_dim(i) for i in ins):
            out.append((ins, outs))
    return out


def _nd_step_cost(cost: "CostModel | _Prices", shape: tuple[int, ...], nbytes: float, ax: int, before: NdSig, src: SBP,
                  dst: SBP) -> float:
    """One step of nd boxing: the collective along axis `ax` on the value as the other axes leave it."""
    seen = nbytes / math.prod(shape[b] for b in range(len(shape)) if b != ax and before[b].is_split)
    return cost.boxing(src, dst, seen, shape[ax])


def _nd_box_cost(cost: "CostModel | _Prices", shape: tuple[int, ...], nbytes: float, have: NdSig, want: NdSig) -> float:
    return sum(_nd_step_cost(cost, shape, nbytes, *s) for s in R.nd_boxing_steps(have, want))


def _nd_compute(v: Node, rule: NdRule, shape: tuple[int, ...], cost: "CostModel | _Prices") -> float:
    """`v`'s time per rank: its whole time divided by the ranks of every axis whose rule shares the work."""
    t = _compute(v, ((), broadcast), 1, cost)
    for a, k in enumerate(shape):
        if rule[1][a] != broadcast or any(i[a] != broadcast for i in rule[0]):
            t /= k
    return t


class _NdCodes:
    """Nd signatures as small ints, so the joint search hashes and compares ints, not tuples of SBPs."""

    def __init__(self):
        self.ids: dict[NdSig, int] = {}
        self.sigs: list[NdSig] = []

    def sig(self, s: NdSig) -> int:
        k = self.ids.get(s)
        if k is None:
            k = self.ids[s] = len(self.sigs)
            self.sigs.append(s)
        return k

    def rule(self, r: NdRule) -> tuple:
        return tuple(self.sig(i) for i in r[0]), self.sig(r[1])

    def unrule(self, r: tuple) -> NdRule:
        return tuple(self.sigs[i] for i in r[0]), self.sigs[r[1]]


def _nd_search_space(graph: Graph, st: dict, ret: list, shape: tuple[int, ...], cost: CostModel,
                     prices: "_Prices | None" = None):
    """The joint search's codes, prices (on coded rules) and coded candidates per node.

    A boxing's price is kept per (bytes moved, from, to): nodes of one size share a table.
    """
    prices = prices or _Prices(cost)
    codes = _NdCodes()
    sigs = codes.sigs
    wide = 1 << 20   # have * wide + want: one int key per pair of coded signatures.
    tables: dict[float, dict[int, float]] = {}
    order = graph.topological_order()
    size = {u: _nbytes(u) for u in order}
    table = {u: tables.setdefault(size[u], {}) for u in order}

    def box(u: Node, have: int, want: int) -> float:
        if have == want:
            return 0.0
        t = table[u]
        key = have * wide + want
        c = t.get(key)
        if c is None:
            c = t[key] = _nd_box_cost(prices, shape, size[u], sigs[have], sigs[want])
        return c
    compute_memo: dict[tuple, float] = {}

    def compute(v: Node, rule: tuple) -> float:
        key = (v, rule)
        c = compute_memo.get(key)
        if c is None:
            c = compute_memo[key] = _nd_compute(v, codes.unrule(rule), shape, prices)
        return c
    costs = _Costs(graph, st, ret, box, compute, codes.sig(tuple(broadcast for _ in shape)))
    cands = {v: [codes.rule(r) for r in _joint_candidates(v, shape)] for v in costs.order}
    return codes, costs, cands


def _plan_joint(graph: Graph, st: dict, ret: list, shape: tuple[int, ...], prices: "_Prices", sweeps: int):
    """The search on a mesh of several axes, with one rule per axis for each node chosen together."""
    cost = prices.cost
    space = codes, costs, cands = _nd_search_space(graph, st, ret, shape, cost, prices)
    # The axis-by-axis choice is one starting point: the joint search never ends above it.
    start = _plan(graph, st, ret, shape, prices, sweeps, joint=False).rules
    chosen = _search(costs, cands, sweeps, {v: codes.rule(r) for v, r in start.items()})
    return _nd_plan(graph, st, ret, shape, cost, {v: codes.unrule(r) for v, r in chosen.items()}, space=space)


def _nd_plan(graph: Graph, st: dict, ret: list, shape: tuple[int, ...], cost: CostModel, rules: dict,
             axes: list | None = None, space: tuple | None = None, joint: bool = True,
             prices: "_Prices | None" = None) -> "NdPlan":
    """An `NdPlan` for the nd `rules`, its cheapest rejected alternative per node priced by the joint cost."""
    codes, costs, cands = space or _nd_search_space(graph, st, ret, shape, cost, prices)
    alternatives = {v: (codes.unrule(r), d)
                    for v, (r, d) in costs.alternatives({v: codes.rule(r) for v, r in rules.items()}, cands).items()}
    if axes is None:  # Each axis's view of the choice, as the executor and the one-axis reports read it.
        axes = [Plan(graph, k, cost, {v: (tuple(i[a] for i in r[0]), r[1][a]) for v, r in rules.items()}, st,
                     tuple(ret)) for a, k in enumerate(shape)]
    return NdPlan(graph, tuple(shape), cost, axes, rules, alternatives, st, tuple(ret), joint)


@dataclass
class NdPlan:
    """A plan on a mesh of several axes: a signature per axis for each node (`rules`), each axis's view of it
    (`axes`, one `Plan` per axis), and what it is predicted to cost, boxing priced over every axis it crosses."""

    graph: Graph
    shape: tuple[int, ...]
    cost: CostModel
    axes: list[Plan]
    rules: dict[Node, NdRule] = field(default_factory=dict)
    alternatives: dict[Node, tuple[NdRule, float]] = field(default_factory=dict)
    state: dict[Node, Node] = field(default_factory=dict)
    returned: tuple[Node, ...] = ()
    joint: bool = True
    evaluations: int = 0   # How many times the search asked the cost model (`_Prices`).

    def signature(self, node: Node) -> tuple[SBP, ...]:
        return self.rules[node][1]

    def boxings(self) -> list[tuple[Node, Node | None, NdSig, NdSig, list[tuple[int, str, SBP, SBP, float, float]]]]:
        """(producer, consumer or None for a state/returned value, from, to, steps) per boxed edge; a step is
        (axis, collective, from, to, bytes per rank, seconds)."""
        whole = tuple(broadcast for _ in self.shape)
        edges: list[tuple[Node, Node | None, NdSig, NdSig]] = [
            (u, v, self.signature(u), want) for v in self.graph.topological_order()
            for u, want in zip(v.inputs, self.rules[v][0])]
        for o in self.graph.outputs:
            back = self.signature(self.state[o]) if o in self.state else (whole if o in self.returned else None)
            if back is not None:
                edges.append((o, None, self.signature(o), back))
        out: list[tuple[Node, Node | None, NdSig, NdSig, list[tuple[int, str, SBP, SBP, float, float]]]] = []
        for u, v, have, want in edges:
            if have == want:
                continue
            steps = []
            for ax, before, src, dst in R.nd_boxing_steps(have, want):
                seen = _nbytes(u) / math.prod(self.shape[b] for b in range(len(self.shape))
                                              if b != ax and before[b].is_split)
                moved, _ = R.boxing_bytes(src, dst, seen, self.shape[ax])
                steps.append((ax, R.boxing_kind(src, dst), src, dst, moved,
                              _nd_step_cost(self.cost, self.shape, _nbytes(u), ax, before, src, dst)))
            out.append((u, v, have, want, steps))
        return out

    @property
    def comm_time(self) -> float:
        return sum(s[-1] for b in self.boxings() for s in b[-1])

    @property
    def compute_time(self) -> float:
        return sum(_nd_compute(v, self.rules[v], self.shape, self.cost) for v in self.graph.topological_order())

    @property
    def predicted(self) -> float:
        """Predicted seconds per step: computation plus communication (not overlapped)."""
        return self.compute_time + self.comm_time


def _graph_of(fn_or_graph, state, returned) -> tuple[Graph, dict[Node, Node], list[Node]]:
    # Lists, not sets: every rank must add the costs in one order and so reach the same plan.
    if isinstance(fn_or_graph, Graph):
        g = fn_or_graph
        st = dict(state or {})
        ret = list(returned) if returned is not None else [o for o in g.outputs if o not in st]
        return g, st, ret
    cache = getattr(fn_or_graph, "_cache", None)
    if not cache:
        raise LoomError("loom.distributed.autoparallel.plan: expected a Graph or a loom.function that has been "
                        f"called (traced) at least warmup + 1 times, got {type(fn_or_graph).__name__}")
    entry = next(iter(cache.values()))
    g = entry.graph
    inputs = {n.name: n for n in g.inputs}
    outs = list(g.outputs)
    st = {}
    for k, (kind, ref) in enumerate(entry.mutated):
        o = outs[entry.n_returned + k]
        if kind == "arg":
            st[o] = inputs[f"arg{ref}"]
            continue
        t = ref()
        for j, (wr, _shape, _dtype) in enumerate(entry.externals):
            if t is not None and wr() is t:
                st[o] = inputs[f"ext{j}"]
    return g, st, outs[:entry.n_returned]


# ----------------------------------------------------------------------------- the report
def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt_s(t: float) -> str:
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _label(v: Node) -> str:
    return f"%{v.id}" + (f" '{v.name}'" if v.name else "")


def explain(p, placement=None, **options) -> str:
    """The plan as text: each node's signature and rejected alternative, the collectives, the predicted time.

    `p` is a `Plan`, or what `plan` takes (a traced `loom.function` or a Graph,
    with `placement` or ``parts=`` and the other options of `plan`), planned here.

    Examples
    --------
    >>> import loom
    >>> from loom.distributed import autoparallel as ap
    >>> g = loom.ir.Graph()
    >>> x, w = g.add_input((4096, 64), "float32"), g.add_input((64, 64), "float32")
    >>> g.outputs = [g.add_node("sum", [g.add_node("matmul", [x, w])], {"axes": (0, 1), "keepdim": False})]
    >>> print(ap.explain(g, parts=2).splitlines()[-1])
    inputs and parameters: %... [4096, 64] split(0), %... [64, 64] broadcast
    """
    if not isinstance(p, (Plan, NdPlan)):
        p = plan(p, placement, **options)
    nd = isinstance(p, NdPlan)
    if nd:
        search = "searched jointly" if p.joint else "searched axis by axis"
        mesh = f"a {' x '.join(str(k) for k in p.shape)} mesh, {search}"
    else:
        mesh = f"{p.parts} ranks"
    lines = [f"auto-parallel plan over {mesh} (link {_fmt_s(p.cost.link.latency)} per hop, "
             f"{p.cost.link.bandwidth / 1e9:.2f} GB/s; matmul {p.cost.matmul_flops / 1e9:.1f} GFLOP/s)", "",
             "nodes (signature <- input signatures; cheapest rejected alternative):"]

    def fmt(sig) -> str:
        return f"({', '.join(map(str, sig))})" if nd else str(sig)
    for v in p.graph.topological_order():
        ins, out = p.rules[v]
        src = f" <- {', '.join(fmt(i) for i in ins)}" if ins else ""
        alt = p.alternatives.get(v)
        alt_s = ""
        if alt:
            (a_ins, a_out), delta = alt
            rule = fmt(a_out) + (f"<-{','.join(fmt(i) for i in a_ins)}" if a_ins else "")
            alt_s = f"   rejected {rule} (+{_fmt_s(delta)})"
        lines.append(f"  {_label(v):<14} {v.op:<10} {fmt_shape(v.shape):<14} {fmt(out)}{src}{alt_s}")
    lines.append("")
    if nd:  # One line per collective: an nd boxing may take a step on each axis.
        boxes = [(u, v, ax, kind, have, want, moved, secs) for u, v, _h, _w, steps in p.boxings()
                 for ax, kind, have, want, moved, secs in steps]
    else:
        boxes = [(u, v, None, kind, have, want, R.boxing_bytes(have, want, p.nbytes(u), p.parts)[0], secs)
                 for u, v, have, want, kind, secs in p.boxings()]
    lines.append(f"collectives inserted ({len(boxes)}):")
    for u, v, ax, kind, have, want, moved, secs in boxes:
        where = f"into {_label(v)} {v.op}" if v is not None else \
            ("back into " + _label(p.state[u]) if u in p.state else "returned")
        axis = f"axis {ax}: " if nd else ""
        lines.append(f"  {axis}{kind:<14} {_label(u)} {have} -> {want} {where}: {_fmt_bytes(moved)} per rank, "
                     f"{_fmt_s(secs)}")
    if not boxes:
        lines.append("  none")
    lines.append("")
    lines.append(f"predicted step: {_fmt_s(p.predicted)} = compute {_fmt_s(p.compute_time)} + communication "
                 f"{_fmt_s(p.comm_time)}")
    lines.append("inputs and parameters: " + ", ".join(
        f"{_label(v)} {fmt_shape(v.shape)} {fmt(p.signature(v))}" for v in p.graph.inputs))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- running a plan
def inputs_of(fn, *args) -> list[np.ndarray]:
    """The values of a traced `loom.function`'s graph inputs for a call with `args`: the arguments, then the
    tensors it reads (parameters, optimizer state) and its runtime scalars (learning rates), as they are now."""
    cache = getattr(fn, "_cache", None)
    if not cache:
        raise LoomError("loom.distributed.autoparallel.inputs_of: expected a loom.function that has been traced")
    entry = next(iter(cache.values()))
    if entry.rands or entry.grad_args:
        raise LoomError("loom.distributed.autoparallel.inputs_of: the step draws random numbers or reads existing "
                        ".grad values; feed its graph's inputs by hand")
    values = [a.detach().numpy() for a in args if hasattr(a, "detach")]
    for ref, _shape, _dtype in entry.externals:
        t = ref()
        if t is None:
            raise LoomError("loom.distributed.autoparallel.inputs_of: a tensor the step reads no longer exists")
        values.append(t.detach().numpy())
    values += [np.asarray(getter(), dtype=d.np) for getter, d in entry.scalars]
    return values


def _bounds(n: int, parts: int) -> list[tuple[int, int]]:
    from loom.distributed.sbp import _bounds as b
    return b(n, parts)


def _take(a: np.ndarray, dim: int, lo: int, hi: int) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[dim] = slice(lo, hi)
    return np.ascontiguousarray(a[tuple(index)])


def _box_np(a: np.ndarray, have: SBP, want: SBP, shape, comm) -> np.ndarray:
    """NumPy boxing on one mesh axis (`comm`): the executed plan's collectives."""
    from mpi4py import MPI
    from loom.distributed.sbp import np_all_to_all, np_reduce_scatter
    parts, me = comm.Get_size(), comm.Get_rank()
    if have == want:
        return a
    if have.is_split and want.is_split:
        return np_all_to_all(a, _dim(have), _dim(want), tuple(shape), comm)
    if have == partial_sum and want.is_split:
        return np_reduce_scatter(np.ascontiguousarray(a), _dim(want), comm)
    if have.is_split:  # all_gather (uneven parts allowed), then on from the whole value.
        whole = np.concatenate(comm.allgather(a), axis=_dim(have))
        return _box_np(whole, broadcast, want, shape, comm)
    if have == partial_sum:
        a = np.ascontiguousarray(a).copy()
        comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        return _box_np(a, broadcast, want, shape, comm)
    if want.is_split:
        lo, hi = _bounds(shape[_dim(want)], parts)[me]
        return _take(a, _dim(want), lo, hi)
    return a if me == 0 else np.zeros_like(a)  # broadcast -> partial_sum


def _dim(s: SBP) -> int:
    return int(s.dim) if s.dim is not None else 0


def _comm(group):
    """The MPI communicator of `group` (the job's when None); an error on a rank outside it."""
    from loom.distributed.process_group import resolve
    g = resolve(group, "autoparallel.execute")
    if g is None:
        raise DistributedError("loom.distributed.autoparallel.execute: this process is not in the plan's placement")
    return g._comm


def _box_nd_np(a: np.ndarray, have: tuple, want: tuple, shape, comms: list) -> np.ndarray:
    """NumPy boxing over every mesh axis, one axis at a time in the order of `_nd_steps` (as `sbp._box`)."""
    for ax, _before, src, dst in R.nd_boxing_steps(tuple(have), tuple(want)):
        a = _box_np(a, src, dst, shape, comms[ax])
    return a


def execute(p, *values, placement=None) -> tuple[np.ndarray, ...]:
    """Run plan `p` (a `Plan`, or an `NdPlan` with the mesh `placement` it was made for) on this job's ranks with
    the whole input `values` (the same on every rank, one per graph input); returns every output's whole value
    (NumPy). Collective: every rank of the mesh calls it."""
    from loom.runtime import reference
    axes = p.axes if isinstance(p, NdPlan) else [p]
    if len(axes) > 1:
        if placement is None or tuple(placement.shape) != tuple(p.shape):
            raise LoomError(f"loom.distributed.autoparallel.execute: a plan for a mesh of shape {list(p.shape)} "
                            f"needs that placement, got {placement}")
        comms = [_comm(placement.axis(k).group) for k in range(len(axes))]
    else:
        comms = [_comm(placement.group if placement is not None else None)]
    whole = _comm(placement.group if placement is not None else None)
    sizes = tuple(c.Get_size() for c in comms)
    coords = [c.Get_rank() for c in comms]
    if sizes != tuple(q.parts for q in axes):
        raise LoomError(f"loom.distributed.autoparallel.execute: the plan is for a mesh of {[q.parts for q in axes]} "
                        f"ranks, the job gives {list(sizes)}")
    g = p.graph
    mine = [str([q.rules[v] for q in axes]) for v in g.topological_order()]
    if len(set(map(tuple, whole.allgather(mine)))) != 1:
        raise LoomError("loom.distributed.autoparallel.execute: the ranks hold different plans; plan with the same "
                        "cost model on every rank (calibrate() shares rank 0's figures)")
    if len(values) != len(g.inputs):
        raise LoomError(f"loom.distributed.autoparallel.execute: the graph takes {len(g.inputs)} inputs, got "
                        f"{len(values)}")
    every_b = tuple(broadcast for _ in axes)

    def sig(u: Node) -> tuple:
        return tuple(q.signature(u) for q in axes)

    def local_shape(shape, sigs) -> tuple[int, ...]:
        out = list(shape)
        for k, s_ in enumerate(sigs):
            if s_.is_split:
                lo, hi = _bounds(shape[s_.dim], sizes[k])[coords[k]]
                out[s_.dim] = hi - lo
        return tuple(out)
    env: dict[Node, np.ndarray] = {}
    for node, val in zip(g.inputs, values):
        a = np.asarray(val.numpy() if hasattr(val, "numpy") else val).astype(node.dtype.np, copy=False)
        env[node] = _box_nd_np(a.reshape(node.shape), every_b, sig(node), node.shape, comms)
    with np.errstate(all="ignore"):
        for v in g.topological_order():
            if v in env:
                continue
            if v.op == "buffer":
                env[v] = _box_nd_np(v.buffer, every_b, sig(v), v.shape, comms)
                continue
            arrays = [_box_nd_np(env[u], sig(u), tuple(q.rules[v][0][k] for q in axes), u.shape, comms)
                      for k, u in enumerate(v.inputs)]
            oshape = local_shape(v.shape, sig(v))
            attrs = _local_attrs(v, oshape)
            fakes = tuple(Node("input", (), {}, tuple(a.shape), u.dtype) for a, u in zip(arrays, v.inputs))
            env[v] = reference.evaluate(Node(v.op, fakes, attrs, oshape, v.dtype), arrays)
    return tuple(_box_nd_np(env[o], sig(o), every_b, o.shape, comms) for o in g.outputs)


def _local_attrs(v: Node, oshape: tuple[int, ...]) -> dict[str, Any]:
    """`v`'s attributes for its local part: target shapes become local shapes; whole-dimension slices end at the
    local size."""
    attrs = dict(v.attrs)
    if v.op in ("reshape", "expand", "const", "arange", "rand") and "shape" in attrs:
        attrs["shape"] = oshape
    if v.op == "slice":
        attrs["stops"] = tuple(min(s, o) if st == 0 and sp == 1 and s >= full else s
                               for s, o, st, sp, full in zip(attrs["stops"], oshape, attrs["starts"],
                                                             attrs["steps"], v.inputs[0].shape))
    return attrs
