"""Elementwise ops: the primitives' public faces and their compositions."""
from __future__ import annotations

import functools
import inspect
import math

from loom import _upper
from loom import dtypes as dt
import numpy as np

from loom.autograd.function import Function
from loom.autograd.grad_mode import is_grad_enabled
from loom.errors import DTypeError, LoomValueError, fmt_shape
from loom.tensor import (Tensor, apply, as_tensor_like, binary, broadcast_operand, broadcast_shapes, broadcast_to,
                         const, tensor, unary)


_HALF = (dt.float16, dt.bfloat16)


def _opmath(fn):
    """Run a composite on half-precision tensors in float32 and round once at the end.

    PyTorch's CPU kernels compute float16/bfloat16 in float32; a composite of
    several primitives would otherwise round after every step.
    """
    params = list(inspect.signature(fn).parameters)
    at = params.index("inplace") if "inplace" in params else None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        inplace = kwargs.get("inplace", args[at] if at is not None and len(args) > at else False)
        tensors = [a for a in args if isinstance(a, Tensor)]
        if inplace or not tensors:
            return fn(*args, **kwargs)
        target = dt.result_type(*tensors)
        if target not in _HALF:
            return fn(*args, **kwargs)
        up = [a.to(dt.float32) if isinstance(a, Tensor) and a.dtype in _HALF else a for a in args]
        out = fn(*up, **kwargs)
        return out.to(target) if out.dtype is dt.float32 else out
    return wrapper


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def exp(x): return unary("exp", _t(x))
def log(x): return unary("log", _t(x))
def log1p(x): return unary("log1p", _t(x))
def expm1(x): return unary("expm1", _t(x))
def sqrt(x): return unary("sqrt", _t(x))
def sin(x): return unary("sin", _t(x))
def cos(x): return unary("cos", _t(x))
def tan(x): return unary("tan", _t(x))
def tanh(x): return unary("tanh", _t(x))
def erf(x): return unary("erf", _t(x))
def reciprocal(x): return unary("recip", _t(x))


@_opmath
def rsqrt(x):
    return reciprocal(sqrt(x))


@_opmath
def log2(x):
    return log(x) * (1.0 / math.log(2.0))


@_opmath
def log10(x):
    return log(x) * (1.0 / math.log(10.0))


def exp2(x):
    # 2 ** x through pow, so half-precision inputs round once, as PyTorch's exp2.
    return binary("pow", 2.0, _float(x))


@_opmath
def erfc(x):
    """1 - erf(x), accurate in the right tail too (erfc(5) = 1.5e-12, not the 0 that 1 - erf(5) gives).

    From `_ERFC_TAIL[dtype][0]` up, a continued fraction
    erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))),
    cut after `_ERFC_TAIL[dtype][1]` terms (relative error below 1e-7 in float32 and 1e-14 in float64
    there); below it 1 - erf(x) has no cancellation worth the name.

    Examples
    --------
    >>> f"{loom.erfc(loom.tensor(5.0)).item():.4g}"
    '1.537e-12'
    """
    x = _float(x)
    start, terms = _ERFC_TAIL[x.dtype is dt.float64]
    tail = x >= start
    # The tail's inputs, kept in [start, 30] (erfc(30) is 0 even in float64) so no inf or NaN
    # reaches the unused branch's gradient.
    t = where(tail, where(x > 30.0, const(30.0, (), x.dtype), x), const(start, (), x.dtype))
    f = t
    for n in range(terms, 0, -1):
        f = t + (n * 0.5) / f
    # exp(-t^2) with t^2 split as th^2 + (t - th)(t + th), th = t rounded to 1/16: th^2 is exact, so the
    # rounding of t^2 (relative error up to 81 ulps at t = 9) does not reach the exponent.
    th = trunc(t * 16.0) * 0.0625
    e = exp(-(th * th)) * exp(-((t - th) * (t + th)))
    return where(tail, e / (f * math.sqrt(math.pi)), 1.0 - erf(x))


# Where erfc's continued fraction takes over from 1 - erf, and how many terms it keeps: by float64 or not.
_ERFC_TAIL = {False: (2.0, 16), True: (3.0, 24)}


def _float(x) -> Tensor:
    x = _t(x)
    return x if x.dtype.category >= 2 else x.to(dt.get_default_dtype())


