"""Pipeline parallelism on the actor runtime: one stage per rank, micro-batches flowing through placed actors.

Every rank builds the same `loom.runtime.actors.Plan` and runs its own
stage's actors; registers travel between ranks through the MPI transport
(`loom.runtime.transport.MpiTransport`), with no master and no list of
steps: an actor fires when its input registers are filled and it has a free
output register, so the register counts alone pace the pipeline.

`run_stages` is the one scheduler, used by `loom.distributed.pipeline`
(`Schedule1F1B`, `ScheduleGPipe`) and by `pipeline_plan` / `train_pipeline`
here. Stage i has a forward actor and, when training, a backward actor on
rank i. The forward actor passes its outputs to stage i+1's forward and
its own backward; that register stays taken until the backward of the
micro-batch is done, so the forward's register count is how many
micro-batches' activations the stage holds. The backward of micro-batch j
also waits (``lookahead``) until that many later forwards have filled
registers, so the firings on every stage come in the schedule's order:

- 1F1B: stage i of S has ``S - i`` forward registers, so after a warm-up of
  ``S - i - 1`` forwards it alternates one forward and one backward, holding
  at most ``S - i`` micro-batches (one forward register per stage still in
  flight);
- GPipe: ``n_microbatches`` registers, so every forward runs before the
  first backward.

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

__all__ = ["run_stages", "pipeline_plan", "train_pipeline", "SCHEDULES"]

SCHEDULES = ("1F1B", "GPipe")


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


def _elsewhere(*values):  # pragma: no cover - a task placed on another rank never runs here
    raise DistributedError("loom.distributed.actor_pipeline: a stage placed on another rank ran here")


def run_stages(transport: Any, num_stages: int, n_microbatches: int, forward: Callable,
               backward: Callable | None = None, schedule: str = "1F1B", registers: int = 2,
               timeout: float | None = None, name: str = "pipeline") -> Any:
    """Run this rank's stage of a pipeline over `n_microbatches` micro-batches as actors; stage i on rank i.

    Every rank of the pipeline calls it with its own stage's callbacks (the
    other ranks' tasks are placed there and never run here).

    Parameters
    ----------
    transport : loom.runtime.transport.Transport or None
        Between the ranks (rank i runs stage i); None for a one-stage pipeline.
    num_stages, n_microbatches : int
    forward : callable
        ``forward(mb, received)``: this stage's forward of micro-batch `mb`;
        `received` is what the previous stage's forward returned for it (the
        first stage gets `mb` again and reads its own inputs). Returns what
        the next stage receives: an array or a tuple of arrays (sent as raw
        buffers), or anything picklable.
    backward : callable, optional
        ``backward(mb, grads)``: this stage's backward of micro-batch `mb`;
        `grads` is what the next stage's backward returned (None on the last
        stage). Returns what the previous stage's backward receives. Without
        it the pipeline runs forwards only, each stage up to `registers`
        micro-batches ahead of the next.
    schedule : str
        ``"1F1B"`` or ``"GPipe"`` (see the module docstring): the order of
        each stage's forwards and backwards, set by registers alone.
    timeout : float, optional
        Seconds before the run gives up, naming what every actor waits on.

    Returns
    -------
    What `Plan.run` returns on this rank: the last stage's forward results
    (forward only, on the last rank), else the local sinks' outputs.
    """
    if schedule not in SCHEDULES:
        raise DistributedError(f"loom.distributed.actor_pipeline.run_stages: schedule must be one of {SCHEDULES}, "
                               f"got {schedule!r}")
    size = 1 if transport is None else transport.size
    if num_stages != size:
        raise DistributedError(f"loom.distributed.actor_pipeline.run_stages: {num_stages} stages on {size} ranks; "
                               "this pipeline runs one stage per rank")
    me = 0 if transport is None else transport.rank
    S, m = num_stages, n_microbatches
    busy = threading.Lock()   # This rank's forward and backward actors share its loom state.

    def here(i: int, fn: Callable) -> Callable:
        if i != me:
            return _elsewhere
        count = [0]

        def fire(*values):
            mb, count[0] = count[0], count[0] + 1
            with busy:
                return fn(mb, *values)
        return fire

    def held(i: int) -> int:
        """Forward registers of stage i: how many micro-batches it may hold between forward and backward."""
        return max(1, min(S - i, m)) if schedule == "1F1B" else max(1, m)

    plan = Plan(name, transport=transport)
    prev = plan.source("microbatches", iter(range(m)), registers=registers, rank=0)
    fwd = []
    for i in range(S):
        regs = held(i) if backward is not None else registers
        prev = plan.task(f"forward{i}", here(i, forward), [prev], registers=regs, rank=i,
                         subgraph=f"stage {i}'s forward")
        fwd.append(prev)
    if backward is not None:
        grad = None
        for i in range(S - 1, -1, -1):
            inputs = [fwd[i]] if grad is None else [fwd[i], grad]
            ahead = [fwd[i].registers - 1] + [0] * (len(inputs) - 1)
            grad = plan.task(f"backward{i}", here(i, lambda mb, _saved, *up, f=backward: f(mb, up[0] if up else None)),
                             inputs, registers=max(2, registers), rank=i, lookahead=ahead,
                             subgraph=f"stage {i}'s backward")
    return plan.run(timeout=timeout)


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
    me, data = transport.rank, list(microbatches)

    def forward(mb, received):
        x = data[mb] if me == 0 else received
        return _numpy(stages[me](_tensors(x)))
    out = run_stages(transport, len(stages), len(data), forward, registers=registers, timeout=timeout,
                     name="pipeline")
    return out if me == len(stages) - 1 else None


def train_pipeline(stages: Sequence[Callable], params: Sequence, loss_fn: Callable,
                   inputs: Sequence[np.ndarray], targets: Sequence[np.ndarray], transport: Any,
                   registers: int = 2, timeout: float | None = 120.0,
                   schedule: str = "1F1B") -> tuple[list, list]:
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
    registers : int
        Registers of the gradient edges between stages.
    schedule : str
        ``"1F1B"`` (default) or ``"GPipe"``, as `run_stages`.

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
    from loom.autograd.engine import grad
    from loom.autograd.grad_mode import no_grad
    _check(stages, transport, "train_pipeline")
    S, m, me = len(stages), len(inputs), transport.rank
    plist = [list(p) if isinstance(p, (list, tuple)) else [p] for p in params]
    mine = plist[me]
    saved: dict[int, tuple] = {}
    rows: list = []
    losses: list = []

    def forward(mb, received):
        x = _tensors(inputs[mb] if me == 0 else received, requires_grad=me > 0)
        out = stages[me](x)
        if me == S - 1:
            out = loss_fn(out, _tensors(targets[mb])) / m
            losses.append(float(_numpy(out)))
        saved[mb] = (x, out)
        return None if me == S - 1 else _numpy(out)

    def backward(mb, up):
        x, out = saved.pop(mb)
        wrt = mine if me == 0 else [x] + mine
        gs = grad([out], wrt, grad_outputs=None if up is None else [_tensors(up)], allow_unused=True)
        rows.append([_numpy(g) if g is not None else np.zeros(p.shape, np.float32) for g, p in zip(gs[-len(mine):],
                                                                                                mine)])
        return None if me == 0 else _numpy(gs[0])
    run_stages(transport, S, m, forward, backward, schedule=schedule, registers=registers, timeout=timeout,
               name="train_pipeline")
    summed = [sum(row[j] for row in rows) for j in range(len(mine))]
    with no_grad():
        for p, g in zip(mine, summed):
            p.grad = _tensors(g) if p.grad is None else p.grad + _tensors(g)
    grads: list = [None] * S
    grads[me] = summed if isinstance(params[me], (list, tuple)) else summed[0]
    return grads, losses
