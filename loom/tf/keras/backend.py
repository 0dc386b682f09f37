"""`keras.backend`: session reset, epsilon and a few helpers."""
from __future__ import annotations

from loom.tf.keras.engine import clear_session  # noqa: F401


def epsilon() -> float:
    """The fuzz factor Keras adds in losses and optimizers (1e-7)."""
    return 1e-7


def floatx() -> str:
    """The default float type name ('float32')."""
    return "float32"


def image_data_format() -> str:
    """Image layout: 'channels_last'."""
    return "channels_last"


def get_value(x):
    """The value of a variable or tensor as NumPy (a Python number stays as it is)."""
    from loom.tensor import Tensor
    return x.numpy() if isinstance(x, Tensor) else x


def set_value(x, value) -> None:
    """Assign `value` to the variable `x`."""
    x.assign(value)
