"""Helpers the distributions share: broadcasting parameters, probabilities and logits, cached properties."""
from __future__ import annotations

import functools
import math

import numpy as np

from loom import _api as loom
from loom import dtypes as dt
from loom.tensor import Tensor

__all__ = ["broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits"]


def broadcast_all(*values) -> tuple[Tensor, ...]:
    """`values` (Tensors or numbers) as Tensors broadcast to one shape, as `torch.distributions.utils.broadcast_all`.

    Numbers take the dtype of the first floating Tensor among `values` (else the default dtype).

    Examples
    --------
    >>> from loom.distributions.utils import broadcast_all
    >>> a, b = broadcast_all(loom.tensor([1.0, 2.0]), 0.5)
    >>> b.tolist()
    [0.5, 0.5]
    """
    for v in values:
        if not isinstance(v, (Tensor, int, float, bool, np.number)):
            raise loom.LoomTypeError(f"loom.distributions: parameters must be Tensors or numbers, got "
                                     f"{type(v).__name__}")
    floats = [v.dtype for v in values if isinstance(v, Tensor) and v.dtype.is_floating_point]
    d = floats[0] if floats else dt.get_default_dtype()
    ts = [v if isinstance(v, Tensor) else loom.tensor(float(v), dtype=d) for v in values]
    return tuple(loom.broadcast_tensors(*ts))


def _eps(d: dt.DType) -> float:
    return {"bfloat16": 2.0 ** -7}.get(d.name, float(np.finfo(d.np).eps)) if d.is_floating_point else 1e-7


def _tiny(d: dt.DType) -> float:
    return {"bfloat16": 2.0 ** -126}.get(d.name, float(np.finfo(d.np).tiny))


def clamp_probs(probs: Tensor) -> Tensor:
    """Probabilities kept within [eps, 1 - eps] of their dtype, so their logs are finite.

    Examples
    --------
    >>> from loom.distributions.utils import clamp_probs
    >>> clamp_probs(loom.tensor([0.0, 1.0], dtype=loom.float64)).tolist()
    [2.220446049250313e-16, 0.9999999999999998]
    """
    eps = _eps(probs.dtype)
    return probs.clamp(min=eps, max=1.0 - eps)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """Probabilities from logits: a sigmoid (`is_binary`) or a softmax over the last dimension.

    Examples
    --------
    >>> from loom.distributions.utils import logits_to_probs
    >>> logits_to_probs(loom.tensor([0.0, 0.0])).tolist()
    [0.5, 0.5]
    """
    return loom.sigmoid(logits) if is_binary else loom.softmax(logits, -1)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """Logits from probabilities: log-odds (`is_binary`) or log-probabilities.

    Examples
    --------
    >>> from loom.distributions.utils import probs_to_logits
    >>> round(probs_to_logits(loom.tensor(0.5), is_binary=True).item(), 6)
    0.0
    """
    p = clamp_probs(probs)
    return loom.log(p) - loom.log1p(-p) if is_binary else loom.log(p)


class lazy_property:  # noqa: N801 (PyTorch's name)
    """A property computed on first access and then stored on the instance, as `torch`'s `lazy_property`.

    Examples
    --------
    >>> from loom.distributions.utils import lazy_property
    >>> class A:
    ...     @lazy_property
    ...     def x(self):
    ...         return 3
    >>> A().x
    3
    """

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        value = self.wrapped(instance)
        instance.__dict__[self.wrapped.__name__] = value
        return value


def _sum_rightmost(value: Tensor, dim: int) -> Tensor:
    """`value` summed over its `dim` rightmost dimensions."""
    return value.reshape(*value.shape[:value.ndim - dim], -1).sum(-1) if dim > 0 else value


def _shape(*parts) -> tuple[int, ...]:
    out: tuple[int, ...] = ()
    for p in parts:
        out += tuple(p)
    return out


def _uniform(shape, d: dt.DType) -> Tensor:
    """Uniform samples in (0, 1) of `shape` from loom's generator (never exactly 0, so logs stay finite)."""
    return loom.rand(*shape, dtype=d).clamp(min=_tiny(d))


def _float_dtype(t: Tensor) -> dt.DType:
    return t.dtype if t.dtype.is_floating_point else dt.get_default_dtype()


def _first_accepted(values: Tensor, accept: Tensor) -> Tensor:
    """For proposals stacked along dim 0: the first accepted one per element (the last if none is)."""
    n = values.shape[0]
    first = (accept.to(dt.int64).cumsum(0) == 0).to(dt.int64).sum(0, keepdim=True).clamp(max=n - 1)
    return values.gather(0, first).squeeze(0)


def _known_range(t: Tensor, where: Tensor) -> tuple[bool, bool, float] | None:
    """(any `where`, all `where`, max of `t` over `where`) when values can be read now; None inside a trace.

    Samplers use it to skip a branch no element takes and to size loops to the parameters at hand.
    """
    from loom.runtime import realize as _realize
    if _realize.active_trace is not None:
        return None
    w = where.numpy()
    if not w.any():
        return False, False, 0.0
    return True, bool(w.all()), float(t.detach().numpy()[w].max())


def _log_factorial(k: Tensor) -> Tensor:
    """log(k!) for k >= 0 (float64): Stirling's series at k + 7, shifted back by the recurrence.

    About 1e-10 accurate and a fraction of `lgamma`'s cost, for the rejection samplers' acceptance tests.
    """
    x = k + 7.0
    series = (x - 0.5) * x.log() - x + 0.9189385332046727 + (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * x * x))
                                                            / (x * x)) / x
    shift = (k + 1.0) * (k + 2.0) * (k + 3.0) * (k + 4.0) * (k + 5.0) * (k + 6.0)
    return series - shift.log()


def bessel_i(order: int, input, scaled: bool) -> Tensor:
    """I_0 or I_1 (times exp(-|x|) if `scaled`): the power series up to |x| = 15, the asymptotic one above."""
    x = input if isinstance(input, Tensor) else loom.tensor(input)
    x = x if x.dtype.is_floating_point else x.to(dt.get_default_dtype())
    ax = x.abs()
    small = ax <= 15.0
    xs = loom.where(small, ax, 0.0)
    q = xs * xs * 0.25
    term = None
    for k in range(40, 0, -1):  # sum_k (x^2/4)^k / (k! (k + order)!), by Horner from the top term.
        step = q / (k * (k + order))
        term = step if term is None else step * (1.0 + term)
    series = (1.0 + term) * (0.5 * loom.where(small, x, 0.0) if order else 1.0)  # I_1 is odd: signed x.
    if scaled:
        series = series * (-xs).exp()
    xl = loom.where(small, 20.0, ax)
    mu, tail, coef = 4.0 * order * order, 1.0, 1.0
    for k in range(1, 12):  # e^x / sqrt(2 pi x) * sum_k (-1)^k prod_j (mu - (2j - 1)^2) / (k! (8x)^k)
        coef = -coef * (mu - (2 * k - 1) ** 2) / (k * 8.0)
        tail = tail + coef / xl ** k
    large = tail / (2 * math.pi * xl).sqrt()
    if not scaled:
        large = large * xl.exp()
    if order:
        large = large * x.sign()
    return loom.where(small, series, large)
