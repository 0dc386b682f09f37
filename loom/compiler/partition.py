"""Partition a graph into tasks for the actor runtime: pipeline stages, then independent branches.

`partition(graph, stages)` splits a graph into `Part` s, each a subgraph
that one actor runs:

- **Pipeline stages.** Nodes the user marked with ``loom.stage(k)`` belong
  to stage k, and the backward of a stage's ops (autograd tells the trace)
  to the backward of stage k, placed with it; an unmarked node goes with the
  latest stage among its inputs, and a marked node never runs before a stage
  it reads from. For one input the order is forward 0..S-1, then backward
  S-1..0. A traced loop over micro-batches enters each stage block once per
  micro-batch, and each (stage, micro-batch) is a part of its own, so stage 0
  of micro-batch 1 runs beside stage 1 of micro-batch 0, backwards included
  (a GPipe schedule from the dependencies alone). Across calls, stages of
  consecutive inputs overlap too (`GraphProgram.map`).
- **Independent branches.** Inside a stage, nodes with no path between
  them (after leaving out the graph's inputs and constants, which every
  branch may read) form separate parts that run in parallel.

Values with no input behind them (constants and what is computed from
constants only) are copied into every part that reads them instead of
making parts of their own.

`compile_partitioned` compiles each part with the caller's compiler and
hands the result to the runtime as a `loom.runtime.actors.GraphProgram`: a
plan with one part is the plain compiled graph, called directly. A single
call runs its parts on actors in parallel only when two parts with no path
between them (branches of a stage, or stages of different micro-batches) each
hold at least `PARALLEL_MIN_WORK` FLOPs (`work`); smaller ones run one after
another in the caller's thread, since handing values between threads would
cost more than it saves. Streams of calls (`GraphProgram.map`)
always run on the actors, where stages overlap.

Examples
--------
>>> import loom
>>> from loom.compiler.partition import partition
>>> g = loom.ir.Graph()
>>> x = g.add_input((3,), "float32")
>>> g.outputs = [g.add_node("exp", [x]), g.add_node("neg", [x])]   # two branches
>>> [(p.name, [n.op for n in p.graph]) for p in partition(g).parts]
[('stage0.branch0', ['input', 'exp']), ('stage0.branch1', ['input', 'neg'])]
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from loom import _upper
from loom.errors import LoomWarning, MemoryBudgetError, fmt_shape
from loom.ir import collective
from loom.ir.graph import Graph
from loom.ir.ops import PRIMITIVES
from loom.ir.node import Node
from loom.runtime import actors, reference

__all__ = ["Part", "Partition", "StageTag", "partition", "compile_partitioned", "work", "PARALLEL_MIN_WORK",
           "PlanMemory", "TaskMemory", "fit_budget"]


class StageTag(NamedTuple):
    """Where a marked node belongs: pipeline stage `stage`, its forward or its backward, micro-batch `visit`.

    `visit` counts the ``loom.stage(stage)`` blocks before this one in the
    traced function (a loop over micro-batches enters each stage once per
    micro-batch); the backward of a staged op has its op's stage and visit.
    """

    stage: int
    backward: bool = False
    visit: int = 0


@dataclass
class Part:
    """One task: a subgraph, its stage, and where each of its inputs comes from.

    ``inputs[k]`` is ``(-1, i)`` for the graph's input i, or ``(p, j)`` for
    output j of part p (an earlier part). `backward` says the part runs the
    backward of its stage (placed with the stage's forward), `visit` the
    micro-batch.
    """

    name: str
    stage: int
    graph: Graph
    inputs: list[tuple[int, int]]
    backward: bool = False
    visit: int = 0


@dataclass
class Partition:
    """The parts of a graph in an order that runs (producers first), and where each graph output comes from.

    ``outputs[k]`` is ``(-1, i)`` (graph input i), ``(p, j)`` (output j of
    part p) or ``(-2, array)`` (a constant).
    """

    parts: list[Part]
    outputs: list[tuple[int, Any]]
    n_inputs: int


def partition(graph: Graph, stages: Mapping[Node, int | StageTag] | None = None) -> Partition:
    """Split `graph` into parts by pipeline stage (`stages`: node -> stage number or tag) and independent branch.

    Stages run in the order of a pipeline's schedule for one micro-batch:
    the forwards of stages 0, 1, ..., S-1, then the backwards of stages S-1,
    ..., 0; within that, micro-batch by micro-batch. A node runs no earlier
    than what it reads, so an unmarked node joins the latest of its inputs.
    """
    tags = {n: t if isinstance(t, StageTag) else StageTag(int(t)) for n, t in (stages or {}).items()}
    last = max((t.stage for t in tags.values()), default=0)

    def key(t: StageTag) -> tuple[int, int]:
        return (2 * last + 1 - t.stage if t.backward else t.stage, t.visit)
    order = graph.topological_order()
    free: set[Node] = set()     # Computed from constants only: copied into each reader.
    # Unmarked, computed from the graph's inputs alone (an optimizer's hyperparameters, a batch reshaped
    # before a loop over micro-batches): placed with their earliest reader, instead of in parts of their own.
    early: set[Node] = set()
    stage_of: dict[Node, tuple[int, int]] = {}
    for n in order:
        if n.op == "input":
            continue
        computed = [i for i in n.inputs if i.op != "input" and i not in free]
        if all(i.op != "input" for i in n.inputs) and not computed:
            free.add(n)
            continue
        if tags and n not in tags and all(i in early for i in computed):
            early.add(n)
            continue
        own = key(tags[n]) if n in tags else (0, 0)
        stage_of[n] = max([own] + [stage_of[i] for i in computed if i not in early])
    if early:
        readers: dict[Node, list[Node]] = {n: [] for n in early}
        for n in order:
            for i in n.inputs:
                if i in early:
                    readers[i].append(n)
        for n in reversed(order):   # Readers first: an early reader has its stage already.
            if n in early:
                stage_of[n] = min((stage_of[r] for r in readers[n]), default=(0, 0))
    tag_of = {k: StageTag(k[0], False, k[1]) if k[0] <= last else StageTag(2 * last + 1 - k[0], True, k[1])
              for k in set(stage_of.values())}
    # Branches: union-find over computed nodes joined to their computed inputs of the same stage.
    parent: dict[Node, Node] = {n: n for n in stage_of}

    def root(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for n in stage_of:
        for i in n.inputs:
            if i in stage_of and stage_of[i] == stage_of[n]:
                a, b = root(i), root(n)
                if a is not b:
                    parent[b] = a
    groups: dict[Node, list[Node]] = {}
    for n in order:              # Topological order inside each group.
        if n in stage_of:
            groups.setdefault(root(n), []).append(n)
    members = sorted(groups.values(), key=lambda g: (stage_of[g[0]], order.index(g[0])))
    reads, exported, sources, outputs = wire(graph, members)
    per_stage: dict[tuple[int, int], int] = {}
    parts = []
    for k, g in enumerate(members):
        st = stage_of[g[0]]
        branch = per_stage[st] = per_stage.get(st, -1) + 1
        tag = tag_of[st]
        name = f"stage{tag.stage}" + (".backward" if tag.backward else "") + (f".mb{tag.visit}" if tag.visit else "")
        parts.append(Part(f"{name}.branch{branch}", tag.stage, graph.extract(reads[k], exported[k]), sources[k],
                          tag.backward, tag.visit))
    return Partition(parts, outputs, len(graph.inputs))


def wire(graph: Graph, members: list[list[Node]], exported: list[list[Node]] | None = None):
    """How parts of `graph` connect; ``members[k]`` is part k's nodes, producers' parts first.

    Returns ``(reads, exported, sources, outputs)``: per part, the nodes it
    reads from outside itself (first-use order), the nodes it exports
    (`exported`'s given ones first, then those others read, then graph
    outputs), and where each read comes from (``(-1, i)`` graph input i,
    ``(p, j)`` export j of part p); and where each graph output comes from,
    as `Partition.outputs`.
    """
    part_of = {n: k for k, g in enumerate(members) for n in g}
    exported = [list(e) for e in exported] if exported is not None else [[] for _ in members]
    input_index = {n: k for k, n in enumerate(graph.inputs)}
    graph_out = set(graph.outputs)
    reads: list[list[Node]] = []
    for k, g in enumerate(members):
        outside: dict[Node, None] = {}
        for n in g:
            for i in n.inputs:
                if i.op == "input" or (i in part_of and part_of[i] != k):
                    outside[i] = None
        reads.append(list(outside))
        for i in outside:
            if i in part_of and i not in exported[part_of[i]]:
                exported[part_of[i]].append(i)
    for k, g in enumerate(members):
        for n in g:
            if n in graph_out and n not in exported[k]:
                exported[k].append(n)
    sources = [[(-1, input_index[i]) if i.op == "input" else (part_of[i], exported[part_of[i]].index(i))
                for i in r] for r in reads]
    outputs: list[tuple[int, Any]] = []
    for o in graph.outputs:
        if o.op == "input":
            outputs.append((-1, input_index[o]))
        elif o in part_of:
            outputs.append((part_of[o], exported[part_of[o]].index(o)))
        else:
            outputs.append((-2, graph.extract([], [o]).run()[0]._array()))
    return reads, exported, sources, outputs


def describe(graph: Graph, limit: int = 8) -> str:
    """A subgraph in words for errors and status: its size and its first ops."""
    ops = [n.op for n in graph.topological_order() if n.op not in ("input", "buffer")]
    shown = ",".join(ops[:limit]) + (",..." if len(ops) > limit else "")
    ins = ", ".join(f"{n.dtype.name}{fmt_shape(n.shape)}" for n in graph.inputs)
    return f"[{len(ops)} nodes: {shown}] ({ins})"


def _node_text(n: Node) -> str:
    ins = ", ".join(f"{i.dtype.name}{fmt_shape(i.shape)}" for i in n.inputs)
    return f"%{n.id} {n.op}({ins}) -> {n.dtype.name}{fmt_shape(n.shape)}"


def find_failing_node(graph: Graph, arrays: list[np.ndarray]) -> str | None:
    """Rerun `graph` node by node on the reference interpreter; the first node that raises, in words."""
    env: dict[Node, Any] = dict(zip(graph.inputs, arrays))
    with np.errstate(all="ignore"):
        for n in graph.topological_order():
            if n in env:
                continue
            if n.op == "buffer":
                env[n] = n.buffer
                continue
            try:
                env[n] = reference.evaluate(n, [env[i] for i in n.inputs])
            except Exception:
                return _node_text(n)
    return None


def compile_partitioned(graph: Graph, stages: Mapping[Node, int | StageTag] | None,
                        compile_fn: Callable[[Graph], Callable],
                        name: str = "function", track: bool = False, registers: int = 2,
                        placement: dict[int, int] | None = None, transport: Any = None) -> actors.GraphProgram:
    """Partition `graph`, compile each part with ``compile_fn(subgraph)`` and make a runtime program of them.

    A graph that is one part is compiled whole (the very executable the
    plain path would build). `registers` per edge (>= 2) lets consecutive
    calls in `GraphProgram.map` overlap, stage by stage. With `placement`
    (stage -> rank) each stage's tasks run on that rank of `transport`.

    Examples
    --------
    >>> import loom, numpy as np
    >>> from loom.runtime.executor import Executable
    >>> from loom.compiler.partition import compile_partitioned
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((2,), "float32")
    >>> g.outputs = [g.add_node("exp", [x]), g.add_node("neg", [x])]
    >>> prog = compile_partitioned(g, None, Executable, name="doc")
    >>> [t.name for t in prog.tasks]
    ['stage0.branch0', 'stage0.branch1']
    >>> [a.tolist() for a in prog(np.zeros(2, np.float32))]
    [[1.0, 1.0], [-0.0, -0.0]]
    >>> prog.close()
    """
    budget = graph.meta.get("memory_budget")
    if budget is None and not stages and placement is None and any(PRIMITIVES[n.op].kind == collective.KIND
                                                                   for n in graph if n.op in PRIMITIVES):
        # Each all-reduce a task of its own on a private communicator, overlapping the compute around it.
        overlapped = _upper.compile_overlapped(graph, compile_fn, name=name, track=track, registers=registers)
        if overlapped is not None:
            return overlapped
    parts = partition(graph, stages)
    if placement is None and len(parts.parts) == 1 and all(p != -2 for p, _ in parts.outputs):
        # One task: the whole graph as the plain path compiles it, inputs and outputs in its own order
        # (under a memory budget, the budget of the plain step: its report is the program's).
        whole = compile_fn(graph)
        spec = actors.TaskSpec("stage0.branch0", whole, [(-1, k) for k in range(len(graph.inputs))],
                               describe(graph), _diagnoser(graph))
        prog = actors.GraphProgram(name, [spec], [(0, k) for k in range(len(graph.outputs))], len(graph.inputs),
                                   track=track, registers=registers)
        optimized = getattr(whole, "graph", None)
        prog.memory = optimized.meta.get("remat") if isinstance(optimized, Graph) else None
        return prog
    memory = None
    if budget is not None:
        from loom.compiler.remat import DEFAULT_OFFLOAD

        runs, memory = fit_budget(parts, compile_fn, budget[0], bool(budget[1]),
                                  graph.meta.get("offload") or DEFAULT_OFFLOAD, registers, name)
        registers = memory.registers
    else:
        runs = [compile_fn(p.graph) for p in parts.parts]
    if placement is not None:
        specs = [actors.TaskSpec(p.name, run, p.inputs, describe(p.graph), _diagnoser(p.graph),
                                 rank=placement.get(p.stage, 0)) for p, run in zip(parts.parts, runs)]
        prog = actors.GraphProgram(name, specs, parts.outputs, parts.n_inputs, track=track, registers=registers,
                                   transport=transport)
    else:
        specs = [actors.TaskSpec(p.name, run, p.inputs, describe(p.graph), _diagnoser(p.graph))
                 for p, run in zip(parts.parts, runs)]
        # Collectives must run in the same order on every rank: tasks on several threads could start them in
        # different orders, so a graph that talks to other ranks runs its tasks one after another.
        serial = any(PRIMITIVES[n.op].kind == collective.KIND for n in graph if n.op in PRIMITIVES)
        prog = actors.GraphProgram(name, specs, parts.outputs, parts.n_inputs, track=track, registers=registers,
                                   parallel=_worth_parallel(parts) and not serial, serial=serial)
    prog.memory = memory
    return prog


# ---------------------------------------------------------------- memory budgets over tasks

@dataclass
class TaskMemory:
    """One task's part of a budgeted plan: its arena share, what it reached, and the values it hands on."""

    name: str
    share: int          # Arena bytes the task was given.
    arena: int          # Its planned arena after rematerialisation (persistent: one per compiled task).
    outputs: int        # Bytes of the arrays one firing returns: the values its output registers hold.
    report: Any = None  # Its `loom.compiler.remat.RematReport`.


@dataclass
class PlanMemory:
    """How a step partitioned into actor tasks fits its memory budget.

    Every task keeps its own arena (its planned intermediates), and each
    value a task hands on lives in an output register until its consumers are
    done with it, so a run of the plan needs at most
    ``sum(arena) + registers * sum(outputs)`` bytes beside its inputs
    (`planned`): `registers` values per edge may be in flight at once. The
    step's own outputs are among the tasks' outputs, as they count against
    the budget of the plain step. The budget is split among the tasks
    (`fit_budget`), each fitted to its share by the rematerialisation pass.

    Attributes
    ----------
    budget : int
        The budget in bytes.
    registers : int
        Registers per edge the plan runs with (1 when the asked number would not fit).
    tasks : list of TaskMemory
    met : bool
        Whether ``planned <= budget``.
    minimum : int
        The smallest budget the plan was found to fit (each task at its smallest
        arena, one register per edge); 0 when not searched (the budget was met).
    strict : bool
    """

    budget: int
    registers: int
    tasks: list
    met: bool = True
    minimum: int = 0
    strict: bool = False

    @property
    def arenas(self) -> int:
        return sum(t.arena for t in self.tasks)

    @property
    def register_bytes(self) -> int:
        return self.registers * sum(t.outputs for t in self.tasks)

    @property
    def planned(self) -> int:
        """The planned peak: every task's arena and every register full."""
        return self.arenas + self.register_bytes

    def __str__(self) -> str:
        from loom.compiler.remat import fmt_bytes

        state = "met" if self.met else f"NOT met (smallest feasible {fmt_bytes(self.minimum)}, {self.minimum} B)"
        lines = [f"memory budget {fmt_bytes(self.budget)} ({self.budget} B) over {len(self.tasks)} actor tasks: "
                 f"{state}; planned peak {fmt_bytes(self.planned)} ({self.planned} B) = arenas {self.arenas} B + "
                 f"{self.registers} register(s) per edge x {sum(t.outputs for t in self.tasks)} B of task outputs"]
        for t in self.tasks:
            rem = t.report
            how = (f", {rem.strategy}: rematerialised {rem.values} values, {rem.offloaded} offloaded"
                   if rem is not None and rem.strategy != "none" else "")
            lines.append(f"  {t.name:<28} arena {t.arena:>10} B (share {t.share} B), outputs {t.outputs:>10} B{how}")
        return "\n".join(lines)


def _fit_task(part: Part, compile_fn: Callable[[Graph], Callable], share: int | None,
              offload: str) -> tuple[Any, TaskMemory]:
    """Compile `part` with its arena held to `share` bytes (None: no budget), its outputs beside it; quietly,
    since the plan as a whole decides whether the budget is met."""
    from loom.compiler.remat import output_bytes

    out = output_bytes(part.graph)
    if share is None:
        run = compile_fn(part.graph)
    else:
        part.graph.meta["memory_budget"] = (share + out, False)
        part.graph.meta["offload"] = offload
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LoomWarning)
                run = compile_fn(part.graph)
        finally:
            del part.graph.meta["memory_budget"], part.graph.meta["offload"]
    optimized = getattr(run, "graph", None)
    report = optimized.meta.get("remat") if isinstance(optimized, Graph) else None
    plan = getattr(run, "plan", None)
    arena = int(plan.arena_bytes) if plan is not None else report.arena_after if report is not None else 0
    return run, TaskMemory(part.name, arena if share is None else share, arena, out, report)


