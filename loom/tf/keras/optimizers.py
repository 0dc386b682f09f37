"""`keras.optimizers`: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, Nadam with Keras 3's update rules and defaults.

The step counter is a variable and the learning rate is read afresh on every
call (`loom.dynamic_scalar`), so an update traced inside `tf.function` keeps
counting steps and sees learning-rate changes when it is replayed.
"""
from __future__ import annotations

import math

import loom
from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.tf._core import Variable as _Variable, clip_by_global_norm as _clip_by_global_norm
from loom.tf._core import clip_by_norm as _clip_by_norm, clip_by_value as _clip_by_value


class LearningRateSchedule:
    """A learning rate as a function of the step: `schedule(step)`."""

    def __call__(self, step):
        raise NotImplementedError


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ** (step / decay_steps) (floored if `staircase`)."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name=None) -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.decay_rate, self.staircase = decay_rate, staircase

    def _progress(self, step):
        """step / decay_steps, floored if `staircase` (shared with `InverseTimeDecay`)."""
        p = step / self.decay_steps
        return math.floor(p) if self.staircase else p

    def __call__(self, step):
        return self.initial_learning_rate * self.decay_rate ** self._progress(step)


class PiecewiseConstantDecay(LearningRateSchedule):
    """values[i] while step <= boundaries[i] (and values[-1] after the last boundary)."""

    def __init__(self, boundaries, values, name=None) -> None:
        if len(values) != len(boundaries) + 1:
            raise LoomValueError(f"loom.tf.keras.optimizers.schedules.PiecewiseConstantDecay: expected "
                                 f"{len(boundaries) + 1} values for {len(boundaries)} boundaries, got {len(values)}")
        self.boundaries, self.values = list(boundaries), list(values)

    def __call__(self, step):
        for b, v in zip(self.boundaries, self.values):
            if step <= b:
                return v
        return self.values[-1]


