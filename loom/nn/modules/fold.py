"""Fold / Unfold: sliding local blocks to columns (im2col) and back (col2im, summing overlaps)."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class Fold(Module):
    """Sum (N, C * prod(kernel_size), L) columns back into (N, C, *output_size) images.

    Examples
    --------
    >>> loom.nn.Fold((4, 4), 2, stride=2)(loom.ones(1, 4, 4)).shape
    loom.Size([1, 1, 4, 4])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input: Tensor) -> Tensor:
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Unfold(Module):
    """Extract sliding local blocks of (N, C, H, W) as (N, C * prod(kernel_size), L) columns.

    Examples
    --------
    >>> loom.nn.Unfold(2)(loom.ones(1, 3, 4, 4)).shape
    loom.Size([1, 12, 9])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input: Tensor) -> Tensor:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")
