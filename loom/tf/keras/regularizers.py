"""`keras.regularizers`: L1 and L2 weight penalties added to the training loss."""
from __future__ import annotations

import loom
from loom.errors import LoomValueError


class Regularizer:
    """A penalty on a weight: `reg(weight)` gives a scalar added to the loss."""

    def __call__(self, x):
        return loom.zeros(())


class L1L2(Regularizer):
    """l1 * sum(|w|) + l2 * sum(w ** 2)."""

    def __init__(self, l1=0.0, l2=0.0) -> None:
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x):
        out = loom.zeros((), dtype=x.dtype)
        if self.l1:
            out = out + self.l1 * loom.abs(x).sum()
        if self.l2:
            out = out + self.l2 * (x * x).sum()
        return out


class L1(L1L2):
    """l1 * sum(|w|) (0.01 by default)."""

    def __init__(self, l1=0.01) -> None:
        super().__init__(l1=l1)


class L2(L1L2):
    """l2 * sum(w ** 2) (0.01 by default)."""

    def __init__(self, l2=0.01) -> None:
        super().__init__(l2=l2)


l1, l2, l1_l2 = L1, L2, L1L2


def get(identifier):
    """A regularizer from None, a name ('l2'), or an instance/callable."""
    if identifier is None or isinstance(identifier, Regularizer) or callable(identifier):
        return identifier
    names = {"l1": L1, "l2": L2, "l1_l2": L1L2}
    if isinstance(identifier, str) and identifier.lower() in names:
        return names[identifier.lower()]()
    raise LoomValueError(f"loom.tf.keras.regularizers.get: unknown regularizer {identifier!r}")
