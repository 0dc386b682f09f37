"""The update rules: SGD, Adam, AdamW, RMSprop, Adagrad (PyTorch's formulas, step for step)."""
from __future__ import annotations

import math

import loom
from loom.errors import LoomError
from loom.optim.optimizer import Optimizer, required


def _check(name: str, **values) -> None:
    for k, v in values.items():
        if isinstance(v, tuple):
            if not all(0.0 <= b < 1.0 for b in v):
                raise LoomError(f"loom.optim.{name}: invalid {k} {v}; each must be in [0, 1)")
        elif v < 0.0:
            raise LoomError(f"loom.optim.{name}: invalid {k} {v}; expected a non-negative value")


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    Examples
    --------
    >>> w = loom.ones(3, requires_grad=True)
    >>> opt = loom.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()
    [0.800000011920929, 0.800000011920929, 0.800000011920929]
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False) -> None:
        _check("SGD", lr=lr if lr is not required else 0.0, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise LoomError("loom.optim.SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _update(self, p, g, group, state):
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        mu = group["momentum"]
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = g.detach().clone()
            else:
                buf = buf * mu + g * (1.0 - group["dampening"])
            state["momentum_buffer"] = buf
            g = g + buf * mu if group["nesterov"] else buf
        p.sub_(g * group["lr"])


class Adam(Optimizer):
    """Adam (Kingma & Ba), with optional AMSGrad and L2 weight decay."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 *, maximize=False) -> None:
        _check(type(self).__name__, lr=lr, eps=eps, weight_decay=weight_decay, betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _update(self, p, g, group, state):
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_avg_sq"] = loom.zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = loom.zeros_like(p)
        step = int(state["step"].item()) + 1
        state["step"] = loom.tensor(float(step))
        if wd:
            if self.decoupled:
                p.mul_(1.0 - lr * wd)
            else:
                g = g + p * wd
        m = state["exp_avg"] * b1 + g * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        bc1 = 1.0 - b1 ** step
        bc2 = 1.0 - b2 ** step
        if group["amsgrad"]:
            vmax = loom.maximum(state["max_exp_avg_sq"], v)
            state["max_exp_avg_sq"] = vmax
            v = vmax
        denom = v.sqrt() / math.sqrt(bc2) + group["eps"]
        p.sub_(m / denom * (lr / bc1))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter); weight_decay defaults to 0.01."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 *, maximize=False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


class RMSprop(Optimizer):
    """RMSprop with optional momentum and centering."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False) -> None:
        _check("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def _update(self, p, g, group, state):
        alpha = group["alpha"]
        if not state:
            state["step"] = loom.tensor(0.0)
            state["square_avg"] = loom.zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = loom.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = loom.zeros_like(p)
        state["step"] = state["step"] + 1.0
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        sq = state["square_avg"] * alpha + g * g * (1.0 - alpha)
        state["square_avg"] = sq
        if group["centered"]:
            ga = state["grad_avg"] * alpha + g * (1.0 - alpha)
            state["grad_avg"] = ga
            avg = (sq - ga * ga).sqrt() + group["eps"]
        else:
            avg = sq.sqrt() + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"] * group["momentum"] + g / avg
            state["momentum_buffer"] = buf
            p.sub_(buf * group["lr"])
        else:
            p.sub_(g / avg * group["lr"])


class Adagrad(Optimizer):
    """Adagrad with learning-rate decay and an initial accumulator value."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, *, maximize=False) -> None:
        _check("Adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
               initial_accumulator_value=initial_accumulator_value)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = {"step": loom.tensor(0.0),
                                 "sum": loom.full_like(p, group["initial_accumulator_value"])}

    def _update(self, p, g, group, state):
        step = int(state["step"].item()) + 1
        state["step"] = loom.tensor(float(step))
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        clr = group["lr"] / (1.0 + (step - 1) * group["lr_decay"])
        s = state["sum"] + g * g
        state["sum"] = s
        p.sub_(g / (s.sqrt() + group["eps"]) * clr)
