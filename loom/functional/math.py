"""Elementwise ops: the primitives' public faces and their compositions."""
from __future__ import annotations

import math

from loom import dtypes as dt
from loom.errors import DTypeError
from loom.tensor import Tensor, apply, as_tensor_like, binary, broadcast_shapes, broadcast_to, tensor, unary


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


def rsqrt(x):
    return reciprocal(sqrt(x))


def log2(x):
    return log(x) * (1.0 / math.log(2.0))


def log10(x):
    return log(x) * (1.0 / math.log(10.0))


def exp2(x):
    return exp(_float(x) * math.log(2.0))


def erfc(x):
    return 1.0 - erf(x)


def _float(x) -> Tensor:
    x = _t(x)
    return x if x.dtype.is_floating_point else x.to(dt.get_default_dtype())


def _int_passthrough(op: str, x):
    x = _t(x)
    return x if x.dtype.category < 2 else apply(op, (x,), {})


def floor(x): return _int_passthrough("floor", x)
def ceil(x): return _int_passthrough("ceil", x)
def trunc(x): return _int_passthrough("trunc", x)


def round(x, decimals: int = 0):
    x = _t(x)
    if x.dtype.category < 2:
        return x
    if decimals == 0:
        return apply("round", (x,), {})
    scale = 10.0 ** decimals
    return apply("round", (x * scale,), {}) / scale


def frac(x):
    return x - trunc(x)


def abs(x):
    x = _t(x)
    return x if x.dtype is dt.bool_ else apply("abs", (x,), {})


def sign(x):
    x = _t(x)
    return x if x.dtype is dt.bool_ else apply("sign", (x,), {})


def neg(x):
    return -_t(x)


negative = neg
absolute = abs


def square(x):
    return _t(x) * x


def sigmoid(x):
    x = _float(x)
    # Written through tanh so that large |x| never overflows the exp.
    return (tanh(x * 0.5) + 1.0) * 0.5


def logsigmoid(x):
    x = _float(x)
    return -softplus(-x)


def relu(x, inplace: bool = False):
    x = _t(x)
    if inplace:
        return x._inplace("relu_", relu)
    return maximum(x, as_tensor_like(0, x).to(x.dtype)) if x.dtype is not dt.bool_ else x


def relu6(x, inplace: bool = False):
    return hardtanh(x, 0.0, 6.0)


def leaky_relu(x, negative_slope: float = 0.01, inplace: bool = False):
    x = _float(x)
    if inplace:
        return x._inplace("leaky_relu_", leaky_relu, negative_slope)
    return where(x > 0, x, x * negative_slope)


def elu(x, alpha: float = 1.0, inplace: bool = False):
    x = _float(x)
    if inplace:
        return x._inplace("elu_", elu, alpha)
    return where(x > 0, x, expm1(minimum(x, as_tensor_like(0.0, x))) * alpha)


def selu(x, inplace: bool = False):
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return elu(x, alpha) * scale


def celu(x, alpha: float = 1.0, inplace: bool = False):
    x = _float(x)
    return where(x > 0, x, expm1(minimum(x, as_tensor_like(0.0, x)) / alpha) * alpha)


