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
