"""The primitive set: every loom op is one of these, or a composition of them.

Each primitive is defined once, with all it needs beside it: an attribute rule
(`check_attrs`), a shape/dtype rule (`infer`), a NumPy reference
implementation (`impl`) and a backward rule (`vjp`) written in primitives, so
gradients of gradients work to any order.

`infer` below runs a primitive's attribute rule before its shape rule, and it
is the one gate every node passes: the Tensor layer, `Graph.add_node`,
`Graph.verify`, `from_json` and the compiler's passes all accept exactly the
nodes it accepts, so a bad attribute never reaches a kernel.

Elementwise primitives take inputs of one shape and one dtype; broadcasting
and type promotion happen above, in the Tensor layer, as explicit `expand` and
`cast` nodes. Backward rules receive Tensors and return Tensors (or None for an
input that gets no gradient).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import (DTypeError, GraphError, LinAlgError, LoomIndexError, LoomTypeError, LoomValueError,
                         LoomZeroDivisionError, ShapeError, fmt_shape)


@dataclass(frozen=True)
class Primitive:
    name: str
    kind: str  # source | unary | binary | compare | ternary | reduce | movement | contraction | sort | check | index
    arity: int
    infer: Callable[[list, dict], tuple[tuple[int, ...], dt.DType]]
    impl: Callable[..., np.ndarray]
    vjp: Callable[..., tuple] | None = None
    # check_attrs(inputs, attrs) raises a loom error naming the attr, its value and what was
    # expected; None: the primitive declares no rule (its attrs go unchecked).
    check_attrs: Callable[[list, dict], None] | None = None


PRIMITIVES: dict[str, Primitive] = {}

# Backward rules build graph through the Tensor layer, which installs itself here.
_APPLY: Callable[..., Any] | None = None


def P(op: str, *inputs, **attrs):
    """Apply primitive `op` to Tensors (used by backward rules)."""
    assert _APPLY is not None, "loom.tensor installs the primitive applier on import"
    return _APPLY(op, inputs, attrs)


def _zeros(like, value=0):
    return P("const", value=value, shape=tuple(like.shape), dtype=like.dtype)


def register(name, kind, arity, infer, impl, vjp=None, check_attrs=None) -> Primitive:
    p = Primitive(name, kind, arity, infer, impl, vjp, check_attrs)
    PRIMITIVES[name] = p
    return p


def infer(op: str, inputs: list, attrs: dict) -> tuple[tuple[int, ...], dt.DType]:
    """Shape and dtype of `op` applied to `inputs` (anything with .shape/.dtype)."""
    prim = PRIMITIVES.get(op)
    if prim is None:
        raise GraphError(f"loom: unknown primitive {op!r}; known: {sorted(PRIMITIVES)}")
    if prim.arity >= 0 and len(inputs) != prim.arity:
        raise GraphError(f"loom.{op}: expected {prim.arity} inputs, got {len(inputs)}")
    if prim.check_attrs is not None:
        prim.check_attrs(inputs, attrs)
    return prim.infer(inputs, attrs)


def _desc(inputs) -> str:
    return ", ".join(f"{i.dtype.name}{fmt_shape(i.shape)}" for i in inputs)


# ---------------------------------------------------------------- attribute rules
# Building blocks of the per-primitive `check_attrs` rules. Integers may be Python or NumPy
# ints, never bools or floats; sequences may be tuples or lists (a Graph stores tuples).

def _bad_attr(op, name, value, expected, cls=LoomValueError) -> Exception:
    return cls(f"loom.{op}: attr {name!r} is {value!r}; expected {expected}")


def _is_int(v) -> bool:
    return type(v) is int or isinstance(v, np.integer)


def _is_number(v) -> bool:
    return type(v) in (int, float, bool) or isinstance(v, (np.integer, np.floating, np.bool_))


def _attr_names(op, attrs, required, optional=()) -> None:
    """The attrs are exactly `required` plus any of `optional`."""
    for k in required:
        if k not in attrs:
            raise LoomValueError(f"loom.{op}: needs attr {k!r}, which is missing; {op} takes attrs "
                                 f"{list(required) + [f'{o} (optional)' for o in optional] or 'none'}")
    if len(attrs) > len(required):
        for key in attrs:
            if key not in required and key not in optional:
                extra = sorted(str(k) for k in attrs if k not in required and k not in optional)
                raise LoomValueError(f"loom.{op}: unknown attr(s) {extra}; {op} takes attrs "
                                     f"{list(required) + [f'{o} (optional)' for o in optional] or 'none'}")


def _no_attrs(op):
    def rule(inputs, attrs):
        if attrs:
            _attr_names(op, attrs, ())
    return rule


def _int_attr(op, name, v, lo, hi, what="") -> None:
    """An int in [lo, hi)."""
    if type(v) is not int and not isinstance(v, np.integer):
        raise _bad_attr(op, name, v, f"an int{what}", LoomTypeError)
    if not lo <= v < hi:
        raise _bad_attr(op, name, v, f"an int in [{lo}, {hi}){what}", LoomIndexError)


def _bool_attr(op, name, v) -> None:
    if type(v) is not bool and not isinstance(v, np.bool_):
        raise _bad_attr(op, name, v, "a bool", LoomTypeError)


def _number_attr(op, name, v, finite=False) -> None:
    if not _is_number(v):
        raise _bad_attr(op, name, v, "a number (bool, int or float)", LoomTypeError)
    if finite and not math.isfinite(v):
        raise _bad_attr(op, name, v, "a finite number")


def _dtype_attr(op, name, v) -> None:
    if not isinstance(v, dt.DType):
        raise _bad_attr(op, name, v, f"a loom dtype (one of {[d.name for d in dt.ALL]})", DTypeError)


def _ints_attr(op, name, v, length=None, what="a tuple of ints") -> None:
    # Plain loops, not all(<generator>): these run for every node the Tensor layer creates.
    if type(v) is not tuple and type(v) is not list:
        raise _bad_attr(op, name, v, what, LoomTypeError)
    for s in v:
        if type(s) is not int and not isinstance(s, np.integer):
            raise _bad_attr(op, name, v, what, LoomTypeError)
    if length is not None and len(v) != length:
        raise _bad_attr(op, name, v, f"{length} ints, one per dim of the input", ShapeError)


def _shape_attr(op, name, v, length=None) -> None:
    if type(v) is not tuple and type(v) is not list:
        raise _bad_attr(op, name, v, "a tuple of non-negative ints", LoomTypeError)
    for s in v:  # One pass: type, then sign.
        if type(s) is not int and not isinstance(s, np.integer):
            raise _bad_attr(op, name, v, "a tuple of non-negative ints", LoomTypeError)
        if s < 0:
            raise _bad_attr(op, name, v, "a tuple of non-negative ints", ShapeError)
    if length is not None and len(v) != length:
        raise _bad_attr(op, name, v, f"{length} ints, one per dim of the input", ShapeError)


def _axes_attr(op, name, v, shape, scalar_axis=False) -> None:
    """Distinct axes in [0, ndim); `scalar_axis`: a 0-d input takes axis 0."""
    _ints_attr(op, name, v, what="a tuple of ints (axes)")
    ndim = len(shape) or (1 if scalar_axis else 0)
    for ax in v:
        if not 0 <= ax < ndim:
            raise LoomIndexError(f"loom.{op}: attr {name!r} is {v!r}: axis {ax} out of range for shape "
                                 f"{fmt_shape(shape)}; expected axes in [0, {ndim})")
    if len(v) > 1 and len(set(v)) != len(v):
        raise _bad_attr(op, name, v, "distinct axes (each at most once)")


# ---------------------------------------------------------------- sources

def _infer_source(inputs, attrs):
    return tuple(attrs["shape"]), dt.check_computable(dt.as_dtype(attrs["dtype"]), "tensor")


def _splat(scalar: np.ndarray, shape) -> np.ndarray:
    """A read-only view repeating a 0-d array over `shape` (np.broadcast_to's result, a few times faster)."""
    shape = tuple(shape)
    out = np.ndarray(shape, scalar.dtype, scalar, 0, (0,) * len(shape))
    out.flags.writeable = False
    return out


def _const_impl(attrs):
    d = dt.as_dtype(attrs["dtype"])
    value = attrs["value"]
    if d is dt.bfloat16:
        return _splat(dt.f32_to_bf16(np.array(value, np.float32)), attrs["shape"])
    if d.category == 1 and isinstance(value, (int, np.integer)):
        # Out-of-range integers wrap around, as PyTorch's scalar conversion does (uint8 + 300).
        bits = 8 * d.itemsize
        value = int(value) % (1 << bits)
        if d.is_signed and value >= 1 << (bits - 1):
            value -= 1 << bits
    return _splat(np.array(value, dtype=d.np), attrs["shape"])


def _arange_impl(attrs):
    d = dt.as_dtype(attrs["dtype"])
    n = attrs["shape"][0]
    out = attrs["start"] + attrs["step"] * np.arange(n, dtype=np.float64 if d.is_floating_point else np.int64)
    if d is dt.bfloat16:
        return dt.f32_to_bf16(out.astype(np.float32))
    return out.astype(d.np)


_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a counter-based hash, so random values depend only on (key, index)."""
    z = x + _GOLD
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _rand_impl(attrs):
    d = dt.as_dtype(attrs["dtype"])
    n = math.prod(attrs["shape"])
    key = np.uint64(attrs["seed"])
    with np.errstate(over="ignore"):
        bits = mix64(np.arange(n, dtype=np.uint64) * _GOLD ^ mix64(np.array(key, np.uint64)))
    # As many random bits as the type's significand holds, so every value is exact and < 1.
    if d is dt.float64:
        out = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    elif d is dt.float32:
        out = (bits >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / (1 << 24))
    elif d is dt.float16:
        out = ((bits >> np.uint64(53)).astype(np.float32) * np.float32(1.0 / (1 << 11))).astype(np.float16)
    else:
        return dt.f32_to_bf16((bits >> np.uint64(56)).astype(np.float32) * np.float32(1.0 / (1 << 8))).reshape(
            attrs["shape"])
    return out.reshape(attrs["shape"])


def _buffer_attrs(inputs, attrs):
    # A Graph's buffer nodes record their shape and dtype; a Tensor's realised nodes carry none.
    if attrs:
        _attr_names("buffer", attrs, (), ("shape", "dtype"))
        if "shape" in attrs:
            _shape_attr("buffer", "shape", attrs["shape"])
        if "dtype" in attrs:
            _dtype_attr("buffer", "dtype", attrs["dtype"])


def _const_attrs(inputs, attrs):
    _attr_names("const", attrs, ("value", "shape", "dtype"))
    _shape_attr("const", "shape", attrs["shape"])
    d, value = attrs["dtype"], attrs["value"]
    _dtype_attr("const", "dtype", d)
    _number_attr("const", "value", value)
    if d.category < 2 and not math.isfinite(value):
        raise _bad_attr("const", "value", value, f"a finite value for a {d.name} constant")


def _arange_attrs(inputs, attrs):
    _attr_names("arange", attrs, ("start", "step", "shape", "dtype"))
    _shape_attr("arange", "shape", attrs["shape"], 1)
    _dtype_attr("arange", "dtype", attrs["dtype"])
    _number_attr("arange", "start", attrs["start"], finite=True)
    _number_attr("arange", "step", attrs["step"], finite=True)


def _rand_attrs(inputs, attrs):
    _attr_names("rand", attrs, ("seed", "shape", "dtype"))
    _shape_attr("rand", "shape", attrs["shape"])
    _int_attr("rand", "seed", attrs["seed"], 0, 1 << 64, " (a 64-bit key)")
    d = attrs["dtype"]
    _dtype_attr("rand", "dtype", d)
    if not d.is_floating_point:
        raise _bad_attr("rand", "dtype", d, "a floating point dtype (rand samples floats)", DTypeError)


register("buffer", "source", 0, _infer_source, None, check_attrs=_buffer_attrs)
register("const", "source", 0, _infer_source, lambda attrs: _const_impl(attrs), check_attrs=_const_attrs)
register("arange", "source", 0, _infer_source, lambda attrs: _arange_impl(attrs), check_attrs=_arange_attrs)
register("rand", "source", 0, _infer_source, lambda attrs: _rand_impl(attrs), check_attrs=_rand_attrs)


# ---------------------------------------------------------------- elementwise

def _same_shape(op, inputs):
    s = inputs[0].shape
    for i in inputs[1:]:
        if tuple(i.shape) != tuple(s):
            raise ShapeError(f"loom.{op}: elementwise inputs must have equal shapes "
                             f"(broadcast happens above the IR), got {_desc(inputs)}")
    return tuple(s)


def _same_dtype(op, inputs):
    d = inputs[0].dtype
    for i in inputs[1:]:
        if i.dtype is not d:
            raise DTypeError(f"loom.{op}: elementwise inputs must share one dtype, got {_desc(inputs)}")
    return d


def _float_only(op, d):
    if not d.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point input, got {d.name}")


# Elementwise primitives defined on complex inputs (NumPy's complex functions are PyTorch's);
# every other elementwise primitive refuses complex dtypes by name.
COMPLEX_ELEMENTWISE = frozenset({"neg", "recip", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh",
                                 "abs", "add", "sub", "mul", "div", "pow", "eq", "ne"})


def no_complex(op, d, inputs=None):
    """Refuse a complex dtype for `op` (ordering and rounding have no meaning on complex numbers)."""
    if d.category == 3:
        raise DTypeError(f"loom.{op}: not supported for complex dtype {d.name}"
                         + (f" (got {_desc(inputs)})" if inputs else ""))


def _infer_unary(op, float_only=False, no_bool=False):
    def rule(inputs, attrs):
        d = inputs[0].dtype
        if d.category == 3:
            if op not in COMPLEX_ELEMENTWISE:
                no_complex(op, d)
            return tuple(inputs[0].shape), (dt.to_real(d) if op == "abs" else d)
        if float_only:
            _float_only(op, d)
        if no_bool and d is dt.bool_:
            raise DTypeError(f"loom.{op}: not defined for bool inputs")
        return tuple(inputs[0].shape), d
    return rule


def _unary(name, fn, vjp=None, float_only=True, no_bool=False):
    register(name, "unary", 1, _infer_unary(name, float_only, no_bool), lambda x, attrs: fn(x), vjp,
             check_attrs=_no_attrs(name))


def _zero_grad(g, x, out, attrs):
    return (_zeros(x),)  # Piecewise constant: zero almost everywhere, as PyTorch reports it.


_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _np_erf(x):
    try:
        from scipy.special import erf  # Optional; exact to float64.
        return erf(x).astype(x.dtype)
    except ImportError:  # pragma: no cover - vectorised math.erf fallback
        return np.vectorize(math.erf, otypes=[x.dtype])(x)


_unary("neg", np.negative, lambda g, x, out, a: (-g,), float_only=False, no_bool=True)
_unary("recip", np.reciprocal, lambda g, x, out, a: (-g * out * out,))
_unary("sqrt", np.sqrt, lambda g, x, out, a: (g / (out * 2.0),))
_unary("exp", np.exp, lambda g, x, out, a: (g * out,))
_unary("log", np.log, lambda g, x, out, a: (g / x,))
_unary("log1p", np.log1p, lambda g, x, out, a: (g / (x + 1.0),))
_unary("expm1", np.expm1, lambda g, x, out, a: (g * (out + 1.0),))
_unary("sin", np.sin, lambda g, x, out, a: (g * x.cos(),))
_unary("cos", np.cos, lambda g, x, out, a: (-g * x.sin(),))
_unary("tan", np.tan, lambda g, x, out, a: (g * (out * out + 1.0),))
_unary("tanh", np.tanh, lambda g, x, out, a: (g * (1.0 - out * out),))
_unary("erf", _np_erf, lambda g, x, out, a: (g * (-(x * x)).exp() * _SQRT_PI,))


def _abs_vjp(g, x, out, a):
    if x.dtype.category == 3:  # d|z| = z/|z| (0 at z = 0, as PyTorch's sgn).
        return (x / P("where", out == 0.0, out + 1.0, out) * g,)
    return (g * x.sign(),)


_unary("abs", np.abs, _abs_vjp, float_only=False, no_bool=True)
def _np_sign(x):
    out = np.sign(x)
    return np.where(np.isnan(x), 0, out).astype(x.dtype) if x.dtype.kind == "f" else out  # sign(NaN) = 0.


_unary("sign", _np_sign, _zero_grad, float_only=False, no_bool=True)
_unary("floor", np.floor, _zero_grad, float_only=False)
_unary("ceil", np.ceil, _zero_grad, float_only=False)
_unary("round", np.round, _zero_grad, float_only=False)  # Half to even, as PyTorch.
_unary("trunc", np.trunc, _zero_grad, float_only=False)
register("not", "unary", 1, lambda ins, a: (tuple(ins[0].shape), ins[0].dtype),
         lambda x, attrs: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x), check_attrs=_no_attrs("not"))


def _infer_cast(inputs, attrs):
    return tuple(inputs[0].shape), dt.check_computable(dt.as_dtype(attrs["dtype"]), "to")


def _cast_vjp(g, x, out, attrs):
    if not x.dtype.is_differentiable:
        return (None,)
    if g.dtype.category == 3 and x.dtype.category != 3:
        g = P("real", g)  # Real to complex: the real input gets the gradient's real part.
    return (g.to(x.dtype),)


def _cast_attrs(inputs, attrs):
    _attr_names("cast", attrs, ("dtype",))
    _dtype_attr("cast", "dtype", attrs["dtype"])


register("cast", "unary", 1, _infer_cast, None, _cast_vjp,  # impl lives in the evaluator (bfloat16).
         check_attrs=_cast_attrs)


def _infer_binary(op, out_bool=False, no_bool=False, int_only=False):
    def rule(inputs, attrs):
        shape = _same_shape(op, inputs)
        d = _same_dtype(op, inputs)
        if no_bool and d is dt.bool_:
            raise DTypeError(f"loom.{op}: not defined for bool inputs, got {_desc(inputs)}")
        if d.category == 3 and op not in COMPLEX_ELEMENTWISE:
            no_complex(op, d, inputs)
        if int_only and d.category >= 2:
            raise DTypeError(f"loom.{op}: expected integer or bool inputs, got {_desc(inputs)}")
        return shape, (dt.bool_ if out_bool else d)
    return rule


def _binary(name, fn, vjp=None, kind="binary", **kw):
    register(name, kind, 2, _infer_binary(name, out_bool=(kind == "compare"), **kw),
             lambda x, y, attrs: fn(x, y), vjp, check_attrs=_no_attrs(name))


def _pow_vjp(g, x, y, out, a, needs=(True, True)):
    gx = g * y * x ** (y - 1.0) if needs[0] else None
    gy = None
    if needs[1]:
        gy = P("where", x == 0.0, _zeros(x), g * out * x.log())
    return gx, gy


def _max_vjp(g, x, y, out, a):
    half, zero = g * 0.5, _zeros(g)
    gx = P("where", x == y, half, P("where", x > y, g, zero))
    gy = P("where", x == y, half, P("where", x < y, g, zero))
    return gx, gy


def _min_vjp(g, x, y, out, a):
    half, zero = g * 0.5, _zeros(g)
    gx = P("where", x == y, half, P("where", x < y, g, zero))
    gy = P("where", x == y, half, P("where", x > y, g, zero))
    return gx, gy


def _int_divisor_check(op, y):
    if y.dtype.kind in "iub" and not np.all(y):
        raise LoomZeroDivisionError(f"loom.{op}: integer division by zero (the {y.dtype} divisor holds 0)")


def _np_div(x, y):
    if x.dtype.kind in "iub":
        _int_divisor_check("div", y)
        return np.floor_divide(x, y)  # Only reached through explicit integer division nodes.
    return np.true_divide(x, y)


def _np_floordiv(x, y):
    _int_divisor_check("floor_divide", y)
    return np.floor_divide(x, y)


def _np_mod(x, y):
    _int_divisor_check("remainder", y)
    if x.dtype.kind != "f":
        return np.mod(x, y)
    # PyTorch's rule: C fmod, moved by one divisor when a nonzero result has the wrong sign
    # (a zero result keeps the dividend's sign, unlike NumPy).
    r = np.fmod(x, y)
    return np.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


_binary("add", np.add, lambda g, x, y, out, a: (g, g))
_binary("sub", np.subtract, lambda g, x, y, out, a: (g, -g), no_bool=True)
_binary("mul", np.multiply, lambda g, x, y, out, a: (g * y, g * x))
_binary("div", _np_div, lambda g, x, y, out, a: (g / y, -g * out / y))
def _np_pow(x, y):
    if x.dtype.kind not in "iu":
        return np.power(x, y)
    # Integer powers wrap like C; a negative exponent gives 1/x truncated (0 unless x is +-1).
    out = np.power(x, np.maximum(y, 0).astype(y.dtype))
    if x.dtype.kind == "i":
        neg = y < 0
        if neg.any():
            odd = (y % 2).astype(bool)
            inv = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0)).astype(x.dtype)
            out = np.where(neg, inv, out)
    return out


_binary("pow", _np_pow, _pow_vjp, no_bool=True)
_binary("maximum", np.maximum, _max_vjp)
_binary("minimum", np.minimum, _min_vjp)
_binary("floordiv", _np_floordiv, lambda g, x, y, out, a: (_zeros(x), _zeros(y)), no_bool=True)  # Steps.
_binary("mod", _np_mod, lambda g, x, y, out, a: (g, -g * (x / y).floor()), no_bool=True)


def _atan2_vjp(g, x, y, out, a):
    d = x * x + y * y
    zero = d == 0  # At (0, 0), or where the squares underflow: a zero gradient (PyTorch's), not 0/0.
    inv = 1.0 / P("where", zero, d + 1.0, d)
    zeros = _zeros(g)
    return P("where", zero, zeros, g * y * inv), P("where", zero, zeros, -g * x * inv)


_binary("atan2", np.arctan2, _atan2_vjp)
for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    _binary(_name, _fn, kind="compare")
_binary("and", lambda x, y: np.logical_and(x, y) if x.dtype == np.bool_ else np.bitwise_and(x, y),
        int_only=True)
_binary("or", lambda x, y: np.logical_or(x, y) if x.dtype == np.bool_ else np.bitwise_or(x, y),
        int_only=True)
_binary("xor", lambda x, y: np.logical_xor(x, y) if x.dtype == np.bool_ else np.bitwise_xor(x, y),
        int_only=True)


def _infer_where(inputs, attrs):
    c, a, b = inputs
    shape = _same_shape("where", inputs)
    if c.dtype is not dt.bool_:
        raise DTypeError(f"loom.where: condition must be bool, got {c.dtype.name}")
    return shape, _same_dtype("where", [a, b])


def _where_vjp(g, c, a, b, out, attrs, needs=(True, True, True)):
    # `needs` spares a ReLU's backward the select for its constant zero (a node built for nothing).
    zero = _zeros(g)
    return (None, P("where", c, g, zero) if needs[1] else None,
            P("where", c, zero, g) if needs[2] else None)


_SAME_SIZE_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _unbroadcast_or_splat(a: np.ndarray) -> bool:
    return all(a.strides) or not any(a.strides)


def _where_impl(c, a, b, attrs):
    """np.where; on a large mask that is not broadcast (a ReLU's) a bitwise select: the same bits,
    without a mispredicted branch per element (several times faster on random masks)."""
    u = _SAME_SIZE_UINT.get(a.dtype.itemsize)
    if (u is None or c.size < 4096 or a.dtype != b.dtype or not all(c.strides)
            or not _unbroadcast_or_splat(a) or not _unbroadcast_or_splat(b)):
        return np.where(c, a, b)
    mask = c.view(np.uint8).astype(u)
    if not any(a.strides) and not a.view(u).flat[0]:
        # Selecting +0.0 where c holds (a ReLU and its gradient): b's bits under a mask of all ones
        # where c does not hold, the same bits in two passes instead of five.
        np.subtract(mask, u(1), out=mask)
        return np.bitwise_and(mask, b.view(u), out=mask).view(b.dtype)
    np.negative(mask, out=mask)  # All ones where c holds, else zero.
    out = np.bitwise_and(a.view(u), mask)
    np.invert(mask, out=mask)
    np.bitwise_and(mask, b.view(u), out=mask)
    np.bitwise_or(out, mask, out=out)
    return out.view(a.dtype)


register("where", "ternary", 3, _infer_where, _where_impl, _where_vjp,
         check_attrs=_no_attrs("where"))


# ---------------------------------------------------------------- reductions

def _infer_reduce(op):
    def rule(inputs, attrs):
        x = inputs[0]
        axes = tuple(attrs["axes"])
        for ax in axes:
            if not 0 <= ax < max(x.ndim if hasattr(x, "ndim") else len(x.shape), 0) and not \
                    (len(x.shape) == 0 and ax == 0):
                raise LoomIndexError(f"loom.{op}: axis {ax} out of range for shape {fmt_shape(x.shape)}")
        if op in ("max", "min"):
            no_complex(op, x.dtype, inputs)
        if op in ("max", "min") and any(x.shape[a] == 0 for a in axes if len(x.shape)):
            raise ShapeError(f"loom.{op}: cannot reduce a zero-size dimension of shape "
                             f"{fmt_shape(x.shape)} over axes {list(axes)} (no identity)")
        shape = _reduced_shape(tuple(x.shape), axes, attrs.get("keepdim", False))
        return shape, x.dtype
    return rule


def _reduced_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _keep(g, x, attrs):
    """Gradient of a reduction reshaped to keepdim form, ready to broadcast back over x."""
    if attrs.get("keepdim", False) or x.ndim == 0:
        return g
    return g.reshape(_reduced_shape(tuple(x.shape), tuple(attrs["axes"]), True))


def _sum_vjp(g, x, out, attrs):
    return (_keep(g, x, attrs).expand(x.shape),)


def _extreme_vjp(g, x, out, attrs):
    # Ties share the gradient evenly, as PyTorch's amax/amin do.
    o = _keep(out, x, attrs).expand(x.shape)
    mask = (x == o).to(g.dtype)
    count = mask.sum(tuple(attrs["axes"]), keepdim=True).expand(x.shape)
    return (_keep(g, x, attrs).expand(x.shape) * mask / count,)


def _exclusive_prod(x, axis):
    """Product of the other elements along `axis`: prefix times suffix scans, exact with zeros to any order."""
    n, nd = x.shape[axis], x.ndim
    full = dict(starts=[0] * nd, stops=list(x.shape), steps=[1] * nd)

    def shifted(t, k):  # t moved k places up `axis`, the vacated places filled with 1.
        pads = [(0, 0)] * nd
        pads[axis] = (k, 0)
        return P("slice", P("pad", t, pads=pads, value=1), **full)

    def exclusive_scan(t):
        t, k = shifted(t, 1), 1
        while k < n:
            t, k = t * shifted(t, k), k * 2
        return t

    flip = dict(axes=(axis,))
    return exclusive_scan(x) * P("flip", exclusive_scan(P("flip", x, **flip)), **flip)


def _prod_vjp(g, x, out, attrs):
    axes = tuple(attrs["axes"])
    g = _keep(g, x, attrs).expand(x.shape)
    if not axes or x.ndim == 0:
        return (g,)
    # Bring the reduced axes together at the end so one scan covers them.
    keep = [i for i in range(x.ndim) if i not in axes]
    perm = keep + list(axes)
    inv = [perm.index(i) for i in range(x.ndim)]
    moved = P("permute", x, perm=tuple(perm))
    flat = P("reshape", moved, shape=tuple(moved.shape[:len(keep)]) + (math.prod(x.shape[a] for a in axes),))
    others = _exclusive_prod(flat, len(keep))
    others = P("permute", P("reshape", others, shape=tuple(moved.shape)), perm=tuple(inv))
    return (g * others,)


_LAYOUT_FIXED = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _np_reduce(fn):
    def impl(x, attrs):
        axes = tuple(attrs["axes"])
        if fn in (np.sum, np.prod) and x.dtype in _LAYOUT_FIXED and not x.flags.c_contiguous:
            # NumPy adds in memory order: the same values stored transposed (a convolution's output from
            # the NumPy path rather than oneDNN's) would give other bits. One layout, one result.
            x = np.ascontiguousarray(x)
        kw = {}
        if fn in (np.sum, np.prod) and x.dtype.kind in "biu":
            kw["dtype"] = x.dtype if x.dtype.kind != "b" else np.int64
        return fn(x, axis=axes, keepdims=attrs.get("keepdim", False), **kw)
    return impl


def _infer_sum(inputs, attrs):
    shape, d = _infer_reduce("sum")(inputs, attrs)
    return shape, d


def _reduce_attrs(op):
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("axes",), ("keepdim",))
        # A 0-d input reduces over axis 0 as PyTorch allows (dim=0 of a scalar).
        _axes_attr(op, "axes", attrs["axes"], inputs[0].shape, scalar_axis=True)
        if "keepdim" in attrs:
            _bool_attr(op, "keepdim", attrs["keepdim"])
    return rule


register("sum", "reduce", 1, _infer_sum, _np_reduce(np.sum), _sum_vjp, check_attrs=_reduce_attrs("sum"))
register("prod", "reduce", 1, _infer_reduce("prod"), _np_reduce(np.prod), _prod_vjp,
         check_attrs=_reduce_attrs("prod"))
register("max", "reduce", 1, _infer_reduce("max"), _np_reduce(np.max), _extreme_vjp,
         check_attrs=_reduce_attrs("max"))
register("min", "reduce", 1, _infer_reduce("min"), _np_reduce(np.min), _extreme_vjp,
         check_attrs=_reduce_attrs("min"))


# ---------------------------------------------------------------- movement

def _infer_reshape(inputs, attrs):
    x = inputs[0]
    shape = tuple(attrs["shape"])
    if math.prod(shape) != math.prod(x.shape) or any(s < 0 for s in shape):
        raise ShapeError(f"loom.reshape: cannot reshape {fmt_shape(x.shape)} "
                         f"({math.prod(x.shape)} elements) to {fmt_shape(shape)}")
    return shape, x.dtype


def _reshape_attrs(inputs, attrs):
    _attr_names("reshape", attrs, ("shape",))
    _shape_attr("reshape", "shape", attrs["shape"])


register("reshape", "movement", 1, _infer_reshape,
         lambda x, attrs: x.reshape(attrs["shape"]),  # The method: np.reshape's dispatch costs more than the view.
         lambda g, x, out, a: (_reshaped(g, tuple(x._node.shape)),), check_attrs=_reshape_attrs)


def _reshaped(g, shape):
    """`g` in `shape` (as many elements) as a plain reshape node: a gradient nobody writes through needs no view."""
    return g if tuple(g._node.shape) == shape else P("reshape", g, shape=shape)


def _infer_permute(inputs, attrs):
    x = inputs[0]
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"loom.permute: {list(perm)} is not a permutation of the "
                         f"{len(x.shape)} dims of {fmt_shape(x.shape)}")
    return tuple(x.shape[p] for p in perm), x.dtype


def _permute_vjp(g, x, out, attrs):
    inv = [0] * len(attrs["perm"])
    for i, p in enumerate(attrs["perm"]):
        inv[p] = i
    inv = tuple(inv)
    # A plain permute node: the gradient is a value nobody writes through, not a view needing alias bookkeeping.
    return (g if inv == tuple(range(len(inv))) else P("permute", g, perm=inv),)


def _permute_attrs(inputs, attrs):
    _attr_names("permute", attrs, ("perm",))
    perm, n = attrs["perm"], len(inputs[0].shape)
    _ints_attr("permute", "perm", perm, n)
    if sorted(perm) != list(range(n)):
        raise _bad_attr("permute", "perm", perm, f"a permutation of 0..{n - 1} (each dim once)", ShapeError)


register("permute", "movement", 1, _infer_permute,
         lambda x, attrs: x.transpose(attrs["perm"]), _permute_vjp, check_attrs=_permute_attrs)


def _infer_expand(inputs, attrs):
    x = inputs[0]
    shape = tuple(attrs["shape"])
    if len(shape) != len(x.shape) or any(s != t and s != 1 for s, t in zip(x.shape, shape)):
        raise ShapeError(f"loom.expand: cannot expand {fmt_shape(x.shape)} to {fmt_shape(shape)}; "
                         "the IR expand keeps the rank and only grows dims of size 1")
    return shape, x.dtype


def _expand_vjp(g, x, out, attrs):
    axes = tuple(i for i, (s, t) in enumerate(zip(x.shape, attrs["shape"])) if s != t)
    return (g.sum(axes, keepdim=True) if axes else g,)


def _expand_attrs(inputs, attrs):
    _attr_names("expand", attrs, ("shape",))
    _shape_attr("expand", "shape", attrs["shape"], len(inputs[0].shape))


def _expand_impl(x, attrs):
    """np.broadcast_to's view; on a contiguous array of the same rank (a bias row) built directly, with the same
    strides (a few times cheaper than broadcast_to's iterator)."""
    shape = tuple(attrs["shape"])
    if type(x) is np.ndarray and x.ndim == len(shape) and x.size and x.flags.c_contiguous:
        strides = tuple([s if n == m else 0 for n, m, s in zip(x.shape, shape, x.strides)])
        out = np.ndarray(shape, x.dtype, x, 0, strides)
        out.flags.writeable = False
        return out
    return np.broadcast_to(x, shape)


register("expand", "movement", 1, _infer_expand, _expand_impl, _expand_vjp, check_attrs=_expand_attrs)


def _infer_pad(inputs, attrs):
    x = inputs[0]
    pads = [tuple(p) for p in attrs["pads"]]
    if len(pads) != len(x.shape) or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"loom.pad: expected one non-negative (low, high) pair per dim of "
                         f"{fmt_shape(x.shape)}, got {pads}")
    return tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads)), x.dtype


