"""`torch.nn.attention`: the attention-backend switch; loom has one scaled_dot_product_attention for all of them.

Every backend computes the same attention (up to rounding), so choosing one changes nothing in loom.
"""
from __future__ import annotations

import contextlib
import enum

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.Enum):
    """The fused-attention implementations PyTorch can choose between."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority: bool = False):
    """Pick the attention backend(s) for the region; loom's single implementation serves all of them.

    Examples
    --------
    >>> import loom.torch as torch
    >>> from loom.torch.nn.attention import SDPBackend, sdpa_kernel
    >>> q = torch.ones(1, 1, 2, 4)
    >>> with sdpa_kernel(SDPBackend.MATH):
    ...     torch.nn.functional.scaled_dot_product_attention(q, q, q).shape
    torch.Size([1, 1, 2, 4])
    """
    for b in backends if isinstance(backends, (list, tuple, set)) else [backends]:
        if not isinstance(b, SDPBackend):
            from loom.errors import LoomTypeError
            raise LoomTypeError(f"loom.torch.nn.attention.sdpa_kernel: expected SDPBackend members, got {b!r}")
    yield
