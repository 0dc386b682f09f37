"""Stochastic weight averaging and EMA of a model's weights, as ``torch.optim.swa_utils``.

`AveragedModel` keeps a running average (SWA, or EMA with
`get_ema_multi_avg_fn`) of another model's parameters; `SWALR` anneals each
group's learning rate to its `swa_lr`; `update_bn` recomputes BatchNorm
statistics for the averaged weights.

Examples
--------
>>> from loom.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
>>> net = loom.nn.Linear(2, 1)
>>> ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.9))
>>> ema.update_parameters(net)
>>> int(ema.n_averaged)
1
"""
from __future__ import annotations

import copy
import itertools
import math
from typing import Any, Callable

import loom
from loom import nn
from loom.errors import LoomValueError
from loom.nn.modules.norm import _BatchNorm
from loom.optim.lr_scheduler import LRScheduler
from loom.optim.optimizer import Optimizer

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn",
           "get_ema_avg_fn", "get_swa_avg_fn"]


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable:
    """In place over lists: ``ema = decay * ema + (1 - decay) * current``."""
    if not 0.0 <= decay <= 1.0:
        raise LoomValueError(f"loom.optim.swa_utils.get_ema_multi_avg_fn: invalid decay value {decay} provided; "
                             "expected 0 <= decay <= 1")

    def ema_update(ema_params, current_params, num_averaged) -> None:
        for e, c in zip(ema_params, current_params):
            e.copy_(e + (c - e) * (1.0 - decay))
    return ema_update


def get_swa_multi_avg_fn() -> Callable:
    """In place over lists: the equal-weight running mean ``avg + (current - avg) / (n + 1)``."""
    def swa_update(averaged_params, current_params, num_averaged) -> None:
        n = float(num_averaged)
        for a, c in zip(averaged_params, current_params):
            a.copy_(a + (c - a) / (n + 1.0))
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable:
    """One tensor: ``decay * ema + (1 - decay) * current``."""
    if not 0.0 <= decay <= 1.0:
        raise LoomValueError(f"loom.optim.swa_utils.get_ema_avg_fn: invalid decay value {decay} provided; "
                             "expected 0 <= decay <= 1")
    return lambda ema, current, num_averaged: decay * ema + (1.0 - decay) * current


def get_swa_avg_fn() -> Callable:
    """One tensor: ``avg + (current - avg) / (n + 1)``."""
    return lambda averaged, current, num_averaged: averaged + (current - averaged) / (float(num_averaged) + 1.0)


class AveragedModel(nn.Module):
    """A copy of `model` whose parameters (and, with `use_buffers`, buffers) hold a running average.

    `update_parameters(model)` folds in `model`'s current values: the first
    call copies them; later calls apply `multi_avg_fn` (over all tensors at
    once), else `avg_fn` (per tensor), else the equal-weight SWA mean.
    Calling the averaged model runs the copy.
    """

    def __init__(self, model: nn.Module, device=None, avg_fn: Callable | None = None,
                 multi_avg_fn: Callable | None = None, use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise LoomValueError("loom.optim.swa_utils.AveragedModel: only one of avg_fn and multi_avg_fn should "
                                 "be provided")
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", loom.tensor(0, dtype=loom.int64))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args: Any, **kwargs: Any):
        return self.module(*args, **kwargs)

    def update_parameters(self, model: nn.Module) -> None:
        """Fold `model`'s current parameters into the average (a copy on the first call)."""
        if self.use_buffers:
            mine = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            theirs = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            mine = list(self.module.parameters())
            theirs = list(model.parameters())
        if len(mine) != len(theirs):
            raise LoomValueError(f"loom.optim.swa_utils.AveragedModel.update_parameters: the model has "
                                 f"{len(theirs)} tensors to average but the averaged copy has {len(mine)}; pass "
                                 "the model this AveragedModel was built from")
        n = int(self.n_averaged.item())
        with loom.no_grad():
            if n == 0:
                for a, c in zip(mine, theirs):
                    a.detach().copy_(c.detach())
            else:
                floats = [(a, c) for a, c in zip(mine, theirs) if a.dtype.is_floating_point]
                rest = [(a, c) for a, c in zip(mine, theirs) if not a.dtype.is_floating_point]
                if self.avg_fn is not None:
                    for a, c in floats:
                        a.detach().copy_(self.avg_fn(a.detach(), c.detach(), self.n_averaged))
                else:
                    fn = self.multi_avg_fn or get_swa_multi_avg_fn()
                    fn([a.detach() for a, _ in floats], [c.detach() for _, c in floats], self.n_averaged)
                for a, c in rest:  # Counters (num_batches_tracked) follow the source model.
                    a.detach().copy_(c.detach())
            if not self.use_buffers:
                # Without averaging the buffers, keep them in sync with the source model.
                for b_avg, b_model in zip(self.module.buffers(), model.buffers()):
                    b_avg.detach().copy_(b_model.detach())
        self.n_averaged = self.n_averaged + 1


def update_bn(loader, model: nn.Module, device=None) -> None:
    """Recompute the BatchNorm running statistics of `model` with one pass over `loader` (cumulative means)."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with loom.no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's learning rate to `swa_lr` over `anneal_epochs` ("cos" or "linear"), then hold it."""

    def __init__(self, optimizer: Optimizer, swa_lr, anneal_epochs: int = 10, anneal_strategy: str = "cos",
                 last_epoch: int = -1) -> None:
        swa_lrs = list(swa_lr) if isinstance(swa_lr, (list, tuple)) else [swa_lr] * len(optimizer.param_groups)
        if len(swa_lrs) != len(optimizer.param_groups):
            raise LoomValueError(f"loom.optim.swa_utils.SWALR: swa_lr must have one value per param group "
                                 f"({len(optimizer.param_groups)}), got {len(swa_lrs)}")
        for lr, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise LoomValueError(f"loom.optim.swa_utils.SWALR: anneal_strategy must be one of 'cos' or 'linear', "
                                 f"got {anneal_strategy!r}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise LoomValueError(f"loom.optim.swa_utils.SWALR: anneal_epochs must be a non-negative integer, got "
                                 f"{anneal_epochs!r}")
        self.anneal_strategy = anneal_strategy
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2 if self.anneal_strategy == "cos" else t

    @staticmethod
    def _initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list[float]:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self._anneal(max(0.0, min(1.0, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in self.optimizer.param_groups]
        alpha = self._anneal(max(0.0, min(1.0, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(self.optimizer.param_groups, prev_lrs)]
