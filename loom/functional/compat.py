"""PyTorch's remaining op names: aliases, in-place twins and small composites over the other modules.

PyTorch spells many ops twice (`arccos` and `acos`, `multiply` and `mul`) and
gives most an in-place twin; the ones loom's other modules do not define live
here, each one line over the op that computes it, so `loom.torch` programs
find every name on `Tensor` and at the top level.
"""
from __future__ import annotations

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError
from loom.functional import math as _math
from loom.tensor import Tensor, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _alias(target, name: str):
    """A function named `name` that is `target` (its own object, so loom exports it under the new name)."""
    def fn(*args, **kwargs):
        return target(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = f"Alias of :func:`loom.{target.__name__}` (PyTorch's second spelling)."
    return fn


_ALIASES = {
    "arccos": _math.acos, "arcsin": _math.asin, "arctan": _math.atan, "arccosh": _math.acosh,
    "arcsinh": _math.asinh, "arctanh": _math.atanh, "arctan2": _math.atan2, "absolute": _math.abs,
    "negative": _math.neg, "multiply": _math.mul, "subtract": _math.sub, "divide": _math.div,
    "true_divide": _math.div, "clip": _math.clamp, "greater": _math.gt if hasattr(_math, "gt") else None,
}
_ALIASES = {k: v for k, v in _ALIASES.items() if v is not None}
for _name, _fn in _ALIASES.items():
    globals()[_name] = _alias(_fn, _name)


def isclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (and equal infinities), as `torch.isclose`.

    Examples
    --------
    >>> loom.isclose(loom.tensor([1.0, 2.0]), loom.tensor([1.0 + 1e-7, 2.1])).tolist()
    [True, False]
    """
    a, b = _t(input), _t(other)
    if a.dtype is not b.dtype:
        raise DTypeError(f"loom.isclose: expected both inputs to have the same dtype, got {a.dtype.name} and "
                         f"{b.dtype.name}")
    if rtol < 0 or atol < 0:
        raise LoomValueError(f"loom.isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    close = a == b
    if a.dtype is dt.bool_:
        return close
    if a.dtype.is_floating_point and equal_nan:
        close = close | (_math.isnan(a) & _math.isnan(b))
    if a.dtype.category == 1:  # Integers: the error in the default float, as PyTorch computes it.
        a, b = a.to(dt.get_default_dtype()), b.to(dt.get_default_dtype())
    if rtol == 0 and atol == 0:
        return close
    err = (a - b).abs()
    return close | (_math.isfinite(err) & (err <= atol + (b * rtol).abs()))


def allclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every element is close (see `isclose`), as `torch.allclose`.

    Examples
    --------
    >>> loom.allclose(loom.ones(3), loom.ones(3) + 1e-9)
    True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


METHODS = sorted(_ALIASES) + ["isclose", "allclose"]
INPLACE = [n for n in _ALIASES if n != "clip"]
