"""Collectives as actor tasks of their own, so communication overlaps computation.

Two ways in: `collective_task` adds one to a plan written by hand, and
`compile_overlapped` cuts a traced step (one `loom.function` graph holding
all_reduce nodes, e.g. DDP's gradient averaging) into such a plan, so its
all-reduces no longer wait for the whole backward, nor the backward for them.

`collective_task` adds a task to a `loom.runtime.actors.Plan` that
all-reduces the arrays its input task produces. It is an actor like any
other: it fires when its input register is filled, so the gradient
all-reduce of the layers whose backward is done runs while the backward of
earlier layers goes on in another actor (DDP's bucketed overlap, with the
runtime's one firing rule instead of autograd hooks).

Each collective task talks on a private communicator (`loom.distributed.comm.
channel`), made when the plan is built; every rank builds the same plan, so
the channels match. One actor issues a channel's collectives one iteration
after another, so different collective tasks may run at the same time in
different threads without the ranks disagreeing on the order (Open MPI with
``MPI_THREAD_MULTIPLE``, which mpi4py asks for).

Examples
--------
.. code-block:: python

    plan = Plan("ddp")
    data = plan.source("batches", shards)
    late = plan.task("backward_late", backward_late, [data], registers=2)      # grads of the last layers first
    early = plan.task("backward_early", backward_early, [data, late], registers=2)
    collective_task(plan, "allreduce_late", late, pick=lambda v: v[1])          # overlaps backward_early
    collective_task(plan, "allreduce_early", early)
    results = plan.run()
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from loom.distributed import comm
from loom.distributed.process_group import DistributedError, resolve

__all__ = ["collective_task", "compile_overlapped", "split_at_collectives", "BUCKET_MIN_WORK"]


def collective_task(plan: Any, name: str, source: Any, op: str = "avg", group: Any = None,
                    pick: Callable[[Any], Any] | None = None, registers: int = 2):
    """Add a task that all-reduces (``op`` ``"sum"`` or ``"avg"``) the arrays `source` produces each iteration.

    Parameters
    ----------
    plan : loom.runtime.actors.Plan
        Built the same way on every rank of `group`.
    name : str
    source : Task
        Produces an array, or a tuple/list of arrays, per iteration.
    op : str
        ``"sum"`` or ``"avg"`` (gradients averaged over data-parallel ranks).
    group : ProcessGroup, optional
        The ranks that reduce together (default: all).
    pick : callable, optional
        Selects what to reduce from `source`'s value (e.g. the gradients out of a tuple).
    registers : int

    Returns
    -------
    Task
        Its value is the reduced array (or tuple of arrays), in `source`'s structure.
    """
    if op not in comm.REDUCTIONS:
        raise DistributedError(f"loom.distributed.overlap.collective_task: op must be one of {comm.REDUCTIONS}, "
                               f"got {op!r}")
    g = resolve(group, "overlap.collective_task")
    if g is None:
        raise DistributedError("loom.distributed.overlap.collective_task: this process is not a member of group")
    ranks = tuple(g._ranks)
    chan = comm.channel(ranks, "overlap.collective_task")
    if chan is not None:   # Freed with the plan (or with its group, whichever goes first).
        weakref.finalize(plan, _free_channels, [chan])

    def reduce(value):
        value = pick(value) if pick is not None else value
        if isinstance(value, (tuple, list)):
            return tuple(comm.all_reduce(np.asarray(v), op, ranks, chan) for v in value)
        return comm.all_reduce(np.asarray(value), op, ranks, chan)
    return plan.task(name, reduce, [source], registers=registers, subgraph=f"all_reduce({op}) over ranks {list(ranks)}")


# ---------------------------------------------------------------- one traced step, its collectives overlapped

# A chunk of compute with less work than this (FLOPs) between two collectives is not worth a task of its own:
# those collectives share one task (a bucket) and the chunk joins the previous one.
BUCKET_MIN_WORK = 200_000
_OVERLAPPABLE = ("float32", "float64", "int32", "int64")


def _is_collective(n) -> bool:
    from loom.ir import collective
    from loom.ir.ops import PRIMITIVES
    return n.op in PRIMITIVES and PRIMITIVES[n.op].kind == collective.KIND


def _flops(n) -> int:
    size = int(np.prod(n.shape, dtype=np.int64)) if n.shape else 1
    return 2 * size * int(n.inputs[0].shape[-1]) if n.op == "matmul" else size


def split_at_collectives(graph: Any, min_work: int = BUCKET_MIN_WORK) -> list[tuple[str, list]] | None:
    """The step cut into runs of compute and the collectives between them, in an order that runs.

    Returns a list of ``("compute", nodes)`` and ``("collective", nodes)``
    groups, or None when the graph has no collective or one this cannot
    run on a private communicator (only all_reduce of float32/float64/
    int32/int64 is cut out; anything else keeps graph order). Compute
    that needs no collective's result (the forward and backward) is cut,
    cheapest first, into the nodes each all-reduce's input needs beyond the
    previous ones; each all-reduce follows its chunk, so it starts as soon
    as its input is computed while the next chunk computes. Compute that
    reads a collective's result (the optimizer update) comes after it.
    """
    order = graph.topological_order()
    colls = [n for n in order if _is_collective(n)]
    if not colls or any(c.op != "all_reduce" or c.dtype.name not in _OVERLAPPABLE for c in colls):
        return None
    free: set = set()        # Computed from constants only: copied into each reader by Graph.extract.
    phase: dict = {}         # Compute node -> how many collectives deep it is; collective -> its input's.
    for n in order:
        if n.op == "input":
            continue
        if _is_collective(n):
            i = n.inputs[0]
            if i in free:
                return None  # An all-reduce of a constant: nothing to overlap.
            phase[n] = phase[i] + 1 if _is_collective(i) else phase.get(i, 0)
            continue
        computed = [i for i in n.inputs if i.op != "input" and i not in free]
        if not computed and all(i.op != "input" for i in n.inputs):
            free.add(n)
            continue
        phase[n] = max([0] + [phase[i] + (1 if _is_collective(i) else 0) for i in computed])
    pos = {n: k for k, n in enumerate(order)}
    groups: list[tuple[str, list]] = []
    for p in sorted(set(phase.values())):
        work = [n for n in order if phase.get(n) == p and not _is_collective(n)]
        member = set(work)

        def needs(c) -> set:
            seen, stack = set(), [c.inputs[0]]
            while stack:
                n = stack.pop()
                if n in member and n not in seen:
                    seen.add(n)
                    stack.extend(n.inputs)
            return seen
        here = [c for c in colls if phase[c] == p]
        wants = {c: needs(c) for c in here}
        flops = {n: _flops(n) for n in work}
        cost = {c: sum(flops[n] for n in wants[c]) for c in here}   # Work still to do before c can start.
        done: set = set()
        buckets: list[tuple[set, list]] = []
        # Cheapest first: the all-reduce whose input needs the least work beyond what is done goes next.
        while here:
            c = min(here, key=lambda c: (cost[c], pos[c]))
            here.remove(c)
            new = wants[c] - done
            done |= new
            for d in here:
                cost[d] -= sum(flops[n] for n in new & wants[d])
            if buckets and cost[c] < min_work:
                buckets[-1][0].update(new)
                buckets[-1][1].append(c)
            else:
                buckets.append((new, [c]))
        for nodes, cs in buckets:
            if nodes:
                groups.append(("compute", [n for n in work if n in nodes]))
            groups.append(("collective", cs))
        rest = [n for n in work if n not in done]
        if rest:
            groups.append(("compute", rest))
    return groups


def compile_overlapped(graph: Any, compile_fn: Callable, name: str = "function", track: bool = False,
                       registers: int = 2, min_work: int = BUCKET_MIN_WORK):
    """A traced step with all_reduce nodes as a `loom.runtime.actors.GraphProgram` whose all-reduces overlap compute.

    `split_at_collectives` cuts the graph; each compute chunk is compiled
    with ``compile_fn(subgraph)`` and each collective group (a bucket) runs
    as its own task on private communicators (`loom.distributed.comm.channel`,
    made here, collectively, in the same order on every rank, as every rank
    compiles the same step). Each call runs on the actors, so the all-reduce
    of the gradients done first runs while the backward of earlier layers
    goes on; the values are those of running the graph in order (the same
    all-reduce of the same arrays, one call per node). None when the graph
    has nothing to overlap (`split_at_collectives`).

    Examples
    --------
    .. code-block:: python

        @loom.function(runtime="actors")     # the compiler calls compile_overlapped for a step with all_reduce
        def step(x, y):
            loss = loom.nn.functional.mse_loss(model(x), y)
            grads = loom.autograd.grad([loss], params)
            with loom.no_grad():
                for p, g in zip(params, grads):
                    p -= 0.1 * dfn.all_reduce(g, op=dist.ReduceOp.AVG)
            return loss
    """
    from loom.compiler.partition import _diagnoser, describe, wire
    from loom.runtime import actors
    groups = split_at_collectives(graph, min_work)
    if groups is None:
        return None
    # A collective group exports its results in its own order; the wiring adds what others read.
    reads, exported, sources, outputs = wire(graph, [nodes for _, nodes in groups],
                                             [nodes if kind == "collective" else [] for kind, nodes in groups])
    specs = []
    made: list = []   # Every private communicator made for this step.
    chunks = collectives = 0
    for k, (kind, nodes) in enumerate(groups):
        if kind == "compute":
            sub = graph.extract(reads[k], exported[k])
            specs.append(actors.TaskSpec(f"compute{chunks}", compile_fn(sub), sources[k], describe(sub),
                                         _diagnoser(sub)))
            chunks += 1
            continue
        channels = {}
        for c in nodes:   # Every rank makes them in this order: the same step, compiled the same way.
            ranks = tuple(c.attrs["ranks"])
            if ranks not in channels:
                channels[ranks] = comm.channel(ranks, "all_reduce")
        pick = [reads[k].index(c.inputs[0]) for c in nodes]
        calls = [(c.attrs["reduction"], tuple(c.attrs["ranks"]), channels[tuple(c.attrs["ranks"])]) for c in nodes]

        def reduce(*arrays, pick=pick, calls=calls):
            return tuple(comm.all_reduce(arrays[j], op, ranks, chan) for j, (op, ranks, chan) in zip(pick, calls))
        shapes = ", ".join(f"{c.dtype.name}{list(c.shape)}" for c in nodes)
        specs.append(actors.TaskSpec(f"all_reduce{collectives}", reduce, sources[k],
                                     f"[{len(nodes)} all_reduce: {shapes}] on a private communicator"))
        collectives += 1
        made.extend(ch for ch in channels.values() if ch is not None)
    prog = actors.GraphProgram(name, specs, outputs, len(graph.inputs), track=track, registers=registers,
                               parallel=True)
    # The channels live as long as the compiled step: freed when it is, not when their group is destroyed.
    prog.release_channels = weakref.finalize(prog, _free_channels, made)  # type: ignore[attr-defined]
    return prog


def _free_channels(channels: list) -> None:
    """Free a compiled step's private communicators (each is also freed by destroying its group, whichever
    comes first; MPI frees a communicator locally, so the ranks need not do it at the same moment)."""
    from loom.distributed.process_group import destroy_process_group
    for ch in channels:
        if ch._comm is not None:
            destroy_process_group(ch)
    channels.clear()
