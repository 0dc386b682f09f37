"""Pipeline parallelism on the actor runtime: one stage per rank, micro-batches flowing through placed actors.

Every rank builds the same `loom.runtime.actors.Plan` and runs its own
stage's actors; registers travel between ranks through the MPI transport
(`loom.runtime.transport.MpiTransport`), with no master and no schedule
written out: an actor fires when its input registers are filled and it has
a free output register, so the register counts alone pace the pipeline.

`pipeline_plan` runs forwards. `train_pipeline` runs forwards and backwards:
stage i's forward task sends its activation on; the last stage computes the
loss and its backward in one task; stage i's backward task reads the
gradient from stage i+1 and stage i's input again (recomputing the forward
instead of keeping its activations). Stage i's input register is held until
its backward is done, so with ``registers=2`` a stage has at most two
micro-batches in flight, as 1F1B bounds it, while the forward of micro-batch
k+1 runs on stage 0 during the backward of micro-batch k on stage 1.

Examples
--------
.. code-block:: python

    transport = MpiTransport()
    stages = [lambda x: (x @ w0).tanh(), lambda h: h @ w1]
    grads, losses = train_pipeline(stages, [w0, w1], loss_fn, xs, ys, transport=transport)
    # rank 0: grads[0] is dL/dw0 summed over the micro-batches; rank 1: grads[1], and the losses
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from loom.distributed.process_group import DistributedError
from loom.runtime.actors import Plan

__all__ = ["pipeline_plan", "train_pipeline"]


def _tensors(arrays, requires_grad: bool = False):
    from loom.tensor import tensor
    return tensor(np.asarray(arrays), requires_grad=requires_grad)


def _numpy(t) -> np.ndarray:
    return t.detach().numpy()


def _check(stages: Sequence, transport, what: str) -> None:
    if transport is None:
        raise DistributedError(f"loom.distributed.actor_pipeline.{what}: needs a transport "
                               "(loom.runtime.transport.MpiTransport())")
    if len(stages) != transport.size:
        raise DistributedError(f"loom.distributed.actor_pipeline.{what}: {len(stages)} stages on {transport.size} "
                               "ranks; this pipeline runs one stage per rank")


def pipeline_plan(stages: Sequence[Callable], microbatches: Sequence[np.ndarray], transport: Any,
                  registers: int = 2, timeout: float | None = 120.0) -> list | None:
    """Run ``stages[-1](...stages[0](x))`` for every micro-batch x, stage i on rank i; the outputs on the last rank.

    Parameters
    ----------
    stages : list of callables
        Tensor -> Tensor (a `loom.function` compiles its stage once and replays it).
    microbatches : list of arrays
        Read on rank 0 (the other ranks may pass anything of the same length).
    transport : loom.runtime.transport.MpiTransport
    registers : int
        Registers per edge: how many micro-batches a stage may run ahead of the next one.

    Returns
    -------
    list of arrays on the last rank (one per micro-batch, in order); None elsewhere.
    """
    _check(stages, transport, "pipeline_plan")
    plan = Plan("pipeline", transport=transport)
    prev = plan.source("microbatches", iter(list(microbatches)), registers=registers, rank=0)
    for i, stage in enumerate(stages):
        prev = plan.task(f"stage{i}", lambda a, f=stage: _numpy(f(_tensors(a))), [prev], registers=registers,
                         rank=i)
    out = plan.run(timeout=timeout)
    return out if transport.rank == len(stages) - 1 else None


def _grads(loss_or_out, inputs: list, grad_output=None) -> list:
    from loom.autograd.engine import grad
    seeds = None if grad_output is None else [_tensors(grad_output)]
    return grad([loss_or_out], inputs, grad_outputs=seeds, allow_unused=True)


def train_pipeline(stages: Sequence[Callable], params: Sequence, loss_fn: Callable,
                   inputs: Sequence[np.ndarray], targets: Sequence[np.ndarray], transport: Any,
                   registers: int = 2, timeout: float | None = 120.0) -> tuple[list, list]:
    """One training pass of a pipeline over micro-batches: gradients summed over them, stage i on rank i.

    Parameters
    ----------
    stages : list of callables
        Stage i maps its input tensor to its output tensor.
    params : list
        Per stage, its parameter tensor or a list of them (the ones it owns).
    loss_fn : callable
        ``loss_fn(output, target)`` on the last stage, a mean over the
        micro-batch; each micro-batch's loss is divided by their number, so the
        summed gradients are those of the whole batch's mean loss.
    inputs, targets : lists of arrays
        The micro-batches: inputs read on rank 0, targets on the last rank.

    Returns
    -------
    grads : list
        Per stage: on the rank that runs it, the summed gradient (an array, or
        a list of arrays if its params were a list), also added to each
        parameter's ``.grad``; None for the other ranks' stages.
    losses : list
        On the last rank, each micro-batch's scaled loss (their sum is the
        batch's mean loss); empty elsewhere.
    """
    _check(stages, transport, "train_pipeline")
    S, m = len(stages), len(inputs)
    plist = [list(p) if isinstance(p, (list, tuple)) else [p] for p in params]
    busy = threading.Lock()   # The stage's forward and backward tasks share this rank's loom state.
    plan = Plan("train_pipeline", transport=transport)
    src = plan.source("inputs", iter(list(inputs)), registers=registers, rank=0)
    tgt = plan.source("targets", iter(list(targets)), registers=registers, rank=S - 1)
    feeds = [src]   # feeds[i]: the task whose output is stage i's input.
    for i in range(S - 1):
        def forward(a, f=stages[i]):
            with busy:
                return _numpy(f(_tensors(a)))
        feeds.append(plan.task(f"forward{i}", forward, [feeds[i]], registers=registers, rank=i))

    def last(a, y, f=stages[-1], ps=plist[-1]):
        with busy:
            x = _tensors(a, requires_grad=True)
            loss = loss_fn(f(x), _tensors(y)) / m
            gs = _grads(loss, [x] + ps)
            return tuple(_numpy(g) for g in gs) + (_numpy(loss),)
    back = plan.task(f"backward{S - 1}", last, [feeds[S - 1], tgt], registers=registers, rank=S - 1)
    sinks = {S - 1: plan.task(f"grads{S - 1}", lambda v: v[1:], [back], registers=registers, rank=S - 1)}
    for i in range(S - 2, -1, -1):
        def backward(a, up, f=stages[i], ps=plist[i]):
            with busy:
                x = _tensors(a, requires_grad=True)
                gs = _grads(f(x), [x] + ps, grad_output=up[0])
                return tuple(_numpy(g) for g in gs)
        back = plan.task(f"backward{i}", backward, [feeds[i], back], registers=registers, rank=i)
        sinks[i] = plan.task(f"grads{i}", lambda v: v[1:], [back], registers=registers, rank=i)
    out = plan.run(timeout=timeout)
    me = transport.rank
    rows = out[f"grads{me}"] if isinstance(out, dict) else out
    k = len(plist[me])
    summed = [sum(row[j] for row in rows) for j in range(k)]
    from loom.autograd.grad_mode import no_grad
    with no_grad():
        for p, g in zip(plist[me], summed):
            p.grad = _tensors(g) if p.grad is None else p.grad + _tensors(g)
    grads: list = [None] * S
    grads[me] = summed if isinstance(params[me], (list, tuple)) else summed[0]
    losses = [float(row[k]) for row in rows] if me == S - 1 else []
    return grads, losses
