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
        def single(v):  # 1-tuples, as PyTorch stores (and prints) them: kernel_size=(3,).
            return tuple(v) if isinstance(v, (tuple, list)) else (v,)
        super().__init__(single(kernel_size), None if stride is None else single(stride), single(padding),
                         ceil_mode, count_include_pad)


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


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, D, H, W) inputs to a fixed output size."""

    _fn = "adaptive_max_pool3d"


class _LPPoolNd(Module):
    _fn = "lp_pool2d"

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """Power-average pooling (sum of x^p over each window)^(1/p) over (N, C, L) inputs.

    Examples
    --------
    >>> loom.nn.LPPool1d(2, 2)(loom.tensor([[[3.0, 4.0]]])).tolist()
    [[[5.0]]]
    """

    _fn = "lp_pool1d"


class LPPool2d(_LPPoolNd):
    """Power-average pooling over (N, C, H, W) inputs."""

    _fn = "lp_pool2d"


class LPPool3d(_LPPoolNd):
    """Power-average pooling over (N, C, D, H, W) inputs."""

    _fn = "lp_pool3d"


class _MaxUnpoolNd(Module):
    _fn = "max_unpool2d"

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return getattr(F, self._fn)(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Inverse of MaxPool1d: values back at their indices, zeros elsewhere."""

    _fn = "max_unpool1d"


class MaxUnpool2d(_MaxUnpoolNd):
    """Inverse of MaxPool2d: values back at their indices, zeros elsewhere.

    Examples
    --------
    >>> pool, unpool = loom.nn.MaxPool2d(2, return_indices=True), loom.nn.MaxUnpool2d(2)
    >>> unpool(*pool(loom.ones(1, 1, 4, 4))).shape
    loom.Size([1, 1, 4, 4])
    """

    _fn = "max_unpool2d"


class MaxUnpool3d(_MaxUnpoolNd):
    """Inverse of MaxPool3d."""

    _fn = "max_unpool3d"


class _FractionalMaxPoolNd(Module):
    _fn = "fractional_max_pool2d"

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None) -> None:
        super().__init__()
        if output_size is None and output_ratio is None:
            raise ValueError(f"loom.nn.{type(self).__name__} requires specifying either an output size, or a "
                             "pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError(f"loom.nn.{type(self).__name__}: only one of output_size and output_ratio may be "
                             "specified")
        self.kernel_size = kernel_size
        self.output_size = output_size
        self.output_ratio = output_ratio
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)

    def forward(self, input: Tensor):
        return getattr(F, self._fn)(input, self.kernel_size, self.output_size, self.output_ratio,
                                    self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max pooling over (N, C, H, W) with windows at pseudo-random, increasing starts.

    Examples
    --------
    >>> loom.nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.5))(loom.randn(1, 2, 10, 10)).shape
    loom.Size([1, 2, 5, 5])
    """

    _fn = "fractional_max_pool2d"


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Fractional max pooling over (N, C, D, H, W)."""

    _fn = "fractional_max_pool3d"
