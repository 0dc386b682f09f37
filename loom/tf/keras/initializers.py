"""`keras.initializers`: Glorot, He, LeCun, random, orthogonal and constant initial values."""
from __future__ import annotations

import math

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tf._core import as_dtype as _as_dtype, float32 as _float32
from loom.tf import random as _random


def _fans(shape) -> tuple[int, int]:
    """Keras's fans: a kernel [*receptive, in, out] has fan_in = receptive * in, fan_out = receptive * out."""
    shape = list(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    """Base of initializers: `init(shape, dtype)` gives a tensor."""

    def __call__(self, shape, dtype=None):
        raise NotImplementedError

    def get_config(self) -> dict:
        return {}


class Zeros(Initializer):
    """All zeros."""

    def __call__(self, shape, dtype=None):
        return loom.zeros(*shape, dtype=_as_dtype(dtype or _float32))


class Ones(Initializer):
    """All ones."""

    def __call__(self, shape, dtype=None):
        return loom.ones(*shape, dtype=_as_dtype(dtype or _float32))


class Constant(Initializer):
    """All `value`."""

    def __init__(self, value=0.0) -> None:
        self.value = value

    def __call__(self, shape, dtype=None):
        return loom.full(tuple(shape), float(self.value), dtype=_as_dtype(dtype or _float32))


class RandomNormal(Initializer):
    """Normal values with `mean` and `stddev` (0.05 by default)."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return _random.normal(shape, self.mean, self.stddev, _as_dtype(dtype or _float32), seed=self.seed)


class RandomUniform(Initializer):
    """Uniform values in [minval, maxval) (-0.05 to 0.05 by default)."""

    def __init__(self, minval=-0.05, maxval=0.05, seed=None) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None):
        return _random.uniform(shape, self.minval, self.maxval, _as_dtype(dtype or _float32), seed=self.seed)


class TruncatedNormal(Initializer):
    """Normal values within two standard deviations."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return _random.truncated_normal(shape, self.mean, self.stddev, _as_dtype(dtype or _float32), seed=self.seed)


class VarianceScaling(Initializer):
    """Values with variance scale / fan (fan_in, fan_out or their mean), normal or uniform."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None) -> None:
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape, dtype=None):
        fan_in, fan_out = _fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        var = self.scale / max(1.0, fan)
        d = _as_dtype(dtype or _float32)
        if self.distribution == "uniform":
            lim = math.sqrt(3.0 * var)
            return _random.uniform(shape, -lim, lim, d, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return _random.normal(shape, 0.0, math.sqrt(var), d, seed=self.seed)
        # Keras divides by the std of a normal truncated at two deviations.
        return _random.truncated_normal(shape, 0.0, math.sqrt(var) / 0.87962566103423978, d, seed=self.seed)


class GlorotUniform(VarianceScaling):
    """Uniform in ±sqrt(6 / (fan_in + fan_out)) (Keras's default kernel initializer)."""

    def __init__(self, seed=None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    """Truncated normal with variance 2 / (fan_in + fan_out)."""

    def __init__(self, seed=None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeNormal(VarianceScaling):
    """Truncated normal with variance 2 / fan_in."""

    def __init__(self, seed=None) -> None:
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    """Uniform in ±sqrt(6 / fan_in)."""

    def __init__(self, seed=None) -> None:
        super().__init__(2.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    """Truncated normal with variance 1 / fan_in."""

    def __init__(self, seed=None) -> None:
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    """Uniform in ±sqrt(3 / fan_in)."""

    def __init__(self, seed=None) -> None:
        super().__init__(1.0, "fan_in", "uniform", seed)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times `gain` (Keras's recurrent-kernel default)."""

    def __init__(self, gain=1.0, seed=None) -> None:
        self.gain, self.seed = gain, seed

    def __call__(self, shape, dtype=None):
        rows = math.prod(shape[:-1])
        cols = shape[-1]
        a = _random.normal((max(rows, cols), min(rows, cols)), seed=self.seed).numpy().astype(np.float64)
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return loom.tensor((self.gain * q[:rows, :cols]).reshape(shape).astype(_as_dtype(dtype or _float32).np))


class Identity(Initializer):
    """The identity matrix times `gain`."""

    def __init__(self, gain=1.0) -> None:
        self.gain = gain

    def __call__(self, shape, dtype=None):
        return loom.eye(shape[0], shape[1], dtype=_as_dtype(dtype or _float32)) * self.gain


_NAMES = {
    "zeros": Zeros, "ones": Ones, "constant": Constant, "random_normal": RandomNormal,
    "random_uniform": RandomUniform, "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform,
    "glorot_normal": GlorotNormal, "he_normal": HeNormal, "he_uniform": HeUniform, "lecun_normal": LecunNormal,
    "lecun_uniform": LecunUniform, "orthogonal": Orthogonal, "identity": Identity,
    "variance_scaling": VarianceScaling,
}


# Keras also exports every initializer under its snake_case name (`keras.initializers.glorot_uniform(seed=0)`).
zeros, ones, constant = Zeros, Ones, Constant
random_normal, random_uniform, truncated_normal = RandomNormal, RandomUniform, TruncatedNormal
glorot_uniform, glorot_normal, he_normal, he_uniform = GlorotUniform, GlorotNormal, HeNormal, HeUniform
lecun_normal, lecun_uniform, orthogonal, identity, variance_scaling = (LecunNormal, LecunUniform, Orthogonal, Identity,
                                                                       VarianceScaling)
OrthogonalInitializer, IdentityInitializer = Orthogonal, Identity


def get(identifier) -> Initializer:
    """An initializer from a name ('glorot_uniform'), a class, an instance or a callable."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        key = identifier.lower()
        if key not in _NAMES:
            raise LoomValueError(f"loom.tf.keras.initializers.get: unknown initializer {identifier!r}; known: "
                                 f"{sorted(_NAMES)}")
        return _NAMES[key]()
    if isinstance(identifier, type):
        return identifier()
    return identifier


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.initializers", "tf.keras.initializers")
