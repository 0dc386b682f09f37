"""Learning-rate schedules with PyTorch's names, defaults and step semantics."""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Callable, Sequence

from loom.errors import LoomError
from loom.optim.optimizer import Optimizer


class LRScheduler:
    """Base class: sets each group's lr from `_lr_at(epoch)` on every `step()`."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"loom.optim.lr_scheduler: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise LoomError(f"loom.optim.lr_scheduler: param 'initial_lr' is not specified in "
                                    f"param_groups[{i}] when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def _lr_at(self, epoch: int) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must define _lr_at")

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def get_lr(self) -> list[float]:
        return self._lr_at(self.last_epoch)

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        lrs = self._lr_at(self.last_epoch)
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


_LRScheduler = LRScheduler


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); one function or one per group."""

    def __init__(self, optimizer, lr_lambda: Callable | Sequence[Callable], last_epoch: int = -1) -> None:
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise LoomError(f"loom.optim.LambdaLR: expected {n} lr_lambdas, got {len(fns)}")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [base * fn(epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}


class StepLR(LRScheduler):
    """Decay by gamma every step_size epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Decay by gamma at each milestone epoch."""

    def __init__(self, optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.milestones = sorted(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [base * self.gamma ** bisect_right(self.milestones, epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply every group's learning rate by `gamma` each epoch: lr = base_lr * gamma ** epoch.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=1.0)
    >>> sched = loom.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    >>> for _ in range(2):
    ...     opt.step(); sched.step()
    >>> sched.get_last_lr()
    [0.25]
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [base * self.gamma ** epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine from base_lr down to eta_min over T_max epochs (and back up after, as PyTorch)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
                for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale lr linearly from start_factor to end_factor over total_iters epochs."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise LoomError("loom.optim.LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        t = min(epoch, self.total_iters)
        factor = self.start_factor + (self.end_factor - self.start_factor) * t / self.total_iters
        return [base * factor for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Scale the learning rate by `factor` for the first `total_iters` epochs, then use the base rate.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=0.9)
    >>> sched = loom.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=1)
    >>> lrs = [sched.get_last_lr()[0]]
    >>> opt.step(); sched.step()
    >>> lrs + sched.get_last_lr()
    [0.45, 0.9]
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1) -> None:
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [base * (self.factor if epoch < self.total_iters else 1.0) for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith): warm up to max_lr, anneal far below the start; cycles momentum too."""

    def __init__(self, optimizer, max_lr, total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise LoomError("loom.optim.OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise LoomError(f"loom.optim.OneCycleLR: total_steps must be positive, got {total_steps}")
        if anneal_strategy not in ("cos", "linear"):
            raise LoomError(f"loom.optim.OneCycleLR: anneal_strategy must be 'cos' or 'linear', "
                            f"got {anneal_strategy!r}")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        n = len(optimizer.param_groups)
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, max_lrs):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        end = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                             "base_momentum", "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            defaults = optimizer.defaults
            if "momentum" not in defaults and "betas" not in defaults:
                raise LoomError("loom.optim.OneCycleLR: optimizer must support momentum or betas "
                                "with cycle_momentum enabled")
            self._use_betas = "betas" in defaults
            bms = list(base_momentum) if isinstance(base_momentum, (list, tuple)) else [base_momentum] * n
            mms = list(max_momentum) if isinstance(max_momentum, (list, tuple)) else [max_momentum] * n
            if last_epoch == -1:
                for g, bm, mm in zip(optimizer.param_groups, bms, mms):
                    if self._use_betas:
                        g["betas"] = (mm, *g["betas"][1:])
                    else:
                        g["momentum"] = mm
                    g["max_momentum"], g["base_momentum"] = mm, bm
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _lr_at(self, epoch):
        if epoch > self.total_steps:
            raise LoomError(f"loom.optim.OneCycleLR: tried to step {epoch} times; total_steps is "
                            f"{self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if epoch <= end or i == len(self._phases) - 1:
                    pct = (epoch - start) / (end - start)
                    lr = self._anneal(g[lr0], g[lr1], pct)
                    mom = self._anneal(g[m0], g[m1], pct) if self.cycle_momentum else None
                    break
                start = end
            lrs.append(lr)
            if self.cycle_momentum:
                if self._use_betas:
                    g["betas"] = (mom, *g["betas"][1:])
                else:
                    g["momentum"] = mom
        return lrs


class SequentialLR(LRScheduler):
    """Run schedulers one after another, switching at the milestones."""

    def __init__(self, optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1) -> None:
        if len(milestones) != len(schedulers) - 1:
            raise LoomError(f"loom.optim.SequentialLR: expected {len(schedulers) - 1} milestones for "
                            f"{len(schedulers)} schedulers, got {len(milestones)}")
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise LoomError("loom.optim.SequentialLR: every scheduler must wrap the given optimizer")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        # Undo the steps the sub-schedulers took when they were built, then start the first one.
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in self._schedulers:
            s.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched.step(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "_milestones": self._milestones,
                "_schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch = state["last_epoch"]
        self._milestones = state["_milestones"]
        for s, st in zip(self._schedulers, state["_schedulers"]):
            s.load_state_dict(st)


def _initial_step(self) -> None:
    self.step()


LRScheduler._initial_step = _initial_step  # type: ignore[attr-defined]
