"""The update rules: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD,
Adafactor, Muon, SparseAdam and LBFGS (PyTorch's formulas, step for step).

State tensors are updated in place and step counts are tensors, so a whole
training step traces into one graph under `loom.function`; hyperparameters a
scheduler may change (lr, momentum, betas) are read afresh on every call.
"""
from __future__ import annotations

import numpy as np

from loom import _api as loom
from loom import dtypes as dt
from loom.errors import LoomError, LoomValueError
from loom.optim import foreach
from loom.optim.optimizer import Optimizer, implementation_flags, required


def _check(name: str, **values) -> None:
    for k, v in values.items():
        if isinstance(v, tuple):
            if not all(0.0 <= b < 1.0 for b in v):
                raise LoomValueError(f"loom.optim.{name}: invalid {k} {v}; each must be in [0, 1)")
        elif v < 0.0:
            raise LoomValueError(f"loom.optim.{name}: invalid {k} {v}; expected a non-negative value")


def _step_count(state: dict) -> loom.Tensor:
    """Advance and return the step counter (a float32 tensor, as PyTorch keeps it)."""
    state["step"].add_(1.0)
    return state["step"].to(dt.float64)



def _decayed(opt, p, g, group, lr=None, decoupled: bool = False):
    """The gradient after the group's weight decay: L2 added to it, or (decoupled) applied to `p` directly."""
    if not opt._static(group, "weight_decay"):
        return g
    wd = opt._dyn(group, "weight_decay")
    if decoupled:
        p.mul_(1.0 - lr * wd)
        return g
    return g + p * wd