class InverseTimeDecay(LearningRateSchedule):
    """initial_learning_rate / (1 + decay_rate * step / decay_steps) (floored if `staircase`)."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name=None) -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.decay_rate, self.staircase = decay_rate, staircase

    _progress = ExponentialDecay._progress

    def __call__(self, step):
        return self.initial_learning_rate / (1 + self.decay_rate * self._progress(step))


class PolynomialDecay(LearningRateSchedule):
    """From initial_learning_rate to end_learning_rate over decay_steps as (1 - step / decay_steps) ** power
    (with `cycle`, decay_steps grows to the next multiple past step)."""

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                 name=None) -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.end_learning_rate, self.power, self.cycle = end_learning_rate, power, cycle

    def __call__(self, step):
        steps = self.decay_steps
        if self.cycle:
            steps = steps * max(1.0, math.ceil(step / steps))
        else:
            step = min(step, steps)
        frac = (1 - step / steps) ** self.power
        return (self.initial_learning_rate - self.end_learning_rate) * frac + self.end_learning_rate


class CosineDecay(LearningRateSchedule):
    """Optional linear warmup to warmup_target over warmup_steps, then cosine decay over decay_steps down to
    alpha times the peak."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name=None, warmup_target=None,
                 warmup_steps=0) -> None:
        self.initial_learning_rate, self.decay_steps, self.alpha = initial_learning_rate, decay_steps, alpha
        self.warmup_target, self.warmup_steps = warmup_target, warmup_steps

    def __call__(self, step):
        peak = self.initial_learning_rate if self.warmup_target is None else self.warmup_target
        if self.warmup_target is not None and step < self.warmup_steps:
            return self.initial_learning_rate + (peak - self.initial_learning_rate) * step / self.warmup_steps
        t = min(step - self.warmup_steps, self.decay_steps) / self.decay_steps
        cosine = 0.5 * (1 + math.cos(math.pi * t))
        return peak * ((1 - self.alpha) * cosine + self.alpha)


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts: periods of first_decay_steps growing by t_mul, peaks shrinking by m_mul."""

    def __init__(self, initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0, name=None) -> None:
        self.initial_learning_rate, self.first_decay_steps = initial_learning_rate, first_decay_steps
        self.t_mul, self.m_mul, self.alpha = t_mul, m_mul, alpha

    def __call__(self, step):
        frac = step / self.first_decay_steps
        if self.t_mul == 1.0:
            i = math.floor(frac)
            frac = frac - i
        else:
            i = math.floor(math.log(1 - frac * (1 - self.t_mul)) / math.log(self.t_mul))
            frac = (1 - self.t_mul ** i) / (1 - self.t_mul)
            frac = (step / self.first_decay_steps - frac) / self.t_mul ** i
        m = self.m_mul ** i
        cosine = 0.5 * m * (1 + math.cos(math.pi * frac))
        return self.initial_learning_rate * ((1 - self.alpha) * cosine + self.alpha)


class schedules:  # noqa: N801  (TensorFlow's namespace spelling)
    """`keras.optimizers.schedules`."""

    LearningRateSchedule = LearningRateSchedule
    ExponentialDecay = ExponentialDecay
    PiecewiseConstantDecay = PiecewiseConstantDecay
    InverseTimeDecay = InverseTimeDecay
    PolynomialDecay = PolynomialDecay
    CosineDecay = CosineDecay
    CosineDecayRestarts = CosineDecayRestarts


class Optimizer:
    """Base of Keras optimizers: `apply_gradients(zip(grads, vars))`, `apply`, `minimize`."""

    def __init__(self, learning_rate=0.001, weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 name=None, **kwargs) -> None:
        self._lr = learning_rate
        self.weight_decay = weight_decay
        self.clipnorm, self.clipvalue, self.global_clipnorm = clipnorm, clipvalue, global_clipnorm
        self.name = name or type(self).__name__.lower()
        self.iterations = _Variable(0, trainable=False, name="iteration", dtype=loom.int64)
        self._slots: dict[int, dict] = {}
        self._steps_done = 0

    @property
    def learning_rate(self) -> float:
        if isinstance(self._lr, LearningRateSchedule):
            return float(self._lr(self._steps_done))
        return float(self._lr)

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self._lr = value

    lr = learning_rate

    def _lr_tensor(self):
        lr = loom.dynamic_scalar(lambda: self.learning_rate, loom.float32)
        return lr if isinstance(lr, loom.Tensor) else loom.tensor(lr, dtype=loom.float32)

    def _slot(self, var, name: str, init: float = 0.0):
        slots = self._slots.setdefault(id(var), {})
        if name not in slots:
            slots[name] = _Variable(loom.full(tuple(var.shape), float(init), dtype=var.dtype), trainable=False,
                                   name=f"{self.name}/{name}")
        return slots[name]

    def get_config(self) -> dict:
        """The optimizer's settings (name, learning rate, hyperparameters), as Keras's `get_config`."""
        skip = {"iterations"}
        cfg = {"name": self.name, "learning_rate": self._lr if isinstance(self._lr, LearningRateSchedule)
               else float(self._lr)}
        for k, v in vars(self).items():
            if not k.startswith("_") and k not in skip and k not in cfg and (v is None or isinstance(
                    v, (bool, int, float, str))):
                cfg[k] = v
        return cfg

    @classmethod
    def from_config(cls, config: dict):
        """A new optimizer with the settings `get_config` returned."""
        return cls(**config)

    def build(self, var_list) -> None:
        """Create the optimizer's per-variable state (done on the first update otherwise)."""

    @property
    def variables(self) -> list:
        return [self.iterations] + [v for s in self._slots.values() for v in s.values()]

    def apply_gradients(self, grads_and_vars, **kwargs):
        """Update each variable from its gradient (pairs with a None gradient are skipped)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            return self.iterations
        grads = [g for g, _ in pairs]
        if self.global_clipnorm is not None:
            grads, _ = _clip_by_global_norm(grads, self.global_clipnorm)
        if self.clipnorm is not None:
            grads = [_clip_by_norm(g, self.clipnorm) for g in grads]
        if self.clipvalue is not None:
            grads = [_clip_by_value(g, -self.clipvalue, self.clipvalue) for g in grads]
        with no_grad():
            lr = self._lr_tensor()
            step = (self.iterations + 1).to(loom.float32)
            self._begin_step(step)
            for g, (_, v) in zip(grads, pairs):
                g = g.detach()
                if self.weight_decay:
                    v.assign(v - v * (self.weight_decay * lr).to(v.dtype))
                self.update_step(g.to(v.dtype), v, lr.to(v.dtype), step)
                constraint = v.__dict__.get("constraint")
                if constraint is not None:  # Keras projects a constrained variable after its update.
                    v.assign(constraint(v))
            self.iterations.assign_add(1)
        self._steps_done += 1
        return self.iterations

    def scale_loss(self, loss):
        """The loss to differentiate: unchanged here, scaled up by a LossScaleOptimizer."""
        return loss

    def apply(self, grads, trainable_variables=None):
        """`apply_gradients(zip(grads, trainable_variables))`."""
        return self.apply_gradients(zip(grads, trainable_variables))

    def minimize(self, loss, var_list, tape=None):
        """Compute the gradient of `loss` (a tensor with `tape`, or a callable) and apply it."""
        from loom.tf.tape import GradientTape
        if tape is None:
            with GradientTape() as tape:
                value = loss() if callable(loss) else loss
        else:
            value = loss
        vars_ = list(var_list() if callable(var_list) else var_list)
        grads = tape.gradient(value, vars_)
        return self.apply_gradients(zip(grads, vars_))

    def _begin_step(self, step) -> None:
        """State shared by all variables, updated once per `apply_gradients` before the variables are."""

    def update_step(self, gradient, variable, lr, step) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """Gradient descent, with optional (Nesterov) momentum: m = momentum * m - lr * g; var += m."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        if not 0 <= momentum <= 1:
            raise LoomValueError(f"loom.tf.keras.optimizers.SGD: momentum must be in [0, 1], got {momentum}")
        self.momentum, self.nesterov = float(momentum), nesterov

    def update_step(self, g, v, lr, step) -> None:
        if self.momentum:
            m = self._slot(v, "momentum")
            m.assign(m * self.momentum - g * lr)
            v.assign(v + (m * self.momentum - g * lr if self.nesterov else m))
        else:
            v.assign(v - g * lr)