def _pad_impl(x, attrs):
    """np.pad with a constant, writing each element once: x into the interior, the value into the slabs
    around it (a gradient's pad into a fused q/k/v block is three times its input)."""
    pads = attrs["pads"]
    out = np.empty(tuple(lo + s + hi for (lo, hi), s in zip(pads, x.shape)), dtype=x.dtype)
    out[tuple(slice(lo, lo + s) for (lo, _), s in zip(pads, x.shape))] = x
    value = attrs.get("value", 0)
    for d, (lo, hi) in enumerate(pads):
        lead = (slice(None),) * d
        if lo:
            out[lead + (slice(0, lo),)] = value
        if hi:
            out[lead + (slice(out.shape[d] - hi, None),)] = value
    return out


def _pad_vjp(g, x, out, attrs):
    starts = [lo for lo, _ in attrs["pads"]]
    stops = [lo + s for (lo, _), s in zip(attrs["pads"], x.shape)]
    return (P("slice", g, starts=starts, stops=stops, steps=[1] * x.ndim),)


def _pad_attrs(inputs, attrs):
    _attr_names("pad", attrs, ("pads",), ("value",))
    pads, n = attrs["pads"], len(inputs[0].shape)
    if not isinstance(pads, (tuple, list)) or len(pads) != n:
        raise _bad_attr("pad", "pads", pads, f"{n} (low, high) pairs of non-negative ints, one per dim of the "
                        "input", ShapeError)
    for p in pads:
        if not isinstance(p, (tuple, list)) or len(p) != 2 or not (_is_int(p[0]) and _is_int(p[1])):
            raise _bad_attr("pad", "pads", pads, f"{n} (low, high) pairs of non-negative ints, one per dim "
                            "of the input", LoomTypeError)
        if p[0] < 0 or p[1] < 0:
            raise _bad_attr("pad", "pads", pads, f"{n} (low, high) pairs of non-negative ints, one per dim "
                            "of the input", ShapeError)
    if "value" in attrs:
        _number_attr("pad", "value", attrs["value"])