@implementation_flags("foreach", "differentiable", "fused")
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

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False) -> None:
        _check("SGD", lr=lr if lr is not required else 0.0, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise LoomError("loom.optim.SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _update(self, p, g, group, state):
        g = _decayed(self, p, g, group)
        if self._static(group, "momentum"):
            mu = self._dyn(group, "momentum")
            buf = state.get("momentum_buffer")
            if buf is None:
                state["momentum_buffer"] = buf = g.detach().clone()
            else:
                buf.mul_(mu).add_(g * (1.0 - self._dyn(group, "dampening")))
            g = g + buf * mu if self._static(group, "nesterov") else buf
        p.sub_(g * self._dyn(group, "lr"))

    _foreach_keys = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize")

    def _update_arrays(self, p, g, group, state):
        # Arrays nothing else sees are updated in place (`foreach.owned`): the same ufuncs, the same bits.
        mine = foreach.owned(p)
        x = mine if mine is not None else foreach.value(p)
        f = x.dtype.type  # Python numbers become constants of the parameter's dtype, as in the graph.
        if group["weight_decay"]:
            d = np.multiply(x, f(group["weight_decay"]))
            g = np.add(g, d, out=d)
        if group["momentum"]:
            mu = f(group["momentum"])
            buf = state.get("momentum_buffer")
            if buf is None:
                b = np.array(g, copy=True)
                state["momentum_buffer"] = foreach.new(b)
            else:
                b = foreach.owned(buf)
                b = np.multiply(foreach.value(buf), mu) if b is None else np.multiply(b, mu, out=b)
                damp = f(1.0 - group["dampening"])
                b += g if damp == 1 else np.multiply(g, damp)  # g * 1 is g, bit for bit.
                foreach.write(buf, b)
            g = np.add(g, np.multiply(b, mu)) if group["nesterov"] else b
        u = np.multiply(g, f(group["lr"]))
        foreach.write(p, np.subtract(x, u, out=x) if mine is not None else foreach.subtract_into(x, u))


@implementation_flags("foreach", "capturable", "differentiable", "fused")
class Adam(Optimizer):
    """Adam (Kingma & Ba), with optional AMSGrad and L2 weight decay."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
                 *, maximize=False, decoupled_weight_decay=False) -> None:
        _check(type(self).__name__, lr=lr, eps=eps, weight_decay=weight_decay, betas=tuple(betas))
        if decoupled_weight_decay:  # PyTorch's Adam(decoupled_weight_decay=True) is AdamW.
            self.decoupled = True
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, decoupled_weight_decay=self.decoupled))

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
        g = _decayed(self, p, g, group, lr, self.decoupled)
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

    _foreach_keys = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")

    def _update_arrays(self, p, g, group, state):
        # Arrays nothing else sees are updated in place (`foreach.owned`), temporaries reuse one scratch
        # array: the same ufuncs in the same order, the same bits, two fresh arrays a parameter instead of nine.
        mine = foreach.owned(p)
        x = mine if mine is not None else foreach.value(p)
        f = x.dtype.type  # Python numbers become constants of the parameter's dtype, as in the graph.
        amsgrad = group["amsgrad"]
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = foreach.new(np.zeros_like(x))
            state["exp_avg_sq"] = foreach.new(np.zeros_like(x))
            if amsgrad:
                state["max_exp_avg_sq"] = foreach.new(np.zeros_like(x))
        step_t = state["step"]
        s = foreach.value(step_t)
        s = np.asarray(np.add(s, s.dtype.type(1.0)))
        foreach.write(step_t, s)
        step = s.astype(np.float64)
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if wd:
            if self.decoupled:
                x = np.multiply(x, f(1.0 - lr * wd), out=mine)
                mine = x
            else:
                d = np.multiply(x, f(wd))
                g = np.add(g, d, out=d)
        scratch = np.multiply(g, f(1.0 - b1))
        m = foreach.owned(state["exp_avg"])
        m = np.multiply(foreach.value(state["exp_avg"]), f(b1), out=m)
        m += scratch
        foreach.write(state["exp_avg"], m)
        v = foreach.owned(state["exp_avg_sq"])
        v = np.multiply(foreach.value(state["exp_avg_sq"]), f(b2), out=v)
        np.multiply(g, g, out=scratch)
        scratch *= f(1.0 - b2)
        v += scratch
        foreach.write(state["exp_avg_sq"], v)
        one = np.float64(1.0)
        bc1 = np.subtract(one, np.power(np.float64(b1), step))
        bc2_sqrt = np.sqrt(np.subtract(one, np.power(np.float64(b2), step)))
        if amsgrad:
            vmax = foreach.owned(state["max_exp_avg_sq"])
            v = np.maximum(foreach.value(state["max_exp_avg_sq"]), v, out=vmax)
            foreach.write(state["max_exp_avg_sq"], v)
        denom = np.sqrt(v, out=scratch)
        denom /= np.asarray(bc2_sqrt).astype(x.dtype)
        denom += f(group["eps"])
        u = np.true_divide(m, denom, out=denom)
        u *= np.asarray(np.true_divide(np.float64(lr), bc1)).astype(x.dtype)
        foreach.write(p, np.subtract(x, u, out=mine) if mine is not None else foreach.subtract_into(x, u))


@implementation_flags("foreach", "capturable", "differentiable", "fused")
class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter); weight_decay defaults to 0.01."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 *, maximize=False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


@implementation_flags("foreach", "capturable", "differentiable")
class RMSprop(Optimizer):
    """RMSprop with optional momentum and centering."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
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
        g = _decayed(self, p, g, group)
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


@implementation_flags("foreach", "differentiable", "fused")
class Adagrad(Optimizer):
    """Adagrad with learning-rate decay and an initial accumulator value."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
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
        g = _decayed(self, p, g, group)
        clr = self._dyn(group, "lr") / ((step - 1.0) * self._dyn(group, "lr_decay") + 1.0)
        s = state["sum"]
        s.add_(g * g)
        p.sub_(g / (s.sqrt() + self._dyn(group, "eps")) * clr)


@implementation_flags("foreach", "capturable", "differentiable")
class Adadelta(Optimizer):
    """Adadelta (Zeiler): steps scaled by running averages of squared gradients and squared updates.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.Adadelta([w], lr=1.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 6)
    0.996838
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, *, maximize=False) -> None:
        _check("Adadelta", lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise LoomError(f"loom.optim.Adadelta: invalid rho {rho}; expected a value in [0, 1]")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["square_avg"] = loom.zeros_like(p)
            state["acc_delta"] = loom.zeros_like(p)
        state["step"].add_(1.0)
        g = _decayed(self, p, g, group)
        rho, eps = self._dyn(group, "rho"), self._dyn(group, "eps")
        sq, acc = state["square_avg"], state["acc_delta"]
        sq.mul_(rho).add_(g * g * (1.0 - rho))
        delta = (acc + eps).sqrt() / (sq + eps).sqrt() * g
        acc.mul_(rho).add_(delta * delta * (1.0 - rho))
        p.sub_(delta * self._dyn(group, "lr"))


@implementation_flags("foreach", "capturable", "differentiable")
class Adamax(Optimizer):
    """Adamax (Kingma & Ba): Adam with the infinity norm in place of the second moment.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.Adamax([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 6)
    0.9
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, *,
                 maximize=False) -> None:
        _check("Adamax", lr=lr, eps=eps, weight_decay=weight_decay, betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_inf"] = loom.zeros_like(p)
        step = _step_count(state)
        g = _decayed(self, p, g, group)
        b1, b2 = self._dyn(group, "betas", 0), self._dyn(group, "betas", 1)
        m, u = state["exp_avg"], state["exp_inf"]
        m.mul_(b1).add_(g * (1.0 - b1))
        u.copy_(loom.maximum(u * b2, g.abs() + self._dyn(group, "eps")))
        p.sub_(m / u * (self._dyn(group, "lr") / (1.0 - b1 ** step)))


@implementation_flags("foreach", "capturable", "differentiable")
class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat), with momentum decay and optional decoupled weight decay.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.NAdam([w], lr=0.1, decoupled_weight_decay=True, weight_decay=0.01)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 5)
    0.89335
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, maximize=False) -> None:
        _check("NAdam", lr=lr, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
               betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["mu_product"] = loom.tensor(1.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_avg_sq"] = loom.zeros_like(p)
        step = _step_count(state)
        b1, b2 = self._dyn(group, "betas", 0), self._dyn(group, "betas", 1)
        lr = self._dyn(group, "lr")
        g = _decayed(self, p, g, group, lr, self._static(group, "decoupled_weight_decay"))
        psi = self._dyn(group, "momentum_decay")
        mu = b1 * (1.0 - 0.5 * 0.96 ** (step * psi))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((step + 1.0) * psi))
        mu_product = state["mu_product"]
        mu_product.mul_(mu.to(mu_product.dtype))  # Kept in float32, as PyTorch keeps it.
        prod = mu_product.to(dt.float64)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g * (1.0 - b1))
        v.mul_(b2).add_(g * g * (1.0 - b2))
        denom = (v / (1.0 - b2 ** step)).sqrt() + self._dyn(group, "eps")
        p.sub_(g / denom * (lr * (1.0 - mu) / (1.0 - prod)))
        p.sub_(m / denom * (lr * mu_next / (1.0 - prod * mu_next)))


@implementation_flags("foreach", "capturable", "differentiable")
class RAdam(Optimizer):
    """Rectified Adam (Liu et al.): plain momentum steps until the variance estimate is trustworthy.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.RAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 6)
    0.8
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, maximize=False) -> None:
        _check("RAdam", lr=lr, eps=eps, weight_decay=weight_decay, betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_avg_sq"] = loom.zeros_like(p)
        step = _step_count(state)
        b1, b2 = self._dyn(group, "betas", 0), self._dyn(group, "betas", 1)
        lr = self._dyn(group, "lr")
        g = _decayed(self, p, g, group, lr, self._static(group, "decoupled_weight_decay"))
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g * (1.0 - b1))
        v.mul_(b2).add_(g * g * (1.0 - b2))
        bc2 = 1.0 - b2 ** step
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * step * b2 ** step / bc2
        # The rectified step where the variance is tractable (rho_t > 5), plain momentum before: chosen by
        # value, so a traced step needs no retrace when it switches.
        rect = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)).clamp(min=0.0)
        scale = loom.where(rho_t > 5.0, rect.sqrt(), loom.zeros_like(rect))
        adaptive = bc2.sqrt() / (v.sqrt() + self._dyn(group, "eps"))
        update = loom.where(rho_t > 5.0, adaptive * scale, loom.ones_like(adaptive))
        p.sub_(m / (1.0 - b1 ** step) * lr * update)