def _no_bool(op: str, x: Tensor) -> None:
    if x.dtype is dt.bool_:
        raise DTypeError(f"loom.{op}: not implemented for bool tensors (got bool{fmt_shape(x.shape)})")


def _int_passthrough(op: str, x):
    x = _t(x)
    _no_bool(op, x)
    return x if x.dtype.category < 2 else apply(op, (x,), {})


def floor(x): return _int_passthrough("floor", x)
def ceil(x): return _int_passthrough("ceil", x)
def trunc(x): return _int_passthrough("trunc", x)


def round(x, decimals: int = 0):
    x = _t(x)
    _no_bool("round", x)
    if x.dtype.category < 2:
        return x
    if decimals == 0:
        return apply("round", (x,), {})
    if decimals > 0:
        scale = 10.0 ** decimals
        return apply("round", (x * scale,), {}) / scale
    scale = 10.0 ** -decimals  # Divide rather than multiply by 10**decimals, as PyTorch (exact scale).
    return apply("round", (x / scale,), {}) * scale


def frac(x):
    x = _t(x)
    _check_float("frac", x)
    return x - trunc(x)


def abs(x):
    x = _t(x)
    _no_bool("abs", x)
    return apply("abs", (x,), {})


def sign(x):
    x = _t(x)
    return x if x.dtype is dt.bool_ else apply("sign", (x,), {})


def neg(x):
    return -_t(x)


negative = neg
absolute = abs


def square(x):
    x = _t(x)
    if x.dtype is dt.bool_:
        x = x.to(dt.int64)  # PyTorch squares bools as int64.
    return x * x


@_opmath
def sigmoid(x):
    """1 / (1 + exp(-x)), accurate in both tails and never overflowing.

    Examples
    --------
    >>> loom.sigmoid(loom.tensor([0.0])).tolist()
    [0.5]
    """
    x = _float(x)
    if x.dtype.is_complex:  # No ordering to pick a tail by: the plain formula, as PyTorch's complex sigmoid.
        return 1.0 / (exp(-x) + 1.0)
    pos = x >= 0
    e = exp(where(pos, -x, x))  # exp(-|x|) <= 1, with a gradient of +-1 through the where even at 0.
    s = 1.0 / (e + 1.0)
    return where(pos, s, e * s)


@_opmath
def logsigmoid(x):
    x = _float(x)
    return -softplus(-x)


def relu(x, inplace: bool = False):
    x = _t(x)
    _no_bool("relu", x)
    if inplace:
        return x._inplace("relu_", relu)
    # A where, not maximum(x, 0): the gradient at exactly 0 is 0 (as PyTorch), not a tie's half.
    # One zero of x's shape serves the compare and the select (three nodes, no broadcast).
    zero = const(0, tuple(x._node.shape), x._node.dtype)
    return where(x <= zero, zero, x)


def relu6(x, inplace: bool = False):
    return hardtanh(x, 0.0, 6.0)


def leaky_relu(x, negative_slope: float = 0.01, inplace: bool = False):
    x = _float(x)
    if inplace:
        return x._inplace("leaky_relu_", leaky_relu, negative_slope)
    return where(x > 0, x, x * negative_slope)


@_opmath
def elu(x, alpha: float = 1.0, inplace: bool = False):
    x = _float(x)
    if inplace:
        return x._inplace("elu_", elu, alpha)
    return where(x > 0, x, expm1(_nonpositive(x)) * alpha)


def _nonpositive(x):
    """min(x, 0) with the whole gradient at 0 on x (the negative branch's slope, as PyTorch)."""
    return where(x > 0, const(0.0, (), x.dtype), x)


@_opmath
def selu(x, inplace: bool = False):
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return elu(x, alpha) * scale


@_opmath
def celu(x, alpha: float = 1.0, inplace: bool = False):
    x = _float(x)
    return where(x > 0, x, expm1(_nonpositive(x) / alpha) * alpha)


def _gelu_tanh_parts(x):
    """GELU's tanh form in primitives: (the output, x * x, tanh(inner) + 1)."""
    x2 = x * x
    t1 = tanh((x + x2 * x * 0.044715) * math.sqrt(2.0 / math.pi)) + 1.0
    return x * 0.5 * t1, x2, t1