register("pad", "movement", 1, _infer_pad, _pad_impl, _pad_vjp, check_attrs=_pad_attrs)


def _slice_len(start, stop, step):
    return max(0, (stop - start + step - 1) // step)


def _infer_slice(inputs, attrs):
    x = inputs[0]
    starts, stops, steps = attrs["starts"], attrs["stops"], attrs["steps"]
    if not len(starts) == len(stops) == len(steps) == len(x.shape):
        raise ShapeError(f"loom.slice: expected starts/stops/steps for each of the {len(x.shape)} "
                         f"dims of {fmt_shape(x.shape)}")
    out = []
    for s, a, b, c in zip(x.shape, starts, stops, steps):
        if c <= 0 or not 0 <= a <= s or not 0 <= b <= s:
            raise ShapeError(f"loom.slice: bad range {a}:{b}:{c} for a dim of size {s} in "
                             f"{fmt_shape(x.shape)} (need 0 <= start, stop <= size and step > 0)")
        out.append(_slice_len(a, b, c))
    return tuple(out), x.dtype


def _slice_impl(x, attrs):
    return x[tuple(slice(a, b, c) for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"]))]


def _slice_vjp(g, x, out, attrs):
    # Scatter g back into zeros: interleave zeros for steps, then pad to x's shape.
    for ax, (step, n) in enumerate(zip(attrs["steps"], g.shape)):
        if step > 1 and n > 0:
            shape = list(g.shape)
            g = g.unsqueeze(ax + 1)
            pads = [(0, 0)] * g.ndim
            pads[ax + 1] = (0, step - 1)
            g = P("pad", g, pads=pads, value=0)
            shape[ax] = n * step
            g = g.reshape(shape)
    pads = []
    for ax, (a, size) in enumerate(zip(attrs["starts"], x.shape)):
        keep = min(g.shape[ax], size - a)
        if keep < g.shape[ax]:
            starts = [0] * g.ndim
            stops = list(g.shape)
            stops[ax] = keep
            g = P("slice", g, starts=starts, stops=stops, steps=[1] * g.ndim)
        pads.append((a, size - a - keep))
    return (P("pad", g, pads=pads, value=0),)


def _slice_attrs(inputs, attrs):
    _attr_names("slice", attrs, ("starts", "stops", "steps"))
    shape = inputs[0].shape
    n = len(shape)
    _ints_attr("slice", "starts", attrs["starts"], n)
    _ints_attr("slice", "stops", attrs["stops"], n)
    _ints_attr("slice", "steps", attrs["steps"], n)
    for d, size, a, b, c in zip(range(n), shape, attrs["starts"], attrs["stops"], attrs["steps"]):
        if c <= 0:
            raise _bad_attr("slice", "steps", attrs["steps"], f"positive steps (dim {d})", ShapeError)
        if not 0 <= a <= size:
            raise _bad_attr("slice", "starts", attrs["starts"], f"0 <= start <= {size} in dim {d} of "
                            f"{fmt_shape(shape)}", ShapeError)
        if not 0 <= b <= size:
            raise _bad_attr("slice", "stops", attrs["stops"], f"0 <= stop <= {size} in dim {d} of "
                            f"{fmt_shape(shape)}", ShapeError)


register("slice", "movement", 1, _infer_slice, _slice_impl, _slice_vjp, check_attrs=_slice_attrs)


def _infer_flip(inputs, attrs):
    x = inputs[0]
    for ax in attrs["axes"]:
        if not 0 <= ax < len(x.shape):
            raise LoomIndexError(f"loom.flip: axis {ax} out of range for shape {fmt_shape(x.shape)}")
    return tuple(x.shape), x.dtype


def _flip_attrs(inputs, attrs):
    _attr_names("flip", attrs, ("axes",))
    _axes_attr("flip", "axes", attrs["axes"], inputs[0].shape)


register("flip", "movement", 1, _infer_flip,
         lambda x, attrs: np.flip(x, tuple(attrs["axes"])) if attrs["axes"] else x,
         lambda g, x, out, a: (P("flip", g, axes=tuple(a["axes"])),), check_attrs=_flip_attrs)


def _axis_attrs(op, optional=()):
    """One `axis` in [0, ndim) of the first input (a 0-d input takes axis 0)."""
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("axis",), optional)
        shape, axis = inputs[0].shape, attrs["axis"]
        if type(axis) is not int or not 0 <= axis < (len(shape) or 1):  # The message is built only on error.
            _int_attr(op, "axis", axis, 0, len(shape) or 1, f" (a dim of {fmt_shape(shape)})")
        for name in optional:
            if name in attrs:
                _bool_attr(op, name, attrs[name])
    return rule


def _check_index_dtype(op, idx):
    if idx.dtype.category != 1:
        raise DTypeError(f"loom.{op}: index must be an integer tensor, got {idx.dtype.name}")


def _infer_gather(inputs, attrs):
    x, idx = inputs
    ax = attrs["axis"]
    _check_index_dtype("gather", idx)
    if len(idx.shape) != len(x.shape) or not 0 <= ax < max(len(x.shape), 1):
        raise ShapeError(f"loom.gather: index rank must equal input rank and axis be in range; "
                         f"got input {fmt_shape(x.shape)}, index {fmt_shape(idx.shape)}, axis {ax}")
    for d, (s, t) in enumerate(zip(x.shape, idx.shape)):
        if d != ax and t > s:
            raise ShapeError(f"loom.gather: index {fmt_shape(idx.shape)} is larger than input "
                             f"{fmt_shape(x.shape)} in dim {d} (only the gather axis {ax} may differ)")
    return tuple(idx.shape), x.dtype


def _open_index(idx, axis):
    """Index arrays that address out[i...] = x[..., idx[i...], ...] along `axis`."""
    grids = np.ogrid[tuple(slice(0, s) for s in idx.shape)] if idx.ndim else []
    grids = list(grids)
    grids[axis] = idx
    return tuple(grids)


def _check_bounds(op, idx, size):
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)].flat[0]
        raise LoomIndexError(f"loom.{op}: index {int(bad)} is out of bounds for a dimension of size {size}")


