"""Activations `torch.nn.functional` has beyond those in `loom.functional.math`.

Shrinkage and threshold activations, PReLU/RReLU, Gumbel-softmax, and the
trailing-underscore in-place spellings (`F.relu_`, `F.elu_`, ...). Each is a
selection (`where`) over elementwise ops, so gradients of any order come from
the primitives' rules.
"""
from __future__ import annotations

from loom import autocast as _autocast
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.math import (
    celu, elu, hardtanh, leaky_relu, log, relu, selu, where,
)
from loom.functional.indexing import scatter
from loom.functional.nn import softmax
from loom.tensor import Tensor, const, rand, tensor


def _float(op: str, x) -> Tensor:
    x = x if isinstance(x, Tensor) else tensor(x)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.nn.functional.{op}: expected a floating point input, got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")
    return x


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, else 0.

    Examples
    --------
    >>> loom.nn.functional.hardshrink(loom.tensor([-1.0, 0.2, 0.7])).tolist()
    [-1.0, 0.0, 0.699999988079071]
    """
    x = _float("hardshrink", input)
    return where((x > lambd) | (x < -lambd), x, const(0.0, (), x.dtype))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, else 0.

    Examples
    --------
    >>> loom.nn.functional.softshrink(loom.tensor([-1.0, 0.2, 1.5])).tolist()
    [-0.5, 0.0, 1.0]
    """
    x = _float("softshrink", input)
    if lambd < 0:
        raise LoomValueError(f"loom.nn.functional.softshrink: lambda must be non-negative, got {lambd}")
    zero = const(0.0, (), x.dtype)
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, zero))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else `value`.

    Examples
    --------
    >>> loom.nn.functional.threshold(loom.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    x = input if isinstance(input, Tensor) else tensor(input)
    if inplace:
        return x._inplace("threshold_", _threshold, threshold, value)
    return _threshold(x, threshold, value)


def _threshold(x: Tensor, th: float, value: float) -> Tensor:
    """The body of `threshold`, whose parameter name shadows the function."""
    v = value if x.dtype.is_floating_point else int(value)
    return where(x > th, x, const(v, (), x.dtype))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """max(0, x) + weight * min(0, x), one weight per channel (dim 1) or one shared weight.

    Examples
    --------
    >>> loom.nn.functional.prelu(loom.tensor([[-2.0, 3.0]]), loom.tensor([0.25])).tolist()
    [[-0.5, 3.0]]
    """
    x = _float("prelu", input)
    w = weight if isinstance(weight, Tensor) else tensor(weight)
    x, w = _autocast.lower(x, w)  # One of the ops PyTorch's CPU autocast runs in the lower precision.
    if w.ndim > 1:
        raise ShapeError(f"loom.nn.functional.prelu: weight must be 0-d or 1-d, got {fmt_shape(w.shape)}")
    n = w.numel()
    if n != 1:
        c = x.shape[1] if x.ndim >= 2 else 1
        if n != c:
            raise ShapeError(f"loom.nn.functional.prelu: weight of {n} elements does not match the {c} "
                             f"channels of input {fmt_shape(x.shape)} (channels are dim 1; inputs of fewer "
                             "than 2 dims have one)")
        w = w.reshape([n if d == 1 else 1 for d in range(x.ndim)])
    elif w.ndim == 1 and x.ndim >= 1:
        w = w.reshape([1] * x.ndim)
    return where(x > 0, x, w * x)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Randomised leaky ReLU: negative inputs scaled by a slope drawn from U(lower, upper) in training,
    by (lower + upper) / 2 in eval.

    Examples
    --------
    >>> loom.nn.functional.rrelu(loom.tensor([-3.0, 1.0])).tolist()
    [-0.6875, 1.0]
    """
    x = _float("rrelu", input)
    if inplace:
        return x._inplace("rrelu_", rrelu, lower, upper, training)
    if lower > upper:
        raise LoomValueError(f"loom.nn.functional.rrelu: lower bound {lower} is above upper bound {upper}")
    if not training:
        return leaky_relu(x, (lower + upper) / 2)
    slope = rand(*x.shape, dtype=x.dtype) * (upper - lower) + lower
    return where(x >= 0, x, x * slope)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """Sample from the Gumbel-softmax distribution: softmax((logits + g) / tau), g ~ Gumbel(0, 1).

    With `hard=True` the result is the one-hot of the sample's argmax in value and the soft sample
    in gradient (straight-through).

    Examples
    --------
    >>> y = loom.nn.functional.gumbel_softmax(loom.zeros(2, 4), hard=True)
    >>> y.sum(-1).tolist()
    [1.0, 1.0]
    """
    x = _float("gumbel_softmax", logits)
    u = rand(*x.shape, dtype=x.dtype)
    # -log(Exp(1)) with Exp(1) = -log(1 - u); 1 - u lies in (0, 1], so the sample is finite.
    gumbels = -log(-log(1.0 - u))
    y_soft = softmax((x + gumbels) / tau, dim)
    if not hard:
        return y_soft
    idx = y_soft.detach().argmax(dim, keepdim=True)
    y_hard = scatter(y_soft.detach() * 0.0, dim, idx, 1.0)
    return y_hard - y_soft.detach() + y_soft


def _inplace_twin(name: str, fn):
    def twin(input: Tensor, *args, **kwargs) -> Tensor:
        x = input if isinstance(input, Tensor) else tensor(input)
        return x._inplace(name, fn, *args, **kwargs)
    twin.__name__ = name
    twin.__qualname__ = name
    twin.__doc__ = f"In-place `{name[:-1]}`: writes the result into `input` and returns it."
    return twin


relu_ = _inplace_twin("relu_", relu)
elu_ = _inplace_twin("elu_", elu)
selu_ = _inplace_twin("selu_", selu)
celu_ = _inplace_twin("celu_", celu)
leaky_relu_ = _inplace_twin("leaky_relu_", leaky_relu)
hardtanh_ = _inplace_twin("hardtanh_", hardtanh)
threshold_ = _inplace_twin("threshold_", _threshold)
rrelu_ = _inplace_twin("rrelu_", rrelu)

NN_FUNCTIONAL = [
    "hardshrink", "softshrink", "threshold", "threshold_", "prelu", "rrelu", "rrelu_", "gumbel_softmax",
    "relu_", "elu_", "selu_", "celu_", "leaky_relu_", "hardtanh_",
]
__all__ = NN_FUNCTIONAL
