"""`tf.keras.mixed_precision`: dtype policies (float32, mixed_float16, mixed_bfloat16) and loss scaling.

Under a mixed policy a layer keeps float32 variables and returns its output
in the policy's compute dtype (float16), as Keras's. loom computes the layer
itself in float32 and rounds the output (its kernels take one dtype; Keras
casts the variables down instead), so values are at least as accurate as
Keras's float16 arithmetic and differ from them in the last float16 bits. `compile` wraps the optimizer in a
`LossScaleOptimizer` when the global policy is mixed_float16, as Keras does.
"""
from __future__ import annotations

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tf._core import Variable
from loom.tf.keras import optimizers as _optimizers

_POLICIES = {"float32": ("float32", "float32"), "float64": ("float64", "float64"), "float16": ("float16", "float16"),
             "bfloat16": ("bfloat16", "bfloat16"), "mixed_float16": ("float16", "float32"),
             "mixed_bfloat16": ("bfloat16", "float32")}


class DTypePolicy:
    """A layer's compute and variable dtypes, by name ('mixed_float16': float16 compute, float32 variables)."""

    def __init__(self, name="float32") -> None:
        name = getattr(name, "name", name)
        if name not in _POLICIES:
            raise LoomValueError(f"loom.tf.keras.mixed_precision.DTypePolicy: unknown policy {name!r}; known: "
                                 f"{sorted(_POLICIES)}")
        self.name = name
        self.compute_dtype, self.variable_dtype = _POLICIES[name]

    def __repr__(self) -> str:
        return f'<DTypePolicy "{self.name}">'

    def __eq__(self, other) -> bool:
        return isinstance(other, DTypePolicy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def get_config(self) -> dict:
        return {"name": self.name}


Policy = DTypePolicy
_global = [DTypePolicy("float32")]


def set_global_policy(policy) -> None:
    """Make `policy` (a name or DTypePolicy) the default of layers created from now on."""
    _global[0] = policy if isinstance(policy, DTypePolicy) else DTypePolicy("float32" if policy is None else policy)


def global_policy() -> DTypePolicy:
    """The policy new layers get."""
    return _global[0]


def policy_of(dtype) -> DTypePolicy:
    """A layer's policy from its `dtype` argument: a policy, a policy name, a dtype, or None (the global one)."""
    if dtype is None:
        return _global[0]
    if isinstance(dtype, DTypePolicy):
        return dtype
    name = getattr(dtype, "name", dtype)
    return DTypePolicy(name) if isinstance(name, str) and name in _POLICIES else DTypePolicy("float32")


class LossScaleOptimizer(_optimizers.Optimizer):
    """Scale the loss up (so float16 gradients do not underflow) and the gradients back down; skip a step
    whose gradients are not finite and halve the scale, double it after `dynamic_growth_steps` good steps."""

    def __init__(self, inner_optimizer, initial_scale=2.0 ** 15, dynamic_growth_steps=2000, **kwargs) -> None:
        self.inner_optimizer = _optimizers.get(inner_optimizer)
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        self.dynamic = True
        self._scale = Variable(float(initial_scale), trainable=False, name="loss_scale")
        self._good_steps = 0
        self.name = "loss_scale_optimizer"

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "inner_optimizer":
            raise AttributeError(name)
        return getattr(self.inner_optimizer, name)

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def loss_scale(self):
        return self._scale

    def scale_loss(self, loss):
        """`loss` times the current scale (differentiate this one)."""
        return loss * self._scale.to(loss.dtype)

    get_scaled_loss = scale_loss

    def get_unscaled_gradients(self, grads) -> list:
        """`grads` divided by the current scale."""
        return [None if g is None else g / self._scale.to(g.dtype) for g in grads]

    def apply_gradients(self, grads_and_vars, **kwargs):
        pairs = list(grads_and_vars)
        grads = self.get_unscaled_gradients([g for g, _ in pairs])
        if not loom.tracing():
            finite = all(bool(np.isfinite(g.numpy()).all()) for g in grads if g is not None)
            if not finite:
                self._scale.assign(self._scale / 2.0)
                self._good_steps = 0
                return self.iterations
            self._good_steps += 1
            if self._good_steps >= self.dynamic_growth_steps:
                self._scale.assign(self._scale * 2.0)
                self._good_steps = 0
        return self.inner_optimizer.apply_gradients(zip(grads, [v for _, v in pairs]))

    @property
    def variables(self) -> list:
        return self.inner_optimizer.variables + [self._scale]

    def get_config(self) -> dict:
        return {"inner_optimizer": self.inner_optimizer.get_config(), "initial_scale": float(self._scale.numpy()),
                "dynamic_growth_steps": self.dynamic_growth_steps}