def _index_line(idx, axis):
    """The 1-d index along `axis` when `idx` repeats it across every other dim (the expanded index of
    index_select / index_add / embedding, a stride-0 view), else None."""
    for d, (n, step) in enumerate(zip(idx.shape, idx.strides)):
        if d != axis and (n == 0 or (n > 1 and step != 0)):
            return None
    return idx[tuple(slice(None) if d == axis else 0 for d in range(idx.ndim))]


def _leading(x, shape, axis):
    """`x` cut to `shape` in every dim but `axis` (an index may be smaller than its input there)."""
    if all(d == axis or s == t for d, (s, t) in enumerate(zip(x.shape, shape))):
        return x
    return x[tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(shape))]


def _gather_impl(x, idx, attrs):
    ax = attrs["axis"]
    if x.ndim == 0:
        _check_bounds("gather", idx, 1)
        return x.copy()
    line = _index_line(idx, ax)
    if line is not None:  # Whole slices along the axis: one take, the same values as the open index.
        _check_bounds("gather", line, x.shape[ax])
        return np.take(_leading(x, idx.shape, ax), line, axis=ax)
    _check_bounds("gather", idx, x.shape[ax])
    return x[_open_index(idx, ax)]


def _gather_vjp(g, x, idx, out, attrs, needs=(True, False)):
    return P("scatter_add", _zeros(x), idx, g, axis=attrs["axis"]), None


