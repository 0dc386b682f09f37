"""The complex-number primitives: parts, conjugate and assembly, library ops like conv.

``real(z)``, ``imag(z)``   complex -> its real type (complex64 -> float32)
``conj(z)``                complex -> complex
``complex(x, y)``          two real inputs of one float type -> x + iy

Backward rules follow PyTorch's convention for complex tensors: the gradient
of a real loss L with respect to z = x + iy is dL/dx + i dL/dy (the conjugate
Wirtinger derivative, scaled by 2). All four are linear over the reals, so each
rule is another of the four and gradients of any order stay within them.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError
from loom.ir.ops import P, _desc, _no_attrs, _same_dtype, _same_shape, _zeros, register


def _complex_input(op, inputs):
    d = inputs[0].dtype
    if d.category != 3:
        raise DTypeError(f"loom.{op}: expects a complex input, got {_desc(inputs)}")
    return d


def _infer_part(op):
    def rule(inputs, attrs):
        return tuple(inputs[0].shape), dt.to_real(_complex_input(op, inputs))
    return rule


def _infer_conj(inputs, attrs):
    return tuple(inputs[0].shape), _complex_input("conj", inputs)


def _infer_complex(inputs, attrs):
    shape = _same_shape("complex", inputs)
    d = _same_dtype("complex", inputs)
    if d not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.complex: expects float32 or float64 parts (complex64 or complex128 result), "
                         f"got {_desc(inputs)}")
    return shape, dt.to_complex(d)


def _complex_impl(x, y, attrs):
    # Part by part: x + 1j * y would turn an infinite y into a NaN real part.
    out = np.empty(x.shape, np.complex64 if x.dtype == np.float32 else np.complex128)
    out.real, out.imag = x, y
    return out


def _complex_vjp(g, x, y, out, attrs, needs=(True, True)):
    return (P("real", g) if needs[0] else None, P("imag", g) if needs[1] else None)


register("real", "unary", 1, _infer_part("real"), lambda z, attrs: np.real(z),
         lambda g, z, out, a: (P("complex", g, _zeros(g)),), check_attrs=_no_attrs("real"))
register("imag", "unary", 1, _infer_part("imag"), lambda z, attrs: np.imag(z),
         lambda g, z, out, a: (P("complex", _zeros(g), g),), check_attrs=_no_attrs("imag"))
register("conj", "unary", 1, _infer_conj, lambda z, attrs: np.conj(z),
         lambda g, z, out, a: (P("conj", g),), check_attrs=_no_attrs("conj"))
register("complex", "binary", 2, _infer_complex, _complex_impl, _complex_vjp, check_attrs=_no_attrs("complex"))