def gelu(x, approximate: str = "none"):
    x = _float(x)
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (tanh(inner) + 1.0)
    if approximate != "none":
        raise ValueError(f"loom.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * 0.5 * (erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def silu(x, inplace: bool = False):
    x = _float(x)
    return x * sigmoid(x)


def mish(x, inplace: bool = False):
    x = _float(x)
    return x * tanh(softplus(x))


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    x = _float(x)
    bx = x * beta if beta != 1.0 else x
    # log(1 + e^bx) = max(bx, 0) + log1p(e^-|bx|): stable for every bx.
    soft = maximum(bx, as_tensor_like(0.0, bx)) + log1p(exp(-abs(bx)))
    soft = soft / beta if beta != 1.0 else soft
    return where(bx > threshold, x, soft)


def softsign(x):
    x = _float(x)
    return x / (abs(x) + 1.0)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    return clamp(_float(x), min_val, max_val)


def hardsigmoid(x, inplace: bool = False):
    return clamp(_float(x) / 6.0 + 0.5, 0.0, 1.0)


def hardswish(x, inplace: bool = False):
    x = _float(x)
    return x * hardsigmoid(x)


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


fmax = maximum
fmin = minimum


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
        q = binary("div", ta, tb)
        return trunc(q).to(d)
    raise ValueError(f"loom.div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


divide = div
true_divide = div


def floor_divide(a, b):
    return binary("floordiv", a, b)


def remainder(a, b):
    return binary("mod", a, b)


def fmod(a, b):
    a = _t(a)
    return a - trunc(div(a, b, rounding_mode=None if a.dtype.is_floating_point else "trunc") if
                     a.dtype.is_floating_point else div(a, b, rounding_mode="trunc")) * b


def atan2(a, b):
    a, b = _float(a), b if not isinstance(b, Tensor) else _float(b)
    return binary("atan2", a, b)


arctan2 = atan2


def atan(x):
    x = _float(x)
    return atan2(x, as_tensor_like(1.0, x).expand(x.shape))


def asin(x):
    x = _float(x)
    return atan2(x, sqrt(1.0 - x * x))


def acos(x):
    x = _float(x)
    return atan2(sqrt(1.0 - x * x), x)


def sinh(x):
    x = _float(x)
    return (expm1(x) - expm1(-x)) * 0.5


def cosh(x):
    x = _float(x)
    return (exp(x) + exp(-x)) * 0.5


def asinh(x):
    x = _float(x)
    return sign(x) * log(abs(x) + sqrt(x * x + 1.0))


def acosh(x):
    x = _float(x)
    return log(x + sqrt(x * x - 1.0))


def atanh(x):
    x = _float(x)
    return (log1p(x) - log1p(-x)) * 0.5


def clamp(x, min=None, max=None):
    """Limit values to [min, max]; either bound may be a number or a tensor."""
    x = _t(x)
    if min is None and max is None:
        raise ValueError("loom.clamp: at least one of min and max must be given")
    if min is not None:
        x = maximum(x, min if isinstance(min, Tensor) else as_tensor_like(min, x).to(
            dt.result_type(x, min)))
    if max is not None:
        x = minimum(x, max if isinstance(max, Tensor) else as_tensor_like(max, x).to(
            dt.result_type(x, max)))
    return x


clip = clamp


def clamp_min(x, min):
    return clamp(x, min=min)


def clamp_max(x, max):
    return clamp(x, max=max)


def where(condition, x=None, y=None):
    """Elements of x where condition holds, else of y (both broadcast)."""
    if x is None and y is None:
        from loom.functional.indexing import nonzero
        return nonzero(condition, as_tuple=True)
    c = _t(condition)
    if c.dtype is not dt.bool_:
        c = c.to(dt.bool_)
    d = dt.result_type(*(v for v in (x, y)))
    shape = broadcast_shapes(tuple(c.shape), tuple(getattr(x, "shape", ())), tuple(getattr(y, "shape", ())),
                             op="where")
    xs = broadcast_to(as_tensor_like(x).to(d), shape, "where")
    ys = broadcast_to(as_tensor_like(y).to(d), shape, "where")
    return apply("where", (broadcast_to(c, shape, "where"), xs, ys), {})


def lerp(start, end, weight):
    return start + (end - start) * weight


def addcmul(x, t1, t2, value=1):
    return x + t1 * t2 * value


def addcdiv(x, t1, t2, value=1):
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


def isnan(x):
    x = _t(x)
    return x != x if x.dtype.is_floating_point else _false_like(x)


def isinf(x):
    x = _t(x)
    return abs(x) == float("inf") if x.dtype.is_floating_point else _false_like(x)


def isfinite(x):
    x = _t(x)
    return (abs(x) < float("inf")) if x.dtype.is_floating_point else ~_false_like(x)


def isposinf(x):
    x = _t(x)
    return x == float("inf") if x.dtype.is_floating_point else _false_like(x)


def isneginf(x):
    x = _t(x)
    return x == float("-inf") if x.dtype.is_floating_point else _false_like(x)


def _false_like(x):
    from loom.tensor import full
    return full(x.shape, False, dtype=dt.bool_)


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    x = _t(x)
    if not x.dtype.is_floating_point:
        return x
    import numpy as np
    info = np.finfo(np.float32 if x.dtype is dt.bfloat16 else x.dtype.np)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    x = where(isnan(x), nan, x)
    x = where(isposinf(x), posinf, x)
    return where(isneginf(x), neginf, x)


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


def xlogy(x, y):
    x = _float(x)
    return where(x == 0, 0.0, x * log(y))


def hypot(a, b):
    return sqrt(a * a + b * b)


def deg2rad(x):
    return _float(x) * (math.pi / 180.0)


def rad2deg(x):
    return _float(x) * (180.0 / math.pi)


def sinc(x):
    x = _float(x)
    px = x * math.pi
    return where(x == 0, 1.0, sin(px) / where(x == 0, 1.0, px))


def heaviside(x, values):
    return where(x == 0, values, (x > 0).to(x.dtype))


def copysign(a, b):
    a = _float(a)
    neg_b = (b < 0) | ((b == 0) & (1.0 / _float(b) < 0)) if isinstance(b, Tensor) else (b < 0 or math.copysign(1, b) < 0)
    return where(neg_b, -abs(a), abs(a))


def signbit(x):
    x = _float(x)
    return (x < 0) | ((x == 0) & (1.0 / x < 0))


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
    "sinc", "heaviside", "copysign", "signbit",
]
# Methods whose in-place twin `name_` PyTorch users expect.
INPLACE = [
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "reciprocal", "floor",
    "ceil", "trunc", "round", "abs", "sign", "neg", "square", "sigmoid", "relu", "pow", "add", "sub",
    "mul", "div", "floor_divide", "remainder", "fmod", "clamp", "clip", "clamp_min", "clamp_max", "lerp",
    "addcmul", "addcdiv", "atan2", "erf", "frac", "logical_not", "nan_to_num", "copysign", "hypot", "xlogy",
]