FIT_ROUNDS = 3  # Rounds of handing the slack of tasks under their share to those over it.


def fit_budget(parts: Partition, compile_fn: Callable[[Graph], Callable], budget: int, strict: bool,
               offload: str, registers: int, name: str) -> tuple[list, PlanMemory]:
    """Compile every part so the plan's planned peak (`PlanMemory.planned`) fits `budget` bytes.

    The tasks are compiled without a budget first; when their arenas and
    `registers` values per edge fit, nothing is recomputed (with one register
    per edge when only that fits). Otherwise the output registers (one per
    edge) take their bytes and the rest is split among the tasks' arenas in
    proportion to their arenas without a budget, each task fitted to its
    share by the rematerialisation pass. A
    task that misses its share gets what others left unused, up to
    `FIT_ROUNDS` times. When the budget still cannot be met, every task is
    fitted to its smallest arena and the plan runs with those (a
    `LoomWarning` naming the budget and the smallest feasible size), or
    `MemoryBudgetError` when `strict`.
    """
    from loom.compiler.remat import fmt_bytes

    fits: dict[tuple[int, int], tuple[Any, TaskMemory]] = {}

    def fit(k: int, share: int) -> tuple[Any, TaskMemory]:
        # Compiling is deterministic: a task asked for a share it was already fitted to gets that fit again.
        if (k, share) not in fits:
            fits[k, share] = _fit_task(parts.parts[k], compile_fn, share, offload)
        return fits[k, share]

    fitted = [_fit_task(p, compile_fn, None, offload) for p in parts.parts]   # First without a budget.
    runs, tasks = [r for r, _ in fitted], [t for _, t in fitted]
    outs = sum(t.outputs for t in tasks)
    free = [t.arena for t in tasks]
    # More than one register per edge only overlaps calls: kept when the arenas need no recomputing for it.
    for regs in dict.fromkeys((registers, 1)):
        if sum(free) + regs * outs <= budget:
            return runs, PlanMemory(budget, regs, tasks, strict=strict)
    regs = 1
    room = max(budget - outs, 0)
    total = max(sum(free), 1)
    shares = [room * f // total for f in free]
    todo = list(range(len(parts.parts)))
    for _ in range(FIT_ROUNDS):
        for k in todo:
            runs[k], tasks[k] = fit(k, shares[k])
        over = [k for k, t in enumerate(tasks) if t.arena > t.share]
        if not over or sum(t.arena for t in tasks) <= room:
            break
        # Tasks under their share keep what they use; the rest goes to those over it, by how much they missed.
        for k, t in enumerate(tasks):
            shares[k] = min(t.arena, t.share)
        spare = room - sum(shares)
        if spare <= 0:
            break
        missed = sum(tasks[k].arena - tasks[k].share for k in over)
        for k in over:
            shares[k] += spare * (tasks[k].arena - tasks[k].share) // missed
        todo = over
    memory = PlanMemory(budget, regs, tasks, strict=strict)
    if memory.planned <= budget:
        return runs, memory
    # Not met: each task at its smallest arena (the plan that comes closest), and the budget that would fit it.
    for k in range(len(parts.parts)):
        runs[k], tasks[k] = fit(k, 0)
    memory = PlanMemory(budget, 1, tasks, met=False, strict=strict)
    memory.minimum = memory.planned
    msg = (f"{name}: memory budget {fmt_bytes(budget)} ({budget} B) cannot be met on the actor runtime: the step "
           f"runs as {len(tasks)} tasks whose smallest plans need {fmt_bytes(memory.minimum)} ({memory.minimum} B): "
           f"arenas {memory.arenas} B and {memory.register_bytes} B of values in output registers (one per edge); "
           f"the smallest feasible budget is {memory.minimum} B")
    if memory.minimum <= budget:  # The smallest arenas fit after all (the shares were not where they were needed).
        memory.met = True
        return runs, memory
    if strict:
        raise MemoryBudgetError(msg + "; raise the budget or pass strict=False to run with the smallest plan")
    warnings.warn(msg + "; running with the smallest plan", LoomWarning, stacklevel=3)
    return runs, memory


# A single call runs its branches on actors only when a second branch holds this much work (FLOPs): handing
# a value to another thread and back costs tens of microseconds, more on a busy machine.
PARALLEL_MIN_WORK = 2_000_000


def work(graph: Graph) -> int:
    """A graph's work in FLOPs, roughly: 2·m·n·k per matmul, one per output element elsewhere."""
    total = 0
    for n in graph.topological_order():
        if n.op in ("input", "buffer"):
            continue
        size = int(np.prod(n.shape, dtype=np.int64)) if n.shape else 1
        total += 2 * size * int(n.inputs[0].shape[-1]) if n.op == "matmul" else size
    return total


def _worth_parallel(parts: Partition) -> bool:
    """Whether one call gains from running on actors: two parts of real work with no path between them.

    Branches of a stage, or stages of different micro-batches (stage 1 of
    micro-batch 0 beside stage 0 of micro-batch 1).
    """
    big = [k for k, p in enumerate(parts.parts) if work(p.graph) >= PARALLEL_MIN_WORK]
    if len(big) < 2:
        return False
    before: list[set[int]] = []    # The parts each part waits for, directly or not.
    for p in parts.parts:
        seen: set[int] = set()
        for q, _ in p.inputs:
            if q >= 0:
                seen |= before[q] | {q}
        before.append(seen)
    return any(a not in before[b] for i, a in enumerate(big) for b in big[i + 1:])


def _diagnoser(graph: Graph) -> Callable[[BaseException, list], str | None]:
    def diagnose(err: BaseException, arrays: list) -> str | None:
        return find_failing_node(graph, arrays)
    return diagnose
