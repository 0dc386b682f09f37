"""Pooling layers: max, average and adaptive pooling over 1, 2 or 3 spatial dims."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class _MaxPoolNd(Module):
    _fn = "max_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor):
        return getattr(F, self._fn)(input, self.kernel_size, self.stride, self.padding, self.dilation,
                                    ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L) inputs."""

    _fn = "max_pool1d"


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of (N, C, H, W) inputs.

    Examples
    --------
    >>> loom.nn.MaxPool2d(2)(loom.zeros(1, 3, 8, 8)).shape
    loom.Size([1, 3, 4, 4])
    """

    _fn = "max_pool2d"


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) inputs."""

    _fn = "max_pool3d"


class _AvgPoolNd(Module):
    _fn = "avg_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        extra = {} if self._fn == "avg_pool1d" else {"divisor_override": self.divisor_override}
        return getattr(F, self._fn)(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                    self.count_include_pad, **extra)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, L) inputs."""

    _fn = "avg_pool1d"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, H, W) inputs.

    Examples
    --------
    >>> loom.nn.AvgPool2d(2)(loom.ones(1, 1, 4, 4)).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """

    _fn = "avg_pool2d"


class AvgPool3d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, D, H, W) inputs."""

    _fn = "avg_pool3d"


class _AdaptivePoolNd(Module):
    _fn = "adaptive_avg_pool2d"

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor):
        return getattr(F, self._fn)(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePoolNd):
    """Mean pooling of (N, C, L) inputs to a fixed output length."""

    _fn = "adaptive_avg_pool1d"


class AdaptiveAvgPool2d(_AdaptivePoolNd):
    """Mean pooling of (N, C, H, W) inputs to a fixed output size (None keeps that dim).

    Examples
    --------
    >>> loom.nn.AdaptiveAvgPool2d((1, 1))(loom.ones(2, 3, 7, 5)).shape
    loom.Size([2, 3, 1, 1])
    """

    _fn = "adaptive_avg_pool2d"


class AdaptiveAvgPool3d(_AdaptivePoolNd):
    """Mean pooling of (N, C, D, H, W) inputs to a fixed output size."""

    _fn = "adaptive_avg_pool3d"


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input: Tensor):
        return getattr(F, self._fn)(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, L) inputs to a fixed output length."""

    _fn = "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, H, W) inputs to a fixed output size."""

    _fn = "adaptive_max_pool2d"
