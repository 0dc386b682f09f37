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
        if type(self).get_lr is not LRScheduler.get_lr:
            # A user's scheduler written for PyTorch overrides get_lr() (reading self.last_epoch, base_lrs, or
            # the groups' current lr); step() calls it as PyTorch's does.
            self._get_lr_called_within_step = True
            try:
                return list(self.get_lr())
            finally:
                self._get_lr_called_within_step = False
        raise NotImplementedError(f"loom.optim.lr_scheduler: {type(self).__name__} must define get_lr() "
                                  "(the learning rate of each param group at self.last_epoch)")

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def get_lr(self) -> list[float]:
        return self._lr_at(self.last_epoch)

    def step(self, epoch: int | None = None) -> None:
        self._step_count = getattr(self, "_step_count", 0) + 1  # As PyTorch's (1 after construction).
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


class ChainedScheduler(LRScheduler):
    """Step several schedulers of one optimizer together; their learning-rate factors multiply.

    PyTorch's chainable schedulers each multiply the current learning rate;
    loom's compute theirs from ``base_lr``, so the chain applies
    ``base_lr * prod(lr_s / base_lr)`` over its schedulers `s`, which is
    PyTorch's result for its chainable multiplicative schedules (StepLR,
    MultiStepLR, ExponentialLR, ConstantLR, LinearLR).
    """

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None) -> None:
        schedulers = list(schedulers)
        if not schedulers:
            raise LoomError("loom.optim.ChainedScheduler: expected at least one scheduler")
        optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        for k, sch in enumerate(schedulers):
            if sch.optimizer is not optimizer:
                raise LoomError(f"loom.optim.ChainedScheduler: scheduler {k} ({type(sch).__name__}) wraps another "
                                "optimizer; every scheduler must wrap the same one")
            if isinstance(sch, ReduceLROnPlateau):
                raise LoomError("loom.optim.ChainedScheduler: ReduceLROnPlateau steps on a metric and cannot be "
                                "chained; call its step(metric) yourself")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._apply()

    def _apply(self) -> None:
        lrs = [list(sch.get_last_lr()) for sch in self._schedulers]
        for k, g in enumerate(self.optimizer.param_groups):
            lr = g["initial_lr"]
            for sch, sl in zip(self._schedulers, lrs):
                base = sch.base_lrs[k]
                lr = lr * (sl[k] / base) if base else sl[k]
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def step(self, epoch: int | None = None) -> None:  # type: ignore[override]
        for sch in self._schedulers:
            sch.step()
        self._apply()

    def state_dict(self) -> dict:
        return {"_schedulers": [sch.state_dict() for sch in self._schedulers], "_last_lr": self._last_lr}

    def load_state_dict(self, state: dict) -> None:
        for sch, st in zip(self._schedulers, state["_schedulers"]):
            sch.load_state_dict(st)
        self._last_lr = state.get("_last_lr", self._last_lr)


def _initial_step(self) -> None:
    self.step()


LRScheduler._initial_step = _initial_step  # type: ignore[attr-defined]


