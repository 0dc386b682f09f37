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

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from loom import _upper
from loom.errors import fmt_shape
from loom.ir import collective
from loom.ir.graph import Graph
from loom.ir.ops import PRIMITIVES
from loom.ir.node import Node
from loom.runtime import actors, reference

__all__ = ["Part", "Partition", "StageTag", "partition", "compile_partitioned", "work", "PARALLEL_MIN_WORK"]


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
    if not stages and placement is None and any(PRIMITIVES[n.op].kind == collective.KIND for n in graph
                                                 if n.op in PRIMITIVES):
        # Each all-reduce a task of its own on a private communicator, overlapping the compute around it.
        overlapped = _upper.compile_overlapped(graph, compile_fn, name=name, track=track, registers=registers)
        if overlapped is not None:
            return overlapped
    parts = partition(graph, stages)
    if placement is not None:
        specs = [actors.TaskSpec(p.name, compile_fn(p.graph), p.inputs, describe(p.graph), _diagnoser(p.graph),
                                 rank=placement.get(p.stage, 0)) for p in parts.parts]
        return actors.GraphProgram(name, specs, parts.outputs, parts.n_inputs, track=track, registers=registers,
                                   transport=transport)
    if len(parts.parts) == 1 and all(p != -2 for p, _ in parts.outputs):
        # One task: the whole graph as the plain path compiles it, inputs and outputs in its own order.
        whole = compile_fn(graph)
        spec = actors.TaskSpec("stage0.branch0", whole, [(-1, k) for k in range(len(graph.inputs))],
                               describe(graph), _diagnoser(graph))
        return actors.GraphProgram(name, [spec], [(0, k) for k in range(len(graph.outputs))], len(graph.inputs),
                                   track=track, registers=registers)
    specs = [actors.TaskSpec(p.name, compile_fn(p.graph), p.inputs, describe(p.graph), _diagnoser(p.graph))
             for p in parts.parts]
    # Collectives must run in the same order on every rank: tasks on several threads could start them in
    # different orders, so a graph that talks to other ranks runs its tasks one after another.
    serial = any(PRIMITIVES[n.op].kind == collective.KIND for n in graph if n.op in PRIMITIVES)
    return actors.GraphProgram(name, specs, parts.outputs, parts.n_inputs, track=track, registers=registers,
                               parallel=_worth_parallel(parts) and not serial, serial=serial)


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