class Adam(Optimizer):
    """Adam with Keras's epsilon (1e-7) added to sqrt(v) and the bias correction folded into the step size."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon, self.amsgrad = beta_1, beta_2, epsilon, amsgrad

    def update_step(self, g, v, lr, step) -> None:
        m, s = self._slot(v, "m"), self._slot(v, "v")
        b1p = loom.pow(loom.tensor(self.beta_1, dtype=v.dtype), step.to(v.dtype))
        b2p = loom.pow(loom.tensor(self.beta_2, dtype=v.dtype), step.to(v.dtype))
        alpha = lr * loom.sqrt(1 - b2p) / (1 - b1p)
        m.assign(m + (g - m) * (1 - self.beta_1))
        s.assign(s + (g * g - s) * (1 - self.beta_2))
        denom_v = s
        if self.amsgrad:
            vh = self._slot(v, "vhat")
            vh.assign(loom.maximum(vh, s))
            denom_v = vh
        v.assign(v - m * alpha / (loom.sqrt(denom_v) + self.epsilon))


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.004): var -= var * weight_decay * lr before each step."""

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, **kwargs) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay=weight_decay, **kwargs)


class RMSprop(Optimizer):
    """RMSprop as Keras: v = rho * v + (1 - rho) * g^2; var -= lr * g / sqrt(v + epsilon)."""

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho, self.momentum, self.epsilon, self.centered = rho, momentum, epsilon, centered

    def update_step(self, g, v, lr, step) -> None:
        vel = self._slot(v, "velocity")
        vel.assign(vel * self.rho + g * g * (1 - self.rho))
        if self.centered:
            avg = self._slot(v, "average_gradient")
            avg.assign(avg * self.rho + g * (1 - self.rho))
            denom = vel - avg * avg + self.epsilon
        else:
            denom = vel + self.epsilon
        inc = lr * g / loom.sqrt(denom)
        if self.momentum > 0:
            mom = self._slot(v, "momentum")
            mom.assign(mom * self.momentum + inc)
            v.assign(v - mom)
        else:
            v.assign(v - inc)


