"""`keras.constraints`: projections optimizers apply to a weight after each update."""
from __future__ import annotations

import loom
from loom.errors import LoomValueError


class Constraint:
    """Base: `constraint(w)` returns the projected weight."""

    def __call__(self, w):
        return w

    def get_config(self) -> dict:
        return {}


def _norms(w, axis):
    return loom.sqrt((w * w).sum(dim=axis, keepdim=True))


class NonNeg(Constraint):
    """Negative entries set to zero."""

    def __call__(self, w):
        return w * (w >= 0).to(w.dtype)


class MaxNorm(Constraint):
    """Each slice along `axis` rescaled to norm at most `max_value`."""

    def __init__(self, max_value=2, axis=0) -> None:
        self.max_value, self.axis = max_value, axis

    def __call__(self, w):
        n = _norms(w, self.axis)
        return w * (loom.clamp(n, 0.0, float(self.max_value)) / (1e-7 + n))


class UnitNorm(Constraint):
    """Each slice along `axis` rescaled to unit norm."""

    def __init__(self, axis=0) -> None:
        self.axis = axis

    def __call__(self, w):
        return w / (1e-7 + _norms(w, self.axis))


class MinMaxNorm(Constraint):
    """Each slice's norm moved (by `rate`) into [min_value, max_value]."""

    def __init__(self, min_value=0.0, max_value=1.0, rate=1.0, axis=0) -> None:
        self.min_value, self.max_value, self.rate, self.axis = min_value, max_value, rate, axis

    def __call__(self, w):
        n = _norms(w, self.axis)
        want = self.rate * loom.clamp(n, float(self.min_value), float(self.max_value)) + (1 - self.rate) * n
        return w * (want / (1e-7 + n))


max_norm, non_neg, unit_norm, min_max_norm = MaxNorm, NonNeg, UnitNorm, MinMaxNorm
_NAMES = {"non_neg": NonNeg, "nonneg": NonNeg, "max_norm": MaxNorm, "unit_norm": UnitNorm,
          "min_max_norm": MinMaxNorm}


def get(identifier):
    """A constraint from None, a name ('non_neg'), an instance or a callable."""
    if identifier is None or callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _NAMES:
        return _NAMES[identifier.lower()]()
    raise LoomValueError(f"loom.tf.keras.constraints.get: unknown constraint {identifier!r}; known: {sorted(_NAMES)}")


