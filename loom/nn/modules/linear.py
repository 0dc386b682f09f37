"""Identity, Linear and Bilinear layers."""
from __future__ import annotations

import math

from loom.nn import functional as F
from loom.tensor import _check_device
from loom.nn import init
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty


class Identity(Module):
    """Returns its input unchanged; any constructor arguments are ignored.

    Examples
    --------
    >>> loom.nn.Identity(54, unused="x")(loom.ones(2)).tolist()
    [1.0, 1.0]
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    """y = x W^T + b.

    Parameters
    ----------
    in_features, out_features : int
        Sizes of each input and output sample.
    bias : bool
        Learn an additive bias. Default: True.

    Weight and bias start as U(-1/sqrt(in_features), 1/sqrt(in_features)), as in PyTorch.

    Examples
    --------
    >>> m = loom.nn.Linear(20, 30)
    >>> m(loom.randn(128, 20)).shape
    loom.Size([128, 30])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in_features), dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """y = x1^T A x2 + b, for each output feature.

    Examples
    --------
    >>> m = loom.nn.Bilinear(20, 30, 40)
    >>> m(loom.randn(128, 20), loom.randn(128, 30)).shape
    loom.Size([128, 40])
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in1_features, in2_features), dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