register("gather", "movement", 2, _infer_gather, _gather_impl, _gather_vjp, check_attrs=_axis_attrs("gather"))


def _infer_scatter_add(inputs, attrs):
    base, idx, src = inputs
    ax = attrs["axis"]
    _check_index_dtype("scatter_add", idx)
    if base.dtype is not src.dtype:
        raise DTypeError(f"loom.scatter_add: base and source dtypes differ: {_desc([base, src])}")
    if not len(base.shape) == len(idx.shape) == len(src.shape):
        raise ShapeError(f"loom.scatter_add: base, index and source need one rank, got {_desc(inputs)}")
    for d in range(len(idx.shape)):
        if idx.shape[d] > src.shape[d] or (d != ax and idx.shape[d] > base.shape[d]):
            raise ShapeError(f"loom.scatter_add: index {fmt_shape(idx.shape)} does not fit source "
                             f"{fmt_shape(src.shape)} / base {fmt_shape(base.shape)} in dim {d}")
    return tuple(base.shape), base.dtype


def _scatter_add_impl(base, idx, src, attrs):
    ax = attrs["axis"]
    out = np.array(base, copy=True, order="C")
    if out.ndim == 0:
        return out + src
    size = base.shape[ax]
    line = _index_line(idx, ax)
    _check_bounds("scatter_add", idx if line is None else line, size)
    src = src[tuple(slice(0, s) for s in idx.shape)]
    # One flat index per source element, in C order of the index: np.add.at on 1-d indices is
    # several times faster than on a tuple of index grids, and adds in the same order.
    flat = _flat_index(idx if line is None else line.reshape([-1 if d == ax else 1 for d in range(idx.ndim)]),
                       ax, size, idx.shape, out.shape)
    np.add.at(out.reshape(-1), flat.reshape(-1), np.ascontiguousarray(src).reshape(-1))
    return out


