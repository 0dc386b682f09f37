"""Activation modules: thin wrappers over `loom.nn.functional`, with PyTorch's arguments and reprs."""
from __future__ import annotations

import warnings

from loom.nn import functional as F
from loom.tensor import _check_device
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty


def _inplace_repr(inplace: bool) -> str:
    return "inplace=True" if inplace else ""


class _Inplace(Module):
    """An elementwise activation whose only option is `inplace`."""

    _fn = "relu"

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class _Plain(Module):
    """An elementwise activation without options."""

    _fn = "sigmoid"

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input)


class ReLU(_Inplace):
    """max(0, x).

    Examples
    --------
    >>> loom.nn.ReLU()(loom.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """

    _fn = "relu"


class ReLU6(_Inplace):
    """min(max(0, x), 6)."""

    _fn = "relu6"


class SELU(_Inplace):
    """Scaled ELU with the self-normalising constants."""

    _fn = "selu"


class SiLU(_Inplace):
    """x * sigmoid(x) (swish)."""

    _fn = "silu"


class Mish(_Inplace):
    """x * tanh(softplus(x))."""

    _fn = "mish"


class Hardsigmoid(_Inplace):
    """Piecewise-linear sigmoid: relu6(x + 3) / 6."""

    _fn = "hardsigmoid"


class Hardswish(_Inplace):
    """x * hardsigmoid(x)."""

    _fn = "hardswish"


class Sigmoid(_Plain):
    """1 / (1 + exp(-x)).

    Examples
    --------
    >>> loom.nn.Sigmoid()(loom.zeros(1)).tolist()
    [0.5]
    """

    _fn = "sigmoid"


class Tanh(_Plain):
    """Hyperbolic tangent."""

    _fn = "tanh"


class LogSigmoid(_Plain):
    """log(sigmoid(x)), computed stably."""

    _fn = "logsigmoid"


class Softsign(_Plain):
    """x / (1 + |x|)."""

    _fn = "softsign"


class Tanhshrink(_Plain):
    """x - tanh(x)."""

    _fn = "tanhshrink"


class LeakyReLU(Module):
    """max(0, x) + negative_slope * min(0, x).

    Examples
    --------
    >>> loom.nn.LeakyReLU(0.1)(loom.tensor([-1.0, 2.0])).tolist()
    [-0.10000000149011612, 2.0]
    """

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """x if x > 0 else alpha * (exp(x) - 1)."""

    _fn = "elu"

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    _fn = "celu"


class GELU(Module):
    """x * Phi(x), exactly (`approximate="none"`) or with the tanh approximation (`"tanh"`).

    Examples
    --------
    >>> loom.nn.GELU()
    GELU(approximate='none')
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, linear above `threshold`."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """x clamped to [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"loom.nn.Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class PReLU(Module):
    """max(0, x) + a * min(0, x) with a learned slope `a` (one, or one per channel).

    Examples
    --------
    >>> loom.nn.PReLU(3).weight.shape
    loom.Size([3])
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(empty(num_parameters, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        from loom.nn import init as _init
        _init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


def _get_softmax_dim(name: str, ndim: int) -> int:
    """PyTorch's legacy choice of dim when none is given (with its warning)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """exp(x) / sum(exp(x)) along `dim`.

    Examples
    --------
    >>> loom.nn.Softmax(dim=-1)(loom.zeros(1, 4)).tolist()
    [[0.25, 0.25, 0.25, 0.25]]
    """

    _fn = "softmax"

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        dim = self.dim if self.dim is not None else _get_softmax_dim(self._fn, input.ndim)
        return getattr(F, self._fn)(input, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, computed stably."""

    _fn = "log_softmax"


class Softmin(Softmax):
    """softmax(-x) along `dim`."""

    _fn = "softmin"


class GLU(Module):
    """Gated linear unit: a * sigmoid(b), with `input` split in halves a, b along `dim`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _Shrink(Module):
    _fn = "hardshrink"

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class Hardshrink(_Shrink):
    """x where |x| > lambd, else 0.

    Examples
    --------
    >>> loom.nn.Hardshrink()(loom.tensor([-1.0, 0.25])).tolist()
    [-1.0, 0.0]
    """

    _fn = "hardshrink"


class Softshrink(_Shrink):
    """x shrunk towards 0 by lambd, and 0 within [-lambd, lambd]."""

    _fn = "softshrink"


class Threshold(Module):
    """x where x > threshold, else `value`.

    Examples
    --------
    >>> loom.nn.Threshold(0.1, 20.0)(loom.tensor([0.0, 1.0])).tolist()
    [20.0, 1.0]
    """

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class RReLU(Module):
    """Randomised leaky ReLU: slopes drawn from U(lower, upper) in training, their mean in eval."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False) -> None:
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W) inputs."""

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ValueError(f"loom.nn.Softmax2d: expected a 3-d or 4-d input, got {input.ndim}-d "
                             f"{list(input.shape)}")
        return F.softmax(input, -3)