class Adagrad(Optimizer):
    """Adagrad: acc += g^2; var -= lr * g / sqrt(acc + epsilon); accumulators start at 0.1."""

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        self.initial_accumulator_value, self.epsilon = initial_accumulator_value, epsilon

    def update_step(self, g, v, lr, step) -> None:
        acc = self._slot(v, "accumulator", self.initial_accumulator_value)
        acc.assign(acc + g * g)
        v.assign(v - lr * g / loom.sqrt(acc + self.epsilon))


class Adamax(Optimizer):
    """Adam over the infinity norm: u = max(beta_2 * u, |g|); var -= lr * m / ((1 - beta_1^t) * (u + epsilon))."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

    def update_step(self, g, v, lr, step) -> None:
        m, u = self._slot(v, "m"), self._slot(v, "u")
        b1p = loom.pow(loom.tensor(self.beta_1, dtype=v.dtype), step.to(v.dtype))
        m.assign(m + (g - m) * (1 - self.beta_1))
        u.assign(loom.maximum(u * self.beta_2, loom.abs(g)))
        v.assign(v - lr * m / ((1 - b1p) * (u + self.epsilon)))


class Nadam(Optimizer):
    """Adam with Nesterov momentum and Keras's momentum schedule (u_t = beta_1 * (1 - 0.5 * 0.96^t))."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, **kwargs) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self._u_product = _Variable(1.0, trainable=False, name="u_product", dtype=loom.float32)

    def _begin_step(self, step) -> None:
        self._u_product.assign(self._u_product * self.beta_1 * (1.0 - 0.5 * loom.pow(loom.tensor(0.96), step)))

    def update_step(self, g, v, lr, step) -> None:
        m, s = self._slot(v, "m"), self._slot(v, "v")
        t = step.to(v.dtype)
        decay = loom.tensor(0.96, dtype=v.dtype)
        u_t = self.beta_1 * (1.0 - 0.5 * loom.pow(decay, t))
        u_t_1 = self.beta_1 * (1.0 - 0.5 * loom.pow(decay, t + 1))
        u_prod = self._u_product.to(v.dtype)
        u_prod_1 = u_prod * u_t_1
        b2p = loom.pow(loom.tensor(self.beta_2, dtype=v.dtype), t)
        m.assign(m + (g - m) * (1 - self.beta_1))
        s.assign(s + (g * g - s) * (1 - self.beta_2))
        m_hat = u_t_1 * m / (1 - u_prod_1) + (1 - u_t) * g / (1 - u_prod)
        v_hat = s / (1 - b2p)
        v.assign(v - m_hat * lr / (loom.sqrt(v_hat) + self.epsilon))

    @property
    def variables(self) -> list:
        return super().variables + [self._u_product]


_NAMES = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad, "adamax": Adamax,
          "nadam": Nadam}


def get(identifier) -> Optimizer:
    """An optimizer from a name ('adam') or an instance."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _NAMES:
        return _NAMES[identifier.lower()]()
    if isinstance(identifier, type) and issubclass(identifier, Optimizer):
        return identifier()
    raise LoomValueError(f"loom.tf.keras.optimizers.get: unknown optimizer {identifier!r}; known: {sorted(_NAMES)}")


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.optimizers", "tf.keras.optimizers")
