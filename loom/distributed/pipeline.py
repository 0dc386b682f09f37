"""Pipeline parallelism across ranks, with ``torch.distributed.pipelining``'s interface.

A model is cut into consecutive stages, one per rank of the group: stage ``i``
runs on group rank ``i``. A schedule cuts each batch into micro-batches along
dim 0; activations travel forward from stage to stage with point-to-point
messages (`loom.distributed.isend` / `recv`), and the gradients of those
activations travel back the same way. Parameter gradients accumulate over the
micro-batches, each micro-batch's loss scaled by ``1 / n_microbatches``, so one
optimizer step after ``schedule.step`` equals one step of the whole model in one
process on the whole batch (for a loss that is a mean over the batch).

Two schedules:

- `ScheduleGPipe`: every micro-batch's forward, then every backward. Each stage
  holds all ``n_microbatches`` micro-batches' activations at the peak.
- `Schedule1F1B`: after a warm-up of ``num_stages - stage_index - 1`` forwards,
  each stage alternates one forward and one backward, so stage ``i`` holds at
  most ``num_stages - i`` micro-batches' activations (`PipelineStage.peak_live`).

Both run on the actor runtime (`loom.distributed.actor_pipeline.run_stages`):
stage i's forward and backward are actors on rank i, each firing once per
micro-batch, and activations and their gradients travel between ranks as
registers over the MPI transport (`loom.runtime.transport.MpiTransport`).
No list of steps is written out: a stage's forward holds one register per
micro-batch whose backward is still to come (``num_stages - stage_index``
for 1F1B, all of them for GPipe), and its backward waits until the forwards
the schedule puts before it have filled theirs, so the firings come in the
schedule's order. Messages carry their arrays' shapes and dtypes, so
batches may change size between steps. A stage that raises stops every
stage's actors, and each rank's `step` raises naming the failing stage.

Examples
--------
.. code-block:: python

    import loom
    import loom.distributed as dist
    from loom.distributed.pipeline import PipelineStage, Schedule1F1B

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    layers = [loom.nn.Linear(16, 16) for _ in range(world)]     # the same seed on every rank
    stage = PipelineStage(layers[rank], stage_index=rank, num_stages=world)
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loom.nn.functional.mse_loss)
    opt = loom.optim.SGD(stage.submod.parameters(), lr=0.1)
    opt.zero_grad()
    losses = []
    if rank == 0:
        schedule.step(x)                                # the first stage feeds the batch
    elif rank == world - 1:
        out = schedule.step(target=y, losses=losses)    # the last stage computes the loss
    else:
        schedule.step()
    opt.step()
"""
from __future__ import annotations

from typing import Any, Callable

from loom.autocast import autocast, get_dtype, is_enabled
from loom.autograd.grad_mode import enable_grad, no_grad
from loom.distributed.actor_pipeline import run_stages
from loom.distributed.process_group import DistributedError, resolve
from loom.nn.module import Module

__all__ = ["PipelineStage", "ScheduleGPipe", "Schedule1F1B"]


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _pack(tensors: tuple) -> tuple:
    """Tensors as what a register carries to another rank: raw arrays, with loom dtypes NumPy lacks named."""
    arrays = tuple(t.detach().numpy() for t in tensors)
    names = tuple(t.dtype.name for t in tensors)
    if all(a.dtype.name == name for a, name in zip(arrays, names)):
        return arrays                    # Sent as raw buffers.
    return ("typed", arrays, names)     # bfloat16 travels as float32 and is cast back (pickled: a rare path).


def _unpack(value: tuple) -> list:
    import loom
    if value and isinstance(value[0], str):   # ("typed", arrays, dtype names)
        return [loom.tensor(a).to(getattr(loom, name)) for a, name in zip(value[1], value[2])]
    return [loom.tensor(a) for a in value]