def _flat_index(idx, axis, size, shape, out_shape):
    """The C-order flat positions in `out_shape` that `idx` (in bounds, broadcastable to `shape`, negative
    values counting from the end) addresses along `axis`, as an int64 array of `shape`."""
    steps = [1] * len(out_shape)
    for d in range(len(out_shape) - 2, -1, -1):
        steps[d] = steps[d + 1] * out_shape[d + 1]
    idx = idx.astype(np.int64, copy=False)
    flat = np.where(idx < 0, idx + size, idx) * steps[axis]
    for d, n in enumerate(shape):
        if d != axis:
            along = [n if e == d else 1 for e in range(len(shape))]
            flat = flat + (np.arange(n, dtype=np.int64) * steps[d]).reshape(along)
    return np.broadcast_to(flat, shape)


def _scatter_add_vjp(g, base, idx, src, out, attrs):
    gs = P("gather", g, idx, axis=attrs["axis"])
    if tuple(gs.shape) != tuple(src.shape):
        gs = P("pad", gs, pads=[(0, s - t) for s, t in zip(src.shape, gs.shape)], value=0)
    return g, None, gs


register("scatter_add", "movement", 3, _infer_scatter_add, _scatter_add_impl, _scatter_add_vjp,
         check_attrs=_axis_attrs("scatter_add"))