class _GeluTanh(Function):
    """GELU's tanh form with its derivative written out: nine elementwise steps in the backward instead of
    the chain rule through every product of the forward (about twenty), keeping x * x and tanh + 1 from the
    forward. For higher-order gradients (``create_graph=True``) the backward is the primitives' own."""

    @staticmethod
    def forward(ctx, x):
        y, x2, t1 = _gelu_tanh_parts(x)
        ctx.save_for_backward(x, x2, t1)
        return y

    @staticmethod
    def backward(ctx, g):
        x, x2, t1 = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: the primitives' backward, itself differentiable.
            from loom.autograd.engine import grad
            return grad([_gelu_tanh_parts(x)[0]], [x], [g], create_graph=True)[0]
        # d/dx = t1 / 2 + x / 2 * (1 - tanh^2) * c * (1 + 3a x^2), with 1 - tanh^2 = (2 - t1) * t1.
        c = math.sqrt(2.0 / math.pi)
        slope = x * ((2.0 - t1) * t1) * (x2 * (3.0 * 0.044715 * c) + c)
        return g * 0.5 * (t1 + slope)


@_opmath
def gelu(x, approximate: str = "none"):
    x = _float(x)
    if approximate == "tanh":
        if x.requires_grad and is_grad_enabled():
            return _GeluTanh.apply(x)
        return _gelu_tanh_parts(x)[0]
    if approximate != "none":
        raise LoomValueError(f"loom.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * 0.5 * (erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


@_opmath
def silu(x, inplace: bool = False):
    x = _float(x)
    return x * sigmoid(x)


@_opmath
def mish(x, inplace: bool = False):
    x = _float(x)
    return x * tanh(softplus(x))


@_opmath
def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    x = _float(x)
    bx = x * beta if beta != 1.0 else x
    # log(1 + e^bx) = max(bx, 0) + log1p(e^-|bx|): stable for every bx. Both pieces are selections on
    # bx > 0, so at bx = 0 the gradient (and its derivative) is the smooth log1p(e^bx)'s, not a kink's.
    pos = bx > 0
    zero = const(0.0, (), bx.dtype)
    soft = where(pos, bx, zero) + log1p(exp(where(pos, -bx, bx)))
    soft = soft / beta if beta != 1.0 else soft
    return where(bx > threshold, x, soft)


@_opmath
def softsign(x):
    x = _float(x)
    return x / (abs(x) + 1.0)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    x = _float(x)
    return _clip_strict(x, x, min_val, max_val)


def _clip_strict(v, x, lo, hi):
    """v limited to [lo, hi] with a zero gradient at the ends too (PyTorch's hardtanh rule)."""
    v = where(v <= lo, const(lo, (), v.dtype), v)
    return where(v >= hi, const(hi, (), v.dtype), v)


@_opmath
def hardsigmoid(x, inplace: bool = False):
    x = _float(x)
    return _clip_strict(x / 6.0 + 0.5, x, 0.0, 1.0)


@_opmath
def hardswish(x, inplace: bool = False):
    x = _float(x)
    return x * hardsigmoid(x)


@_opmath
def tanhshrink(x):
    return x - tanh(x)


def pow(x, exponent):
    if not isinstance(x, Tensor):
        return binary("pow", x, exponent)
    return x ** exponent


def float_power(x, exponent):
    return _t(x).to(dt.float64) ** (exponent.to(dt.float64) if isinstance(exponent, Tensor) else exponent)


def maximum(a, b):
    return binary("maximum", a, b)


def minimum(a, b):
    return binary("minimum", a, b)


def fmax(a, b):
    """Elementwise maximum that ignores NaN (NaN only where both are NaN), as `torch.fmax`."""
    return _nan_ignoring(maximum, a, b)


def fmin(a, b):
    """Elementwise minimum that ignores NaN (NaN only where both are NaN), as `torch.fmin`."""
    return _nan_ignoring(minimum, a, b)


def _nan_ignoring(fn, a, b):
    a, b = _t(a), _t(b)
    out = fn(a, b)
    if not out.dtype.is_floating_point:
        return out
    a, b = a.to(out.dtype), b.to(out.dtype)
    return where(isnan(a), b, where(isnan(b), a, out))


def add(a, b, alpha=1):
    return binary("add", a, b if alpha == 1 else b * alpha)


def sub(a, b, alpha=1):
    return binary("sub", a, b if alpha == 1 else b * alpha)


subtract = sub


def mul(a, b):
    return binary("mul", a, b)


multiply = mul


def div(a, b, rounding_mode: str | None = None):
    if rounding_mode is None:
        return binary("div", a, b)
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        ta, tb = _t(a), b
        d = dt.result_type(ta, tb)
        if d.is_floating_point:
            return trunc(binary("div", ta, tb))
        # Integers: the floor quotient, moved one toward zero where the signs differ and it is inexact.
        q = floor_divide(ta, tb)
        inexact = (q * tb) != ta
        return where(((ta < 0) != (_t(tb) < 0)) & inexact, q + 1, q)
    raise LoomValueError(f"loom.div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


divide = div
true_divide = div


def floor_divide(a, b):
    return binary("floordiv", a, b)


def remainder(a, b):
    """Remainder with the sign of the divisor (Python's %), as `torch.remainder`."""
    return binary("mod", a, b)


def fmod(a, b):
    """Remainder with the sign of the dividend (C's fmod), as `torch.fmod`.

    Computed exactly as ``sign(a) * remainder(|a|, |b|)``: with both operands
    non-negative the two remainders agree.

    Examples
    --------
    >>> loom.fmod(loom.tensor([-7, 7]), 3).tolist()
    [-1, 1]
    """
    ta = _t(a)
    d = dt.result_type(ta, b)
    ta = ta.to(d)
    tb = b.to(d) if isinstance(b, Tensor) else const(b, (), d)
    neg_a = signbit(ta) if d.is_floating_point else ta < 0
    neg_b = tb < 0
    m = remainder(where(neg_a, -ta, ta), where(neg_b, -tb, tb))
    return where(neg_a, -m, m)


def atan2(a, b):
    d = dt.result_type(_t(a), b)
    d = d if d.is_floating_point else dt.get_default_dtype()
    return binary("atan2", _t(a).to(d), b.to(d) if isinstance(b, Tensor) else b)


arctan2 = atan2


@_opmath
def atan(x):
    x = _float(x)
    return atan2(x, as_tensor_like(1.0, x).expand(x.shape))


def _one_minus_square(x):
    return (1.0 - x) * (1.0 + x)  # Exact near |x| = 1, where 1 - x*x cancels.


@_opmath
def asin(x):
    x = _float(x)
    return atan2(x, sqrt(_one_minus_square(x)))


@_opmath
def acos(x):
    x = _float(x)
    return atan2(sqrt(_one_minus_square(x)), x)


@_opmath
def sinh(x):
    x = _float(x)
    small = abs(x) < 1.0
    xs = where(small, x, const(0.0, (), x.dtype))  # Safe input: expm1 overflows for |x| > 88.7 in float32.
    near = (expm1(xs) - expm1(-xs)) * 0.5          # No cancellation near 0.
    return where(small, near, _half_exp(x) - _half_exp(-x))


# ln 2 split into a head with few bits (x - head is exact for |x| >= 1) and exp(head - ln 2).
_LN2_HEAD = 0.693359375
_EXP_LN2_TAIL = math.exp(_LN2_HEAD - math.log(2.0))


def _half_exp(x):
    """exp(x) / 2 as exp(x - ln 2), finite wherever the result is (sinh/cosh of 89 in float32).

    The gradient g * exp(x - ln 2) overflows only where it must, unlike exp(x) * 0.5.
    """
    return exp(x - _LN2_HEAD) * _EXP_LN2_TAIL


@_opmath
def cosh(x):
    x = _float(x)
    return _half_exp(x) + _half_exp(-x)


@_opmath
def asinh(x):
    """Inverse hyperbolic sine, accurate for tiny and huge |x| (no overflow of x*x)."""
    x = _float(x)
    neg = signbit(x)
    a = where(neg, -x, x)
    small = a <= 1.0
    # Each branch gets inputs that are safe for it, so neither leaks inf/NaN into the gradient.
    s = where(small, a, const(1.0, (), a.dtype))
    b = where(small, const(1.0, (), a.dtype), a)
    near = log1p(s + s * s / (sqrt(s * s + 1.0) + 1.0))
    r = 1.0 / b  # (1/b)^2 rather than 1/b^2: no b*b overflow, and no 0 * inf in the gradient at b = inf.
    far = log(b) + log1p(sqrt(r * r + 1.0))
    v = where(small, near, far)
    return where(neg, -v, v)


@_opmath
def acosh(x):
    """Inverse hyperbolic cosine (NaN below 1), accurate near 1 and for huge x."""
    x = _float(x)
    near_one = x < 2.0
    # Each branch gets inputs that are safe for it, so neither leaks inf/NaN into the gradient.
    t = where(near_one, x, const(1.5, (), x.dtype)) - 1.0
    b = where(near_one, const(2.0, (), x.dtype), x)
    near = log1p(t + sqrt(t) * sqrt(t + 2.0))
    r = 1.0 / b  # As in asinh: no b*b overflow, and no 0 * inf in the gradient at b = inf.
    far = log(b) + log1p(sqrt(1.0 - r * r))
    return where(near_one, near, far)


@_opmath
def atanh(x):
    x = _float(x)
    return (log1p(x) - log1p(-x)) * 0.5


def clamp(x, min=None, max=None):
    """Limit values to [min, max]; either bound may be a number or a tensor.

    Examples
    --------
    >>> loom.clamp(loom.tensor([-2.0, 0.5, 3.0]), -1, 1).tolist()
    [-1.0, 0.5, 1.0]
    """
    x = _t(x)
    if min is None and max is None:
        raise LoomValueError("loom.clamp: at least one of min and max must be given")
    d = dt.result_type(x, *(b for b in (min, max) if b is not None))
    x = x.to(d)
    # Selections rather than maximum/minimum: x keeps the whole gradient at a bound (as
    # PyTorch), NaN passes through, and min > max gives max.
    if min is not None:
        lo = _as(min, d)
        x = where(x < lo, lo, x)
    if max is not None:
        hi = _as(max, d)
        x = where(x > hi, hi, x)
    return x


clip = clamp


def clamp_min(x, min):
    return clamp(x, min=min)


def clamp_max(x, max):
    return clamp(x, max=max)


def where(condition, x=None, y=None):
    """Elements of x where condition holds, else of y (both broadcast)."""
    if x is None and y is None:
        return _upper.nonzero(condition, as_tuple=True)
    if isinstance(condition, Tensor) and isinstance(x, Tensor) and isinstance(y, Tensor):
        cn, xn, yn = condition._node, x._node, y._node
        if cn.dtype is dt.bool_ and xn.dtype is yn.dtype and cn.shape == xn.shape == yn.shape:
            return apply("where", (condition, x, y), {})  # Nothing to convert or broadcast.
    c = _t(condition)
    if c.dtype is not dt.bool_:
        c = c.to(dt.bool_)
    d = dt.result_type(*(v for v in (x, y)))
    shape = broadcast_shapes(tuple(c.shape), tuple(getattr(x, "shape", ())), tuple(getattr(y, "shape", ())),
                             op="where")
    xs = broadcast_operand(_as(x, d), shape, "where")
    ys = broadcast_operand(_as(y, d), shape, "where")
    return apply("where", (broadcast_to(c, shape, "where"), xs, ys), {})


def _as(v, d) -> Tensor:
    """`v` (tensor or Python scalar) as a tensor of dtype `d`, a scalar converted once."""
    if isinstance(v, Tensor):
        return v.to(d)
    if not isinstance(v, (bool, int, float, np.generic)):
        return tensor(v).to(d)
    return const(v.item() if isinstance(v, np.generic) else v, (), d)


@_opmath
def lerp(start, end, weight):
    """start + weight * (end - start), evaluated as PyTorch does for accuracy near weight 1.

    Examples
    --------
    >>> loom.lerp(loom.tensor([0.0, 10.0]), loom.tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
    """
    start, end = _t(start), _t(end)
    if start.dtype is not end.dtype:
        raise DTypeError(f"loom.lerp: expected dtype {start.dtype.name} for `end` but got dtype "
                         f"{end.dtype.name}")
    _check_float("lerp", start)
    w = weight if isinstance(weight, Tensor) else const(weight, (), start.dtype)
    if w.dtype is not start.dtype:
        raise DTypeError(f"loom.lerp: expected dtype {start.dtype.name} for `weight` but got dtype "
                         f"{w.dtype.name}")
    diff = end - start
    return where(abs(w) < 0.5, start + w * diff, end + (w - 1.0) * diff)


@_opmath
def addcmul(x, t1, t2, value=1):
    return x + t1 * t2 * value


@_opmath
def addcdiv(x, t1, t2, value=1):
    if not _t(t1).dtype.is_floating_point and not _t(t2).dtype.is_floating_point:
        raise DTypeError(f"loom.addcdiv: integer division is not supported (got {_t(t1).dtype.name} and "
                         f"{_t(t2).dtype.name}); use a float tensor or div(rounding_mode=...)")
    return x + t1 / t2 * value


def _compare(op):
    def fn(a, b):
        return binary(op, a, b)
    fn.__name__ = op
    return fn


eq, ne, lt, le, gt, ge = (_compare(o) for o in ("eq", "ne", "lt", "le", "gt", "ge"))
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def equal(a, b) -> bool:
    """True when both tensors have one shape and equal elements."""
    a, b = _t(a), _t(b)
    return tuple(a.shape) == tuple(b.shape) and bool((a == b).all())


def _parts(x):
    """The real and imaginary parts of a complex tensor (value tests look at both)."""
    return apply("real", (x,), {}), apply("imag", (x,), {})


def isnan(x):
    x = _t(x)
    if x.dtype.is_complex:
        re, im = _parts(x)
        return isnan(re) | isnan(im)
    return x != x if x.dtype.is_floating_point else _false_like(x)


def isinf(x):
    x = _t(x)
    if x.dtype.is_complex:
        re, im = _parts(x)
        return isinf(re) | isinf(im)
    return abs(x) == float("inf") if x.dtype.is_floating_point else _false_like(x)


def isfinite(x):
    x = _t(x)
    if x.dtype.is_complex:
        re, im = _parts(x)
        return isfinite(re) & isfinite(im)
    return (abs(x) < float("inf")) if x.dtype.is_floating_point else ~_false_like(x)


def _no_complex_sign(op: str, x) -> None:
    if x.dtype.is_complex:
        raise DTypeError(f"loom.{op}: not supported for complex dtype {x.dtype.name} (a complex infinity has no sign)")


def isposinf(x):
    x = _t(x)
    _no_complex_sign("isposinf", x)
    return x == float("inf") if x.dtype.is_floating_point else _false_like(x)


def isneginf(x):
    x = _t(x)
    _no_complex_sign("isneginf", x)
    return x == float("-inf") if x.dtype.is_floating_point else _false_like(x)


def _false_like(x):
    from loom.tensor import full
    return full(x.shape, False, dtype=dt.bool_)


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    """Replace NaN, +inf and -inf by finite values (by default 0 and the dtype's extremes).

    Examples
    --------
    >>> loom.nan_to_num(loom.tensor([float("nan"), float("inf"), 1.0]), posinf=9.0).tolist()
    [0.0, 9.0, 1.0]
    """
    x = _t(x)
    if x.dtype.is_complex:  # Each part on its own, as PyTorch.
        re, im = _parts(x)
        return apply("complex", (nan_to_num(re, nan, posinf, neginf), nan_to_num(im, nan, posinf, neginf)), {})
    if not x.dtype.is_floating_point:
        return x
    # bfloat16's largest finite value: float32's exponent with 7 mantissa bits.
    big = 3.3895313892515355e38 if x.dtype is dt.bfloat16 else float(np.finfo(x.dtype.np).max)
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    x = where(isnan(x), _as(nan, x.dtype), x)
    x = where(isposinf(x), _as(posinf, x.dtype), x)
    return where(isneginf(x), _as(neginf, x.dtype), x)


def logical_not(x):
    x = _t(x)
    return ~(x.to(dt.bool_))


def _logical(op):
    def fn(a, b):
        return binary(op, _t(a).to(dt.bool_), _t(b).to(dt.bool_))
    return fn


logical_and, logical_or, logical_xor = _logical("and"), _logical("or"), _logical("xor")


def bitwise_not(x):
    return ~_t(x)


def bitwise_and(a, b):
    return binary("and", a, b)


def bitwise_or(a, b):
    return binary("or", a, b)


def bitwise_xor(a, b):
    return binary("xor", a, b)


@_opmath
def xlogy(x, y):
    """x * log(y), defined as 0 where x == 0 (unless y is NaN), as `torch.special.xlogy`."""
    d = dt.result_type(_t(x), y)
    d = d if d.is_floating_point else dt.get_default_dtype()
    x, y = _as(x, d), _as(y, d)
    zero = const(0.0, (), d)
    return where(isnan(y), y, where(x == 0, zero, x * log(y)))


@_opmath
def hypot(a, b):
    """sqrt(a**2 + b**2) for floating point tensors, without overflow or underflow in the squares.

    Examples
    --------
    >>> f"{loom.hypot(loom.tensor([3e19]), loom.tensor([4e19])).item():.4g}"
    '5e+19'
    """
    a, b = _t(a), _t(b)
    d = dt.result_type(a, b)
    if not d.is_floating_point:
        raise DTypeError(f"loom.hypot: expected floating point tensors, got {a.dtype.name} and {b.dtype.name}")
    a, b = a.to(d), b.to(d)
    # Scaled by s = max(|a|, |b|) (detached: s * sqrt((a/s)^2 + (b/s)^2) is exact for any constant s), so
    # the squares neither overflow (3e19 in float32) nor underflow (1e-30). The gradient is a / hypot,
    # NaN at (0, 0) as PyTorch's.
    s = scale_of(maximum(abs(a), abs(b)))
    x, y = a / s, b / s
    h = sqrt(x * x + y * y) * s
    return where(isinf(a) | isinf(b), const(math.inf, (), d), h)  # An infinity wins over NaN, as in C.


def scale_of(m: Tensor) -> Tensor:
    """A detached scale for the magnitudes `m`: m itself, at least the smallest normal number, and 1
    where m is inf or NaN (those pass through unscaled). Dividing by it keeps squares and powers in
    range; the floor keeps the gradient's g * s / s from underflowing for subnormal inputs."""
    m = m.detach()
    # The smallest normal number; bfloat16 (stored as uint16 in NumPy) has float32's exponent range.
    tiny = 2.0 ** -126 if m.dtype is dt.bfloat16 else float(np.finfo(m.dtype.np).tiny)
    tiny = const(tiny, (), m.dtype)
    return where(m < math.inf, maximum(m, tiny), const(1.0, (), m.dtype))


@_opmath
def deg2rad(x):
    return _float(x) * (math.pi / 180.0)


@_opmath
def rad2deg(x):
    return _float(x) * (180.0 / math.pi)


@_opmath
def sinc(x):
    x = _float(x)
    px = x * math.pi
    return where(x == 0, 1.0, sin(px) / where(x == 0, 1.0, px))


def heaviside(x, values):
    """0 where x < 0, `values` where x == 0, 1 where x > 0."""
    x, values = _t(x), _t(values)
    if x.dtype is not values.dtype:
        raise DTypeError(f"loom.heaviside: input and values must have one dtype, got {x.dtype.name} and "
                         f"{values.dtype.name}")
    return where(x == 0, values, (x > 0).to(x.dtype))


def copysign(a, b):
    """|a| with the sign of b (including the sign of -0.0); floats, or the default float for ints."""
    d = dt.result_type(_t(a), b)
    d = d if d.is_floating_point else dt.get_default_dtype()
    a = _as(a, d)
    mag = abs(a)
    if isinstance(b, Tensor):
        neg_b = signbit(b)
        if b.dtype.is_floating_point:
            mag = mag + sign(b) * 0.0  # Keeps b in the graph with the zero gradient PyTorch reports.
    else:
        neg_b = const(math.copysign(1.0, b) < 0, (), dt.bool_)
    return where(neg_b, -mag, mag)


def signbit(x):
    """True where the sign bit is set: negative numbers and -0.0 (NaN reads as positive)."""
    x = _t(x)
    if not x.dtype.is_floating_point:
        return x < 0 if x.dtype.is_signed else _false_like(x)
    return (x < 0) | ((x == 0) & (1.0 / x < 0))


@_opmath
def logaddexp(a, b):
    """log(exp(a) + exp(b)) without overflow, as `torch.logaddexp`.

    Examples
    --------
    >>> round(loom.logaddexp(loom.tensor(1000.0), loom.tensor(1000.0)).item(), 3)
    1000.693
    """
    a, b = _float_pair("logaddexp", a, b)
    return _log_add(a, b, exp, 1.0)


@_opmath
def logaddexp2(a, b):
    """log2(2**a + 2**b) without overflow, as `torch.logaddexp2`."""
    a, b = _float_pair("logaddexp2", a, b)
    return _log_add(a, b, exp2, 1.0 / math.log(2.0))


def _float_pair(op, a, b):
    d = dt.result_type(_t(a), b)
    if not d.is_floating_point:
        raise DTypeError(f"loom.{op}: expected floating point inputs, got {_t(a).dtype.name} and "
                         f"{b.dtype.name if isinstance(b, Tensor) else type(b).__name__}")
    return _as(a, d), _as(b, d)


def _log_add(a, b, expf, scale):
    """max(a, b) + scale * log1p(expf(-|a - b|)), the stable log-add-exp in base e or 2.

    Both the max and -|a - b| are selections on a > b, so where a == b the
    gradient (and its derivative) is the smooth branch's, not a kink's. Equal
    infinities take a - b as 0: the value is that infinity and the gradient the
    limit 1/2 each, where PyTorch gives NaN.
    """
    both_inf = (a == b) & (abs(a) == math.inf)
    d = where(both_inf, const(0.0, (), a.dtype), a - b)
    pos = d > 0
    return where(pos, a, b) + log1p(expf(where(pos, -d, d))) * scale


@_opmath
def logit(x, eps: float | None = None):
    """log(x / (1 - x)); with `eps`, x is first clamped to [eps, 1 - eps]."""
    x = _float(x)
    if eps is not None:
        x = clamp(x, eps, 1.0 - eps)
    return log(x) - log1p(-x)  # Gradient 1/x + 1/(1-x): +inf (not NaN) at 0 and 1, as PyTorch's.


def sgn(x):
    """sign(x) for real tensors; z / |z| (0 at 0) for complex ones, as `torch.sgn`.

    Examples
    --------
    >>> loom.sgn(loom.tensor([3 + 4j, 0j])).tolist()
    [(0.6000000238418579+0.800000011920929j), 0j]
    """
    x = _t(x)
    if x.dtype.is_complex:
        r = abs(x)
        return x / where(r == 0.0, 1.0, r)
    return sign(x)


def positive(x):
    x = _t(x)
    _no_bool("positive", x)
    return x


def fix(x):
    """Round toward zero (an alias of trunc)."""
    return trunc(x)


def ldexp(x, other):
    """x * 2**other, as `torch.ldexp`."""
    return mul(x, exp2(other if isinstance(other, Tensor) else tensor(other)))


def _check_float(op, x):
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point tensor, got {x.dtype.name}")


METHODS = [
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "erf", "erfc", "reciprocal",
    "log2", "log10", "exp2", "floor", "ceil", "trunc", "round", "frac", "abs", "sign", "neg", "negative",
    "absolute", "square", "sigmoid", "relu", "pow", "float_power", "maximum", "minimum", "fmax", "fmin",
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder",
    "fmod", "atan2", "arctan2", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "clamp",
    "clip", "clamp_min", "clamp_max", "lerp", "addcmul", "addcdiv", "eq", "ne", "lt", "le", "gt", "ge",
    "greater", "greater_equal", "less", "less_equal", "not_equal", "equal", "isnan", "isinf", "isfinite",
    "isposinf", "isneginf", "nan_to_num", "logical_not", "logical_and", "logical_or", "logical_xor",
    "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "xlogy", "hypot", "deg2rad", "rad2deg",
    "sinc", "heaviside", "copysign", "signbit", "logaddexp", "logaddexp2", "logit", "sgn", "positive", "fix",
    "ldexp",
]
# Methods whose in-place twin `name_` PyTorch users expect.
INPLACE = [
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "reciprocal", "floor",
    "ceil", "trunc", "round", "abs", "sign", "neg", "square", "sigmoid", "relu", "pow", "add", "sub",
    "mul", "div", "floor_divide", "remainder", "fmod", "clamp", "clip", "clamp_min", "clamp_max", "lerp",
    "addcmul", "addcdiv", "atan2", "erf", "frac", "logical_not", "nan_to_num", "copysign", "hypot", "xlogy",
    "logit", "sgn", "fix", "ldexp",
]