class PipelineStage:
    """One stage of a pipeline: `submodule` run on group rank `stage_index` of `num_stages`.

    Parameters
    ----------
    submodule : loom.nn.Module
        This stage's part of the model. Its inputs are the previous stage's
        outputs (a tensor or a tuple of tensors, in order); the first stage's
        are the micro-batches of the arguments of `step`. Gradients flow back
        through the floating-point ones; integer ones (masks, indices) pass as
        they are.
    stage_index : int
        Which stage this is; it must equal this process's rank in `group`.
    num_stages : int
        How many stages the pipeline has; it must equal the size of `group`.
    device
        Accepted for compatibility (CPU only).
    group : ProcessGroup, optional
        The ranks that form the pipeline (default: all).

    Attributes
    ----------
    live : int
        How many micro-batches' activations this stage holds now (forward done, backward not yet).
    peak_live : int
        The most it held at once during the last `step`.
    order : list of (str, int)
        The last `step`'s firings on this stage in the order they ran:
        ``("F", k)`` the forward and ``("B", k)`` the backward of micro-batch k.

    Examples
    --------
    .. code-block:: python

        stage = PipelineStage(layers[dist.get_rank()], dist.get_rank(), dist.get_world_size())
    """

    def __init__(self, submodule: Module, stage_index: int, num_stages: int, device=None, input_args=None,
                 output_args=None, group=None) -> None:
        if not isinstance(submodule, Module):
            raise DistributedError(f"loom.distributed.pipeline.PipelineStage: submodule must be a loom.nn.Module, "
                                   f"got {type(submodule).__name__}")
        g = resolve(group, "pipeline.PipelineStage")
        if g is None:
            raise DistributedError("loom.distributed.pipeline.PipelineStage: this process is not a member of group")
        if not isinstance(num_stages, int) or num_stages != g.size():
            raise DistributedError(f"loom.distributed.pipeline.PipelineStage: num_stages={num_stages!r} but the "
                                   f"group has {g.size()} ranks; this pipeline runs one stage per rank, so launch "
                                   f"{num_stages} processes or pass num_stages={g.size()}")
        if not isinstance(stage_index, int) or stage_index != g.rank():
            raise DistributedError(f"loom.distributed.pipeline.PipelineStage: stage_index={stage_index!r} on group "
                                   f"rank {g.rank()}; stage i must run on group rank i")
        self.submod = submodule
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group = g
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self._transport = None
        if num_stages > 1:  # Collective over the group: every rank makes its stage in the same order.
            from loom.runtime.transport import MpiTransport
            self._transport = MpiTransport(g._comm)
        self._saved: dict[int, tuple] = {}  # Micro-batch -> (inputs that want a gradient, outputs, loss).
        self.live = 0
        self.peak_live = 0
        self.order: list[tuple[str, int]] = []

    def __repr__(self) -> str:
        return f"PipelineStage(stage_index={self.stage_index}, num_stages={self.num_stages})"

    # Forward and backward of one micro-batch, as the actors fire them -----------------------------------------

    def _forward(self, mb: int, args: tuple, kwargs: dict, target, loss_fn: Callable | None, with_grad: bool):
        """Run the stage on micro-batch `mb` (`args`: the previous stage's outputs unless first)."""
        if not self.is_first:
            args = tuple(t.requires_grad_(with_grad and t.is_floating_point()) for t in _unpack(args))
            kwargs = {}
        out = _as_tuple(self.submod(*args, **kwargs))
        loss = None
        if self.is_last and loss_fn is not None:
            loss = loss_fn(out[0] if len(out) == 1 else out, target)
        if with_grad:
            wants = tuple(a for a in args if a.is_floating_point()) if not self.is_first else ()
            self._saved[mb] = (wants, out, loss)
            self.live += 1
            self.peak_live = max(self.peak_live, self.live)
        return out, loss

    def _backward(self, mb: int, grads: tuple | None, n_microbatches: int) -> tuple | None:
        """Backpropagate micro-batch `mb` (`grads`: the next stage's input gradients); this stage's input gradients."""
        import loom
        from loom.autograd import engine
        wants, out, loss = self._saved.pop(mb)
        self.live -= 1
        if self.is_last:
            engine.backward([loss / n_microbatches])
        else:
            # The next stage returns one gradient per floating-point output, in order.
            pairs = [(o, g.to(o.dtype)) for o, g in zip([o for o in out if o.is_floating_point()],
                                                        _unpack(grads or ())) if o.requires_grad]
            if pairs:
                engine.backward([o for o, _ in pairs], [g for _, g in pairs])
        if self.is_first:
            return None
        with no_grad():
            return _pack(tuple(a.grad if a.grad is not None else loom.zeros_like(a) for a in wants))