# ---------------------------------------------------------------- contraction

def _infer_matmul(inputs, attrs):
    a, b = inputs
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise ShapeError(f"loom.matmul: the IR matmul takes two inputs of one rank >= 2, got {_desc(inputs)}")
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"loom.matmul: shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)} cannot "
                         "be multiplied (need equal batch dims and a[..., k] matching b[..., k, :])")
    d = _same_dtype("matmul", inputs)
    if d is dt.bool_:
        raise DTypeError(f"loom.matmul: not defined for bool, got {_desc(inputs)}")
    return tuple(a.shape[:-1]) + (b.shape[-1],), d


def _matmul_vjp(g, a, b, out, attrs, needs=(True, True)):
    # The transposes are plain permute nodes, as in `linear`: values only these products read.
    return (g @ _mT(b) if needs[0] else None, _mT(a) @ g if needs[1] else None)


def _mT(x):
    k = len(x._node.shape)
    return P("permute", x, perm=tuple(range(k - 2)) + (k - 1, k - 2))


register("matmul", "contraction", 2, _infer_matmul, lambda a, b, attrs: np.matmul(a, b), _matmul_vjp,
         check_attrs=_no_attrs("matmul"))


# ---------------------------------------------------------------- library primitives

def _infer_argsort(inputs, attrs):
    x = inputs[0]
    no_complex("argsort", x.dtype, inputs)
    ax = attrs["axis"]
    if not 0 <= ax < max(len(x.shape), 1):
        raise LoomIndexError(f"loom.argsort: axis {ax} out of range for shape {fmt_shape(x.shape)}")
    return tuple(x.shape), dt.int64