@implementation_flags("foreach", "capturable", "differentiable")
class Rprop(Optimizer):
    """Resilient backpropagation: per-element step sizes grown or shrunk by the gradient's sign.

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.Rprop([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 6)
    0.9
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, maximize=False) -> None:
        _check("Rprop", lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise LoomError(f"loom.optim.Rprop: invalid eta values {tuple(etas)}; expected "
                            "0 < etaminus < 1 < etaplus")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["prev"] = loom.zeros_like(p)
            state["step_size"] = loom.full_like(g, group["lr"])
        state["step"].add_(1.0)
        etaminus, etaplus = self._dyn(group, "etas", 0), self._dyn(group, "etas", 1)
        prev, size = state["prev"], state["step_size"]
        sign = (g * prev).sign()
        # etaplus where the sign held, etaminus where it flipped, 1 where either gradient is zero.
        factor = ((sign > 0).to(g.dtype) * etaplus + (sign < 0).to(g.dtype) * etaminus
                  + (sign == 0).to(g.dtype))
        size.copy_((size * factor).clamp(group["step_sizes"][0], group["step_sizes"][1]))
        # After a sign change the step is skipped and the gradient forgotten.
        g = loom.where(sign < 0, loom.zeros_like(g), g)
        p.sub_(g.sign() * size)
        prev.copy_(g)


@implementation_flags("foreach", "capturable", "differentiable")
class ASGD(Optimizer):
    """Averaged stochastic gradient descent (Polyak & Juditsky); the average is kept in state['ax'].

    Examples
    --------
    >>> w = loom.ones(2, requires_grad=True)
    >>> opt = loom.optim.ASGD([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0], 5)
    0.79999
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, *,
                 maximize=False) -> None:
        _check("ASGD", lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["eta"] = loom.tensor(float(group["lr"]))
            state["mu"] = loom.tensor(1.0)
            state["ax"] = loom.zeros_like(p)
        step = _step_count(state)
        g = _decayed(self, p, g, group)
        lr, lambd = self._dyn(group, "lr"), self._dyn(group, "lambd")
        eta, mu, ax = state["eta"], state["mu"], state["ax"]
        eta64 = eta.to(dt.float64)
        p.mul_(1.0 - lambd * eta64)
        p.sub_(g * eta64)
        ax.copy_(loom.where(mu == 1.0, p, ax + (p - ax) * mu))
        eta.copy_((lr / (1.0 + lambd * lr * step) ** self._dyn(group, "alpha")).to(eta.dtype))
        mu.copy_((1.0 / loom.maximum(step - self._dyn(group, "t0"), loom.ones_like(step))).to(mu.dtype))


_MACHINE_EPS = {"bfloat16": 2.0 ** -7}


def _like(v, x):
    """A hyperparameter (a number, or a float64 scalar tensor when traced) in `x`'s dtype, as lerp wants it."""
    return v.to(x.dtype) if isinstance(v, loom.Tensor) else v


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern) as `torch.optim.Adafactor`: factored second moments, relative step sizes.

    A parameter of two or more dimensions keeps only row and column means of its squared gradient (over
    the last two dimensions); a vector keeps the full second moment. The step is scaled by the parameter's
    RMS (at least ``eps[1]``) times ``min(lr, 1/sqrt(step))``, and an update whose RMS exceeds `d` is
    clipped to it. Weight decay is decoupled. ``eps[0]`` (None: the dtype's machine epsilon) floors the
    variance estimate.

    Examples
    --------
    >>> w = loom.ones(2, 3, requires_grad=True)
    >>> opt = loom.optim.Adafactor([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.tolist()[0][0], 6)
    0.9
    """

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False) -> None:
        _check("Adafactor", lr=lr, weight_decay=weight_decay, epsilon2=eps[1])
        if eps[0] is not None:
            _check("Adafactor", epsilon1=eps[0])
        if beta2_decay > 0.0:
            raise LoomError(f"loom.optim.Adafactor: invalid beta2_decay {beta2_decay}; expected a value <= 0")
        if d < 1.0:
            raise LoomError(f"loom.optim.Adafactor: invalid clipping threshold d {d}; expected d >= 1")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, foreach=foreach, maximize=maximize))

    def _update(self, p, g, group, state):
        factored = g.ndim > 1
        if not state:
            state["step"] = loom.tensor(0.0)
            if factored:
                state["row_var"] = loom.zeros(*g.shape[:-1], 1, dtype=g.dtype)
                state["col_var"] = loom.zeros(*g.shape[:-2], 1, g.shape[-1], dtype=g.dtype)
            else:
                state["variance"] = loom.zeros_like(g)
        step = _step_count(state)
        lr = self._dyn(group, "lr")
        eps1 = group["eps"][0]
        eps1 = _MACHINE_EPS.get(p.dtype.name, float(np.finfo(p.dtype.np).eps)) if eps1 is None else eps1
        weight = step ** group["beta2_decay"]
        rho = loom.minimum(step.rsqrt(), step * 0.0 + lr)  # `lr` is a number, or a scalar tensor when traced.
        rms = (p * p).sum().sqrt().to(dt.float64) / np.sqrt(p.numel())
        alpha = loom.maximum(rms, rms * 0.0 + self._dyn(group, "eps", 1)) * rho
        _decayed(self, p, g, group, lr, decoupled=True)
        if factored:
            row, col = state["row_var"], state["col_var"]
            row.lerp_((g * g).mean(-1, keepdim=True), weight.to(g.dtype))
            col.lerp_((g * g).mean(-2, keepdim=True), weight.to(g.dtype))
            var = (row @ col) / row.mean(-2, keepdim=True).clamp(min=eps1)
        else:
            var = state["variance"]
            var.lerp_(g * g, weight.to(g.dtype))
        update = var.clamp(min=eps1 * eps1).rsqrt() * g
        update_rms = (update * update).sum().sqrt().to(dt.float64) / (np.sqrt(update.numel()) * group["d"])
        p.sub_(update * (alpha / loom.maximum(update_rms, loom.ones_like(update_rms))))


def _newton_schulz(g, coefficients, steps: int, eps: float):
    """The orthogonalised `g` (U V^T of its SVD, roughly) by quintic Newton-Schulz steps, in bfloat16 as PyTorch.

    Products are formed in float32 and rounded once to bfloat16, as bfloat16 matmuls accumulate.
    """
    a, b, c = coefficients

    def bf16(x):
        return x.to(dt.bfloat16).to(dt.float32)

    x = bf16(g.to(dt.float32))
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    norm = bf16((x * x).sum().sqrt())
    x = bf16(x / norm.clamp(min=eps))
    for _ in range(steps):
        gram = bf16(x @ x.T)
        x = bf16(x * a + bf16(gram * b + (gram @ gram) * c) @ x)
    return x.T if tall else x


class Muon(Optimizer):
    """Muon (Jordan et al.) as `torch.optim.Muon`: momentum updates orthogonalised by Newton-Schulz steps.

    For 2-d parameters only (hidden-layer weights; train biases and embeddings with e.g. AdamW). The
    momentum (Nesterov by default) is orthogonalised in bfloat16, the parameter decays by ``lr *
    weight_decay`` and moves by the update times ``lr`` adjusted for its shape (A, B):
    ``sqrt(max(1, A / B))`` ("original", the default) or ``0.2 * sqrt(max(A, B))`` ("match_rms_adamw").

    Examples
    --------
    >>> w = loom.eye(2, requires_grad=True)
    >>> opt = loom.optim.Muon([w], lr=0.1, weight_decay=0.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 2) for v in w.tolist()[0]]
    [0.89, 0.0]
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None) -> None:
        _check("Muon", lr=lr, momentum=momentum, weight_decay=weight_decay)
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise LoomError(f"loom.optim.Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', "
                            f"got {adjust_lr_fn!r}")
        if len(ns_coefficients) != 3:
            raise LoomError(f"loom.optim.Muon: ns_coefficients must be three numbers (a, b, c), "
                            f"got {ns_coefficients!r}")
        if not 0 <= ns_steps < 100:
            raise LoomError(f"loom.optim.Muon: ns_steps must be in [0, 100), got {ns_steps}")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn, maximize=False))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise LoomError(f"loom.optim.Muon: only 2-d parameters are supported, got one of shape "
                                    f"{tuple(p.shape)} (optimise it with e.g. AdamW)")

    def _update(self, p, g, group, state):
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = loom.zeros_like(g)
        mu = self._dyn(group, "momentum")
        buf = state["momentum_buffer"]
        buf.lerp_(g, _like(1.0 - mu, g))
        update = g.lerp(buf, _like(mu, g)) if self._static(group, "nesterov") else buf
        update = _newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        rows, cols = p.shape
        adjust = group["adjust_lr_fn"]
        ratio = (np.sqrt(max(1.0, rows / cols)) if adjust in (None, "original") else 0.2 * np.sqrt(max(rows, cols)))
        lr = self._dyn(group, "lr")
        _decayed(self, p, g, group, lr, decoupled=True)
        p.sub_(update * (lr * float(ratio)))