class _PipelineSchedule:
    """What both schedules share: checking and splitting the batch, and the step around the per-stage order."""

    _name = "PipelineSchedule"

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn: Callable | None = None,
                 scale_grads: bool = True) -> None:
        if not isinstance(stage, PipelineStage):
            raise DistributedError(f"loom.distributed.pipeline.{self._name}: stage must be a PipelineStage, got "
                                   f"{type(stage).__name__}")
        if not isinstance(n_microbatches, int) or isinstance(n_microbatches, bool) or n_microbatches < 1:
            raise DistributedError(f"loom.distributed.pipeline.{self._name}: n_microbatches must be an int >= 1, "
                                   f"got {n_microbatches!r}")
        self.stage = stage
        self.n_microbatches = n_microbatches
        self.loss_fn = loss_fn
        self.scale_grads = bool(scale_grads)

    def _split(self, value, what: str) -> list:
        """`value` cut into ``n_microbatches`` equal parts along dim 0 (non-tensors repeated)."""
        from loom.tensor import Tensor
        m = self.n_microbatches
        if not isinstance(value, Tensor):
            return [value] * m
        n = value.shape[0] if len(value.shape) else None
        if n is None or n % m:
            raise DistributedError(f"loom.distributed.pipeline.{self._name}.step: {what} has shape "
                                   f"{tuple(value.shape)}, whose dim 0 ({n}) does not divide into "
                                   f"n_microbatches={m} equal micro-batches; pass a batch whose size is a multiple "
                                   f"of {m}")
        k = n // m
        return [value[i * k:(i + 1) * k] for i in range(m)]

    _schedule = "1F1B"  # The order of each stage's firings (loom.distributed.actor_pipeline.run_stages).

    def step(self, *args: Any, target=None, losses: list | None = None, **kwargs: Any):
        """Run one batch through the pipeline: forwards, and backwards when there is a `loss_fn`.

        Parameters
        ----------
        *args, **kwargs
            The first stage's inputs, whole batches (split along dim 0 here);
            ignored on the other stages.
        target : Tensor, optional
            The whole batch's target, needed on the last stage when there is a `loss_fn`.
        losses : list, optional
            On the last stage, each micro-batch's loss (unscaled) is appended to it.

        Returns
        -------
        Tensor or tuple or None
            On the last stage, its outputs for the whole batch (micro-batches
            concatenated along dim 0); None on the other stages.
        """
        from loom.functional.shape import cat
        st, m = self.stage, self.n_microbatches
        xs = [self._split(a, f"args[{i}]") for i, a in enumerate(args)]
        kws = {k: self._split(v, f"kwargs[{k!r}]") for k, v in kwargs.items()}
        if st.is_first and not args and not kwargs:
            raise DistributedError(f"loom.distributed.pipeline.{self._name}.step: the first stage needs the batch "
                                   "as arguments, e.g. schedule.step(x)")
        train = self.loss_fn is not None
        if st.is_last and train and target is None:
            raise DistributedError(f"loom.distributed.pipeline.{self._name}.step: the last stage computes the loss "
                                   "and needs target=, e.g. schedule.step(target=y)")
        targets = self._split(target, "target") if st.is_last and train else [None] * m
        st.peak_live = 0
        st.order = []
        outs: list = [None] * m
        scale = m if self.scale_grads else 1
        # The stage's actors run in threads of their own: they take the caller's autocast region with them.
        region = (get_dtype(), is_enabled())

        def forward(mb: int, received):
            st.order.append(("F", mb))
            with (enable_grad() if train else no_grad()), autocast(*region):
                args = tuple(x[mb] for x in xs) if st.is_first else received
                out, loss = st._forward(mb, args, {k: v[mb] for k, v in kws.items()}, targets[mb], self.loss_fn,
                                        train)
            outs[mb] = out if st.is_last else None
            if losses is not None and loss is not None:
                losses.append(loss.detach())
            # Sent on as raw arrays: gradients flow back through the floating-point ones.
            return None if st.is_last else _pack(out)

        def backward(mb: int, grads):
            st.order.append(("B", mb))
            with enable_grad(), autocast(*region):
                return st._backward(mb, grads, scale)
        run_stages(st._transport, st.num_stages, m, forward, backward if train else None, schedule=self._schedule,
                   name=self._name)
        if not st.is_last:
            return None
        with no_grad():
            merged = tuple(cat([o[k].detach() for o in outs]) for k in range(len(outs[0])))
        return merged[0] if len(merged) == 1 else merged


class ScheduleGPipe(_PipelineSchedule):
    """GPipe: every micro-batch's forward, then every micro-batch's backward.

    Parameters
    ----------
    stage : PipelineStage
        This rank's stage.
    n_microbatches : int
        How many equal parts each batch is cut into along dim 0.
    loss_fn : callable, optional
        ``loss_fn(output, target)`` on the last stage, a mean over the micro-batch;
        without it `step` runs forwards only.
    scale_grads : bool
        Scale each micro-batch's loss by ``1 / n_microbatches`` (default True), so the
        accumulated gradients are those of the whole batch's mean loss.

    Examples
    --------
    .. code-block:: python

        schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loom.nn.functional.mse_loss)
        out = schedule.step(x) if stage.is_first else schedule.step(target=y)
    """

    _name = "ScheduleGPipe"
    _schedule = "GPipe"


class Schedule1F1B(_PipelineSchedule):
    """1F1B: a warm-up of forwards, then one forward and one backward in turn, then the remaining backwards.

    Stage ``i`` of ``S`` runs ``min(S - i - 1, n_microbatches)`` warm-up forwards,
    so it holds at most ``S - i`` micro-batches' activations at once (GPipe holds
    all ``n_microbatches``). Parameters as `ScheduleGPipe`.

    Examples
    --------
    .. code-block:: python

        schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=loom.nn.functional.cross_entropy)
        losses = []
        schedule.step(tokens) if stage.is_first else schedule.step(target=labels, losses=losses)
    """

    _name = "Schedule1F1B"
    _schedule = "1F1B"
