"""Convolution layers: Conv1d/2d/3d and ConvTranspose1d/2d/3d."""
from __future__ import annotations

import math

from loom.nn import functional as F
from loom.tensor import _check_device
from loom.nn import init
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty


def _ntuple(v, n: int) -> tuple:
    if isinstance(v, (tuple, list)):
        if len(v) != n:
            raise ValueError(f"loom.nn: expected an int or a sequence of {n} ints, got {v!r}")
        return tuple(v)
    return (v,) * n


class _ConvNd(Module):
    """The parameters, checks and printing shared by every convolution layer."""

    _nd = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        name = f"loom.nn.{type(self).__name__}"
        n = self._nd
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups != 0:
            raise ValueError(f"{name}: in_channels ({in_channels}) must be divisible by groups ({groups})")
        if out_channels % groups != 0:
            raise ValueError(f"{name}: out_channels ({out_channels}) must be divisible by groups ({groups})")
        kernel_size, stride, dilation = _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(dilation, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided convolutions")
        else:
            padding = _ntuple(padding, n)
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be one of 'zeros', 'reflect', 'replicate' or "
                             f"'circular', but got padding_mode={padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f"{name}: only 'zeros' padding mode is supported for {type(self).__name__}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = self._transposed
        self.output_padding = _ntuple(output_padding, n)
        self.groups = groups
        self.padding_mode = padding_mode
        # F.pad's argument for the non-zero padding modes: last dim first, (left, right) each.
        if isinstance(padding, str):
            pads = [0, 0] * n
            if padding == "same":
                for d, k, i in zip(dilation, kernel_size, range(n - 1, -1, -1)):
                    total = d * (k - 1)
                    pads[2 * i], pads[2 * i + 1] = total // 2, total - total // 2
        else:
            pads = [p for p in reversed(padding) for _ in range(2)]
        self._reversed_padding_repeated_twice = pads
        if self._transposed:
            shape = (in_channels, out_channels // groups) + kernel_size
        else:
            shape = (out_channels, in_channels // groups) + kernel_size
        self.weight = Parameter(empty(shape, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None,
                 dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device=device, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        conv = getattr(F, f"conv{self._nd}d")
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(input, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L) inputs.

    Examples
    --------
    >>> loom.nn.Conv1d(16, 33, 3, stride=2)(loom.randn(20, 16, 50)).shape
    loom.Size([20, 33, 24])
    """

    _nd = 1


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W) inputs.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, dilation : int or tuple
    padding : int, tuple, or "same" / "valid"
    groups : int
    bias : bool
    padding_mode : "zeros", "reflect", "replicate" or "circular"

    Weight and bias start as in PyTorch (kaiming_uniform_ with a=sqrt(5); bias U(+-1/sqrt(fan_in))).

    Examples
    --------
    >>> loom.nn.Conv2d(3, 8, 3, padding=1)(loom.randn(2, 3, 16, 16)).shape
    loom.Size([2, 8, 16, 16])
    """

    _nd = 2


class Conv3d(_Conv):
    """3-d convolution over (N, C_in, D, H, W) inputs."""

    _nd = 3


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device=device, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")

    def _output_padding(self, input: Tensor, output_size) -> tuple:
        """The output_padding that makes the output `output_size` (PyTorch's rule)."""
        if output_size is None:
            return self.output_padding
        n = self._nd
        non_spatial = 2 if input.ndim == n + 2 else 1
        output_size = list(output_size)
        if len(output_size) == non_spatial + n:
            output_size = output_size[non_spatial:]
        if len(output_size) != n:
            raise ValueError(f"loom.nn.{type(self).__name__}: output_size must have {n} or {non_spatial + n} "
                             f"elements (got {len(output_size)})")
        res = []
        for d in range(n):
            lo = ((input.shape[d + non_spatial] - 1) * self.stride[d] - 2 * self.padding[d]
                  + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            hi = lo + self.stride[d] - 1
            if not lo <= output_size[d] <= hi:
                raise ValueError(f"loom.nn.{type(self).__name__}: requested an output size of {output_size}, "
                                 f"but valid sizes range from {lo} to {hi} in dim {d} (for an input of "
                                 f"{list(input.shape)[non_spatial:]})")
            res.append(output_size[d] - lo)
        return tuple(res)

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        output_padding = self._output_padding(input, output_size)
        conv = getattr(F, f"conv_transpose{self._nd}d")
        return conv(input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups,
                    self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution (the gradient of Conv1d with respect to its input)."""

    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution (the gradient of Conv2d with respect to its input).

    Examples
    --------
    >>> up = loom.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1)
    >>> up(loom.randn(1, 16, 6, 6), output_size=[1, 8, 12, 12]).shape
    loom.Size([1, 8, 12, 12])
    """

    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution."""

    _nd = 3
