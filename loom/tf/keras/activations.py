"""`keras.activations`: activation functions by name."""
from __future__ import annotations

import loom
import loom.nn.functional as F
from loom.errors import LoomValueError


def linear(x):
    """x unchanged."""
    return x


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """max(x, 0) (with optional leak and cap)."""
    y = F.relu(x) if negative_slope == 0 else F.leaky_relu(x, negative_slope)
    return y if max_value is None else loom.clamp(y, max=float(max_value))


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return loom.sigmoid(x)


def tanh(x):
    """Hyperbolic tangent."""
    return loom.tanh(x)


def softmax(x, axis=-1):
    """Softmax along `axis`."""
    return F.softmax(x, dim=axis)


def log_softmax(x, axis=-1):
    """log(softmax(x)) along `axis`."""
    return F.log_softmax(x, dim=axis)


def gelu(x, approximate=False):
    """Gaussian error linear unit."""
    return F.gelu(x, approximate="tanh" if approximate else "none")


def elu(x, alpha=1.0):
    """x if x > 0 else alpha * (exp(x) - 1)."""
    return F.elu(x, alpha)


def selu(x):
    """Scaled ELU."""
    return F.selu(x)


def softplus(x):
    """log(1 + exp(x))."""
    return F.softplus(x)


def softsign(x):
    """x / (1 + |x|)."""
    return F.softsign(x)


def silu(x):
    """x * sigmoid(x)."""
    return F.silu(x)


swish = silu


def mish(x):
    """x * tanh(softplus(x))."""
    return x * loom.tanh(F.softplus(x))


def hard_silu(x):
    """x * hard_sigmoid(x) (Keras 3's hard swish)."""
    return x * hard_sigmoid(x)


def leaky_relu(x, negative_slope=0.2):
    """x if x > 0 else negative_slope * x."""
    return F.leaky_relu(x, negative_slope)


def relu6(x):
    """min(max(x, 0), 6)."""
    return F.relu6(x)


def exponential(x):
    """exp(x)."""
    return loom.exp(x)


def hard_sigmoid(x):
    """Piecewise-linear sigmoid: relu6(x + 3) / 6."""
    return F.relu6(x + 3.0) / 6.0


_NAMES = {f.__name__: f for f in (linear, relu, sigmoid, tanh, softmax, log_softmax, gelu, elu, selu, softplus,
                                   softsign, silu, leaky_relu, relu6, exponential, hard_sigmoid)}
_NAMES["swish"] = silu
_NAMES["mish"] = mish
_NAMES["hard_silu"] = _NAMES["hard_swish"] = hard_silu


def get(identifier):
    """An activation from a name, a callable or None (linear)."""
    if identifier is None:
        return linear
    if isinstance(identifier, str):
        if identifier not in _NAMES:
            raise LoomValueError(f"loom.tf.keras.activations.get: unknown activation {identifier!r}; known: "
                                 f"{sorted(_NAMES)}")
        return _NAMES[identifier]
    if callable(identifier):
        return identifier
    raise LoomValueError(f"loom.tf.keras.activations.get: cannot use {identifier!r} as an activation")


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.activations", "tf.keras.activations")