class MultiplicativeLR(LRScheduler):
    """Multiply each group's current lr by lr_lambda(epoch) on every step after the first.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=1.0)
    >>> sched = loom.optim.lr_scheduler.MultiplicativeLR(opt, lambda epoch: 0.5)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, lr_lambda: Callable | Sequence[Callable], last_epoch: int = -1) -> None:
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise LoomError(f"loom.optim.MultiplicativeLR: expected {n} lr_lambdas, got {len(fns)}")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        groups = self.optimizer.param_groups
        if epoch > 0:
            return [g["lr"] * fn(epoch) for g, fn in zip(groups, self.lr_lambdas)]
        return [g["lr"] for g in groups]

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}


class PolynomialLR(LRScheduler):
    """Decay to zero over total_iters epochs: lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=1.0)
    >>> sched = loom.optim.lr_scheduler.PolynomialLR(opt, total_iters=4, power=2.0)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.5625]
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        factor = (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power
        return [base * factor for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to eta_min over T_i epochs, restarting with T_i *= T_mult (SGDR).

    `step(epoch)` accepts a fractional epoch (e.g. ``epoch + i / iters_per_epoch``), as PyTorch's does.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=1.0)
    >>> sched = loom.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)
    >>> lrs = []
    >>> for _ in range(4):
    ...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 6))
    >>> lrs
    [0.5, 1.0, 0.5, 1.0]
    """

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if not isinstance(T_0, int) or T_0 <= 0:
            raise LoomError(f"loom.optim.CosineAnnealingWarmRestarts: expected a positive integer T_0, got {T_0!r}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise LoomError(f"loom.optim.CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, "
                            f"got {T_mult!r}")
        if not isinstance(eta_min, (float, int)):
            raise LoomError(f"loom.optim.CosineAnnealingWarmRestarts: expected a float eta_min, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur: float = last_epoch
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise LoomError(f"loom.optim.CosineAnnealingWarmRestarts: expected a non-negative epoch, "
                                f"got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for g, lr in zip(self.optimizer.param_groups, self._lr_at(self.last_epoch)):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class CyclicLR(LRScheduler):
    """Cycle the lr between base_lr and max_lr (Smith), per batch; momentum cycles inversely.

    Modes: ``'triangular'``, ``'triangular2'`` (amplitude halves each cycle), ``'exp_range'``
    (amplitude scaled by gamma ** iteration), or a custom `scale_fn` of the cycle or iteration.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=0.1, momentum=0.9)
    >>> sched = loom.optim.lr_scheduler.CyclicLR(opt, base_lr=0.1, max_lr=0.5, step_size_up=2)
    >>> opt.step(); sched.step(); round(sched.get_last_lr()[0], 6)
    0.3
    """

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000, step_size_down: int | None = None,
                 mode: str = "triangular", gamma: float = 1.0, scale_fn: Callable | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9,
                 last_epoch: int = -1) -> None:
        groups = optimizer.param_groups
        n = len(groups)

        def per_group(value, name):
            values = list(value) if isinstance(value, (list, tuple)) else [value] * n
            if len(values) != n:
                raise LoomError(f"loom.optim.CyclicLR: expected {n} values for {name}, got {len(values)}")
            return values
        base_lrs = per_group(base_lr, "base_lr")
        if last_epoch == -1:
            for lr, g in zip(base_lrs, groups):
                g["lr"] = lr
        self.max_lrs = per_group(max_lr, "max_lr")
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise LoomError(f"loom.optim.CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range' "
                            f"when scale_fn is None, got {mode!r}")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else \
            {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}[mode]
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise LoomError("loom.optim.CyclicLR: optimizer must support momentum or betas with "
                                "cycle_momentum enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = per_group(base_momentum, "base_momentum")
            self.max_momentums = per_group(max_momentum, "max_momentum")
            if last_epoch == -1:
                for m_max, m_base, g in zip(self.max_momentums, self.base_momentums, groups):
                    if self.use_beta1:
                        g["betas"] = (m_max, *g["betas"][1:])
                    else:
                        g["momentum"] = m_max
                    g["max_momentum"], g["base_momentum"] = m_max, m_base
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def _lr_at(self, epoch):
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        scale = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        amplitude = self.scale_fn(cycle if self.scale_mode == "cycle" else epoch)
        lrs = [base + (top - base) * scale * amplitude for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, m_base, m_max in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                m = m_max - (m_max - m_base) * scale * amplitude
                if self.use_beta1:
                    g["betas"] = (m, *g["betas"][1:])
                else:
                    g["momentum"] = m
        return lrs

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_scale_fn_custom")}


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by `factor` when a metric has stopped improving for `patience` epochs.

    Parameters
    ----------
    optimizer : Optimizer
    mode : 'min' or 'max'
        Whether the metric should fall (a loss) or rise (an accuracy).
    factor : float
        The lr multiplier on a plateau (< 1).
    patience : int
        Epochs without improvement tolerated before the lr is reduced.
    threshold : float
        How much better counts as better, relative (``'rel'``) or absolute (``'abs'``).
    threshold_mode : 'rel' or 'abs'
    cooldown : int
        Epochs to wait after a reduction before counting bad epochs again.
    min_lr : float or list of float
        A floor for each group's lr.
    eps : float
        Reductions smaller than this are skipped.

    Examples
    --------
    >>> opt = loom.optim.SGD([loom.nn.Parameter(loom.zeros(1))], lr=1.0)
    >>> sched = loom.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    >>> for loss in [1.0, 1.0, 1.0]:
    ...     sched.step(loss)
    >>> sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0.0,
                 eps: float = 1e-8) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"loom.optim.lr_scheduler: {type(optimizer).__name__} is not an Optimizer")
        if factor >= 1.0:
            raise LoomError(f"loom.optim.ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max"):
            raise LoomError(f"loom.optim.ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise LoomError(f"loom.optim.ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', "
                            f"got {threshold_mode!r}")
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise LoomError(f"loom.optim.ReduceLROnPlateau: expected {n} min_lrs, got {len(min_lr)}")
            self.min_lrs = list(min_lr)
        else:
            self.min_lrs = [min_lr] * n
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def step(self, metrics=None, epoch: int | None = None) -> None:  # type: ignore[override]
        if metrics is None:
            raise LoomError("loom.optim.ReduceLROnPlateau.step needs the metric to watch (e.g. the validation loss)")
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for g, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(g["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]
