"""The update rules: SGD, Adam, AdamW, RMSprop, Adagrad (PyTorch's formulas, step for step).

State tensors are updated in place and step counts are tensors, so a whole
training step traces into one graph under `loom.function`; hyperparameters a
scheduler may change (lr, momentum, betas) are read afresh on every call.
"""
from __future__ import annotations

import loom
from loom import dtypes as dt
from loom.errors import LoomError
from loom.optim.optimizer import Optimizer, required


def _check(name: str, **values) -> None:
    for k, v in values.items():
        if isinstance(v, tuple):
            if not all(0.0 <= b < 1.0 for b in v):
                raise LoomError(f"loom.optim.{name}: invalid {k} {v}; each must be in [0, 1)")
        elif v < 0.0:
            raise LoomError(f"loom.optim.{name}: invalid {k} {v}; expected a non-negative value")


def _step_count(state: dict) -> loom.Tensor:
    """Advance and return the step counter (a float32 tensor, as PyTorch keeps it)."""
    state["step"].add_(1.0)
    return state["step"].to(dt.float64)


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
        if self._static(group, "weight_decay"):
            g = g + p * self._dyn(group, "weight_decay")
        if self._static(group, "momentum"):
            mu = self._dyn(group, "momentum")
            buf = state.get("momentum_buffer")
            if buf is None:
                state["momentum_buffer"] = buf = g.detach().clone()
            else:
                buf.mul_(mu).add_(g * (1.0 - self._dyn(group, "dampening")))
            g = g + buf * mu if self._static(group, "nesterov") else buf
        p.sub_(g * self._dyn(group, "lr"))


class Adam(Optimizer):
    """Adam (Kingma & Ba), with optional AMSGrad and L2 weight decay."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 *, maximize=False) -> None:
        _check(type(self).__name__, lr=lr, eps=eps, weight_decay=weight_decay, betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _update(self, p, g, group, state):
        amsgrad = self._static(group, "amsgrad")
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_avg_sq"] = loom.zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = loom.zeros_like(p)
        step = _step_count(state)
        b1, b2 = self._dyn(group, "betas", 0), self._dyn(group, "betas", 1)
        lr = self._dyn(group, "lr")
        if self._static(group, "weight_decay"):
            wd = self._dyn(group, "weight_decay")
            if self.decoupled:
                p.mul_(1.0 - lr * wd)
            else:
                g = g + p * wd
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g * (1.0 - b1))
        v.mul_(b2).add_(g * g * (1.0 - b2))
        bc1 = 1.0 - b1 ** step
        bc2_sqrt = (1.0 - b2 ** step).sqrt()
        if amsgrad:
            vmax = state["max_exp_avg_sq"]
            vmax.copy_(loom.maximum(vmax, v))
            v = vmax
        denom = v.sqrt() / bc2_sqrt + self._dyn(group, "eps")
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
        use_momentum = self._static(group, "momentum")
        centered = self._static(group, "centered")
        if not state:
            state["step"] = loom.tensor(0.0)
            state["square_avg"] = loom.zeros_like(p)
            if use_momentum:
                state["momentum_buffer"] = loom.zeros_like(p)
            if centered:
                state["grad_avg"] = loom.zeros_like(p)
        state["step"].add_(1.0)
        alpha = self._dyn(group, "alpha")
        if self._static(group, "weight_decay"):
            g = g + p * self._dyn(group, "weight_decay")
        sq = state["square_avg"]
        sq.mul_(alpha).add_(g * g * (1.0 - alpha))
        eps = self._dyn(group, "eps")
        if centered:
            ga = state["grad_avg"]
            ga.mul_(alpha).add_(g * (1.0 - alpha))
            avg = (sq - ga * ga).sqrt() + eps
        else:
            avg = sq.sqrt() + eps
        lr = self._dyn(group, "lr")
        if use_momentum:
            buf = state["momentum_buffer"]
            buf.mul_(self._dyn(group, "momentum")).add_(g / avg)
            p.sub_(buf * lr)
        else:
            p.sub_(g / avg * lr)


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
        step = _step_count(state)
        if self._static(group, "weight_decay"):
            g = g + p * self._dyn(group, "weight_decay")
        clr = self._dyn(group, "lr") / ((step - 1.0) * self._dyn(group, "lr_decay") + 1.0)
        s = state["sum"]
        s.add_(g * g)
        p.sub_(g / (s.sqrt() + self._dyn(group, "eps")) * clr)