def _argsort_impl(x, attrs):
    """Stable order along an axis; NaN sorts as the largest value, as in PyTorch."""
    if x.ndim == 0:
        return np.zeros((), np.int64)
    ax = attrs["axis"]
    if not attrs.get("descending", False):
        return np.argsort(x, axis=ax, kind="stable").astype(np.int64)
    if x.dtype.kind == "f":
        key = np.where(np.isnan(x), -np.inf, -x)
        nan_last = ~np.isnan(x)  # Descending puts NaN first.
        return np.lexsort((key, nan_last), axis=ax).astype(np.int64)
    if x.dtype == np.bool_:
        key = ~x
    elif x.dtype.kind == "u":
        key = np.iinfo(x.dtype).max - x
    else:
        key = ~x  # Reverses the order of signed ints without overflow.
    return np.argsort(key, axis=ax, kind="stable").astype(np.int64)


register("argsort", "sort", 1, _infer_argsort, _argsort_impl, check_attrs=_axis_attrs("argsort", ("descending",)))



# ---------------------------------------------------------------- value checks

def check_failure(x, attrs: dict, xp: Any = np):
    """Where `check` fails on `x`: (bad element mask, bad row mask or None), in NumPy or jax.numpy (`xp`).

    One definition serves the reference interpreter and the compiler plugins, so
    every backend rejects exactly the same values. Comparisons are written so
    that NaN is always outside the range.
    """
    low, high = attrs["low"], attrs["high"]
    inside = (x >= low) & ((x <= high) if attrs.get("closed", False) else (x < high))
    ignore = attrs.get("ignore")
    if ignore is not None:
        inside = inside | (x == ignore)
    rows = None
    if attrs.get("positive_rows", False) and x.ndim:
        rows = ~(xp.sum(xp.where(inside, x, xp.zeros_like(x)), axis=-1) > 0)
    return ~inside, rows


def check_error(attrs: dict, value, row: bool = False) -> Exception:
    """The loom error a failed `check` raises; `value` is the first bad element (or the bad row's sum)."""
    cls = {"index": LoomIndexError, "linalg": LinAlgError}.get(attrs.get("error", "index"), LoomValueError)
    text = attrs["rows_message"] if row else attrs["message"]
    return cls(text.format(value=value))


def value_text(value, dtype) -> str:
    """How a check message shows a bad value: in the input's (computing) NumPy dtype, shortest form."""
    return str(np.asarray(value).astype(dtype)[()])


def _infer_check(inputs, attrs):
    x = inputs[0]
    if x.dtype is dt.bool_ or x.dtype.category == 3:
        raise DTypeError(f"loom.check: expected a real numeric input, got {x.dtype.name}")
    return tuple(x.shape), x.dtype


def _check_attrs(inputs, attrs):
    _attr_names("check", attrs, ("low", "high", "message"),
                ("user_op", "closed", "ignore", "error", "positive_rows", "rows_message"))
    for name in ("low", "high"):
        _number_attr("check", name, attrs[name])
    if attrs.get("ignore") is not None:
        _number_attr("check", "ignore", attrs["ignore"])
    for name in ("message", "rows_message", "user_op"):
        if name in attrs and not isinstance(attrs[name], str):
            raise _bad_attr("check", name, attrs[name], "a str", LoomTypeError)
    for name in ("closed", "positive_rows"):
        if name in attrs:
            _bool_attr("check", name, attrs[name])
    if attrs.get("error", "index") not in ("index", "value", "linalg"):
        raise _bad_attr("check", "error", attrs["error"], "'index', 'value' or 'linalg'")
    if attrs.get("positive_rows", False) and not attrs.get("rows_message"):
        raise _bad_attr("check", "rows_message", attrs.get("rows_message"), "a message when positive_rows is set")


def _check_impl(x, attrs):
    bad, rows = check_failure(x, attrs)
    if bad.any():
        raise check_error(attrs, value_text(x[bad].flat[0], x.dtype))
    if rows is not None and rows.any():
        sums = np.sum(x, axis=-1)
        raise check_error(attrs, value_text(np.asarray(sums)[rows].flat[0], x.dtype), row=True)
    return x.view()


# A data-dependent check of a composite op (an index, a class target, a probability): passes its
# input through unchanged and raises the op's own error when a value is outside [low, high)
# ([low, high] with `closed`; `ignore` is always allowed; `positive_rows` also needs every
# last-axis row to sum above 0). Consumers read its output, so it runs before them in every mode.
register("check", "check", 1, _infer_check, _check_impl, lambda g, x, out, a: (g,), check_attrs=_check_attrs)

# Backward rules that read only their inputs' shapes and dtypes (or the output), not
# their values. An input changed in place after such an op is harmless: its gradient
# goes to the value the op read. For every other rule that is an error, as in PyTorch.
VJP_IGNORES_INPUT_VALUES = frozenset({
    "neg", "add", "sub", "exp", "expm1", "sqrt", "recip", "tan", "tanh", "cast", "sum", "reshape", "permute",
    "expand", "pad", "slice", "flip", "sign", "floor", "ceil", "round", "trunc", "floordiv",
    "real", "imag", "conj", "complex", "fft_c2c", "fft_r2c", "fft_c2r",
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send", "recv",
})

# Holomorphic primitives whose backward rule, written for real inputs, gives PyTorch's complex
# gradient (the conjugate Wirtinger derivative) as conj(vjp(conj(g))); the autograd engine
# applies that on complex nodes. The other rules that take complex inputs are written for it.
CONJ_VJP = frozenset({"recip", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "mul", "div",
                      "pow", "matmul", "prod"})


# Backward rules that read an input's value only for the gradient of another input (d(a*b)/db = a):
# a change to that input matters only when the other one requires grad. `where` reads only its condition.
VJP_READS_FOR_OTHERS = frozenset({"mul", "matmul", "where", "conv2d", "conv2d_input_grad", "conv2d_weight_grad"})


def vjp_reads_input(name: str, k: int, requires: Sequence[bool]) -> bool:
    """Whether the backward rule of `name` reads the value of input `k`, given which inputs require grad."""
    if name in VJP_IGNORES_INPUT_VALUES:
        return False
    if name == "where":
        return k == 0
    if name in VJP_READS_FOR_OTHERS:
        return any(r for i, r in enumerate(requires) if i != k)
    return True


def wants_needs(prim: Primitive) -> bool:
    """Whether a backward rule accepts `needs`, to skip gradients nobody asked for."""
    return prim.vjp is not None and "needs" in prim.vjp.__code__.co_varnames
