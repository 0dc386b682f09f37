"""Collectives as actor tasks of their own, so communication overlaps computation.

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

from typing import Any, Callable

import numpy as np

from loom.distributed import comm
from loom.distributed.process_group import DistributedError, resolve

__all__ = ["collective_task"]


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

    def reduce(value):
        value = pick(value) if pick is not None else value
        if isinstance(value, (tuple, list)):
            return tuple(comm.all_reduce(np.asarray(v), op, ranks, chan) for v in value)
        return comm.all_reduce(np.asarray(value), op, ranks, chan)
    return plan.task(name, reduce, [source], registers=registers, subgraph=f"all_reduce({op}) over ranks {list(ranks)}")