class SparseAdam(Optimizer):
    """Adam for sparse gradients (e.g. embeddings), as `torch.optim.SparseAdam`: only the rows a step touches move.

    loom's gradients are dense, so the entries a sparse gradient would hold are found from the values: a
    row (a slice along the first dimension) is touched when any of its gradient entries is non-zero (an
    element, for a 1-d parameter). Touched rows update their moments and take the bias-corrected Adam
    step; the others, moments included, stay as they are, as in PyTorch's sparse update.

    Examples
    --------
    >>> emb = loom.nn.Embedding(4, 2)
    >>> opt = loom.optim.SparseAdam(emb.parameters(), lr=0.1)
    >>> before = emb.weight.detach().clone()
    >>> emb(loom.tensor([1])).sum().backward(); opt.step()
    >>> [bool(v) for v in (emb.weight != before).any(1).tolist()]
    [False, True, False, False]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False) -> None:
        if not lr > 0.0:
            raise LoomError(f"loom.optim.SparseAdam: invalid learning rate {lr}; expected a positive value")
        if not eps > 0.0:
            raise LoomError(f"loom.optim.SparseAdam: invalid epsilon {eps}; expected a positive value")
        _check("SparseAdam", betas=tuple(betas))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))

    def _update(self, p, g, group, state):
        if not state:
            state["step"] = loom.tensor(0.0)
            state["exp_avg"] = loom.zeros_like(p)
            state["exp_avg_sq"] = loom.zeros_like(p)
        step = _step_count(state)
        nonzero = g != 0
        touched = nonzero.any(tuple(range(1, g.ndim)), keepdim=True) if g.ndim > 1 else nonzero
        touched = touched.to(g.dtype)
        b1, b2 = self._dyn(group, "betas", 0), self._dyn(group, "betas", 1)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        # PyTorch's arithmetic: old + (new - old) * (1 - beta) on the touched entries.
        m_step = (g - m) * (1.0 - b1) * touched
        v_step = (g * g - v) * (1.0 - b2) * touched
        numer, denom = m + m_step, (v + v_step).sqrt() + self._dyn(group, "eps")
        m.add_(m_step)
        v.add_(v_step)
        step_size = self._dyn(group, "lr") * (1.0 - b2 ** step).sqrt() / (1.0 - b1 ** step)
        p.sub_(numer / denom * touched * step_size)


# ----------------------------------------------------------------------------- L-BFGS


def _cubic_min(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clipped to `bounds`."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = np.sqrt(d2_square)
    if x1 <= x2:
        pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(pos, lo), hi)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A line search for a step `t` along `d` meeting the strong Wolfe conditions (as PyTorch's LBFGS).

    Slopes stay NumPy scalars of the parameters' dtype, so the tests compare in that precision as PyTorch's do.

    `evaluate(t)` returns the loss and flat gradient at x + t * d. Returns (loss, grad, t, evaluations).
    """
    d_norm = float(np.abs(d).max())
    f_new, g_new = evaluate(t)
    evals = 1
    gtd_new = np.dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list = []
    bracket_f: list = []
    bracket_g: list = []
    bracket_gtd: list = []
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g, done = [t], [f_new], [g_new], True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        # Extrapolate.
        tmp = t
        t = _cubic_min(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = np.dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
    # Zoom into the bracket.
    insufficient = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_min(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            # Too close to an end: move away from it, or note the lack of progress.
            if insufficient or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = np.dot(g_new, d)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals


class LBFGS(Optimizer):
    """L-BFGS (limited-memory BFGS), with PyTorch's options; `step` needs a closure returning the loss.

    Each `step(closure)` runs up to `max_iter` iterations (and `max_eval` loss evaluations).
    The search direction comes from the last `history_size` curvature pairs; the step length is
    `lr`, or found by a strong-Wolfe line search with ``line_search_fn="strong_wolfe"``. Its
    control flow depends on the values it computes, so it runs eagerly (not under `loom.function`).
    The vector algebra runs on NumPy arrays in the parameters' dtype; only one parameter group
    is supported, as in PyTorch.

    Examples
    --------
    >>> w = loom.tensor([3.0, -1.0], requires_grad=True)
    >>> opt = loom.optim.LBFGS([w], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((w - 1.0) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> _ = opt.step(closure)
    >>> [round(v, 4) for v in w.tolist()]
    [1.0, 1.0]
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None) -> None:
        _check("LBFGS", lr=lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise LoomError(f"loom.optim.LBFGS: line_search_fn must be None or 'strong_wolfe', "
                            f"got {line_search_fn!r}")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise LoomError("loom.optim.LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def add_param_group(self, group) -> None:
        if self.param_groups:
            raise LoomError("loom.optim.LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(group)

    def _flat_grad(self) -> np.ndarray:
        # A complex parameter counts as its (real, imag) pairs, as PyTorch's LBFGS views it.
        parts = [_real_pairs(np.zeros(p.shape, p.dtype.np) if p.grad is None else p.grad.numpy(force=True))
                 for p in self._params]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def _values(self) -> list[np.ndarray]:
        return [np.array(p.numpy(force=True), copy=True) for p in self._params]

    def _set(self, values: list[np.ndarray]) -> None:
        with loom.no_grad():
            for p, v in zip(self._params, values):
                p.copy_(loom.from_numpy(v))

    def _add(self, t: float, direction: np.ndarray, base: list[np.ndarray] | None = None) -> None:
        """params = (base or params) + t * direction, in the parameters' dtype as PyTorch's add_ computes it."""
        base = base if base is not None else self._values()
        out, offset = [], 0
        for v in base:
            r = _real_pairs(v)
            n = r.size
            step = direction[offset:offset + n]
            new = (r + r.dtype.type(t) * step).astype(r.dtype, copy=False)
            out.append(new.view(v.dtype).reshape(v.shape) if v.dtype.kind == "c" else new.reshape(v.shape))
            offset += n
        self._set(out)

    def step(self, closure=None):
        if closure is None:
            raise LoomError("loom.optim.LBFGS.step needs a closure that re-evaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]

        def evaluate():
            with loom.enable_grad():
                loss = closure()
            return loss, float(loss), self._flat_grad()

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss, loss, flat_grad = evaluate()
        evals = 1
        state["func_evals"] += 1
        if np.abs(flat_grad).max(initial=0.0) <= tol_grad:
            return orig_loss

        as_np = _as_numpy
        d, t = as_np(state.get("d")), state.get("t")
        old_dirs = [as_np(v) for v in state.get("old_dirs", [])]
        old_stps = [as_np(v) for v in state.get("old_stps", [])]
        ro = [as_np(v) for v in state.get("ro", [])]
        h_diag = as_np(state.get("H_diag"))
        prev_flat_grad, prev_loss = as_np(state.get("prev_flat_grad")), state.get("prev_loss")
        t = float(t) if t is not None else None
        one = flat_grad.dtype.type(1)

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro, h_diag = [], [], [], one
            else:
                y = flat_grad - prev_flat_grad
                s = d * d.dtype.type(t)
                ys = np.dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(one / ys)
                    h_diag = ys / np.dot(y, y)
                # Two-loop recursion: d = -H g.
                al = [None] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = np.dot(old_stps[i], q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = np.dot(old_dirs[i], r) * ro[i]
                    r = r + (al[i] - be_i) * old_stps[i]
                d = r
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, float(one / np.abs(flat_grad).sum())) * lr
            else:
                t = lr
            gtd = np.dot(flat_grad, d)
            if gtd > -tol_change:
                break
            ls_evals = 0
            if group["line_search_fn"] == "strong_wolfe":
                x0 = self._values()

                def along(step, x0=x0, d=d):
                    self._add(step, d, x0)
                    _, value, grad = evaluate()
                    self._set(x0)
                    return value, grad
                loss, flat_grad, t, ls_evals = _strong_wolfe(along, t, d, loss, flat_grad, gtd,
                                                             tolerance_change=tol_change,
                                                             max_ls=max_eval - evals)
                self._add(t, d)
                opt_cond = np.abs(flat_grad).max() <= tol_grad
            else:
                self._add(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    _, loss, flat_grad = evaluate()
                    opt_cond = np.abs(flat_grad).max() <= tol_grad
                    ls_evals = 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if (n_iter == max_iter or evals >= max_eval or opt_cond
                    or np.abs(d * d.dtype.type(t)).max() <= tol_change or abs(loss - prev_loss) < tol_change):
                break

        state["d"] = _as_tensor(d)
        state["t"] = t
        state["old_dirs"] = [_as_tensor(v) for v in old_dirs]
        state["old_stps"] = [_as_tensor(v) for v in old_stps]
        state["ro"] = [_as_tensor(v) for v in ro]
        state["H_diag"] = _as_tensor(h_diag)
        state["prev_flat_grad"] = _as_tensor(prev_flat_grad)
        state["prev_loss"] = prev_loss
        return orig_loss


def _real_pairs(a: np.ndarray) -> np.ndarray:
    """`a` flat, a complex array as its interleaved (real, imag) parts."""
    a = np.ascontiguousarray(a).reshape(-1)
    return a.view(a.real.dtype) if a.dtype.kind == "c" else a


def _as_numpy(v):
    """State values as NumPy (tensors after a load_state_dict or a previous step), None kept."""
    if v is None or isinstance(v, np.ndarray):
        return v
    if isinstance(v, loom.Tensor):
        arr = v.numpy(force=True)
        return arr[()] if arr.ndim == 0 else arr
    return np.float32(v)


def _as_tensor(v):
    return None if v is None else loom.tensor(np.asarray(v))
