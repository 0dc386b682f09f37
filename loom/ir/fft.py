"""The discrete Fourier transform primitives, library ops like conv (NumPy's pocketfft is the reference).

``fft_c2c(x)``   complex -> complex over ``axes``; ``forward`` picks the sign of the exponent
``fft_r2c(x)``   real -> complex, forward, the last of ``axes`` keeping n // 2 + 1 frequencies
``fft_c2r(x)``   complex -> real, inverse of a Hermitian signal, the last of ``axes`` growing to ``n``

All three are unnormalised (no 1/n in either direction); ``loom.fft`` applies
the ``norm`` scale. Backward rules follow PyTorch's complex convention: the
adjoint of a forward c2c is the inverse c2c; r2c's adjoint zero-fills the
dropped half and takes the real part of an inverse c2c; c2r's is r2c with the
frequencies that stand for two (their conjugate mirrors) counted twice, the
Hermitian weighting PyTorch applies. Gradients of any order stay within these.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, ShapeError, fmt_shape
from loom.ir.ops import P, _attr_names, _axes_attr, _bad_attr, _bool_attr, _desc, _int_attr, register

OPS = ("fft_c2c", "fft_r2c", "fft_c2r")


def _axes_rule(op, extra):
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("axes",) + extra)
        _axes_attr(op, "axes", attrs["axes"], inputs[0].shape)
        if not attrs["axes"]:
            raise _bad_attr(op, "axes", attrs["axes"], "at least one axis", ShapeError)
        if "forward" in attrs:
            _bool_attr(op, "forward", attrs["forward"])
        if "n" in attrs:
            _int_attr(op, "n", attrs["n"], 1, 1 << 62, " (the real signal length)")
    return rule


def _dtype_in(op, inputs, category):
    d = inputs[0].dtype
    if d.category != category or d is dt.complex32:
        want = "complex64 or complex128" if category == 3 else "float32 or float64"
        raise DTypeError(f"loom.{op}: expects a {want} input, got {_desc(inputs)}")
    return d


def _infer_c2c(inputs, attrs):
    return tuple(inputs[0].shape), _dtype_in("fft_c2c", inputs, 3)


def _infer_r2c(inputs, attrs):
    x = inputs[0]
    d = _dtype_in("fft_r2c", inputs, 2)
    shape = list(x.shape)
    last = attrs["axes"][-1]
    if shape[last] < 1:
        raise ShapeError(f"loom.fft_r2c: the signal along axis {last} of {fmt_shape(x.shape)} is empty")
    shape[last] = shape[last] // 2 + 1
    return tuple(shape), dt.to_complex(d)


def _infer_c2r(inputs, attrs):
    x = inputs[0]
    d = _dtype_in("fft_c2r", inputs, 3)
    last, n = attrs["axes"][-1], attrs["n"]
    if x.shape[last] != n // 2 + 1:
        raise ShapeError(f"loom.fft_c2r: a real signal of length n={n} has {n // 2 + 1} frequencies along "
                         f"axis {last}, got input {fmt_shape(x.shape)}")
    shape = list(x.shape)
    shape[last] = n
    return tuple(shape), dt.to_real(d)


def _c2c_impl(x, attrs):
    axes = tuple(attrs["axes"])
    return np.fft.fftn(x, axes=axes) if attrs["forward"] else np.fft.ifftn(x, axes=axes, norm="forward")


def _r2c_impl(x, attrs):
    return np.fft.rfftn(x, axes=tuple(attrs["axes"]))


def _c2r_impl(x, attrs):
    axes = tuple(attrs["axes"])
    sizes = [x.shape[a] for a in axes[:-1]] + [attrs["n"]]
    return np.fft.irfftn(x, s=sizes, axes=axes, norm="forward")


def _c2c_vjp(g, x, out, attrs):
    return (P("fft_c2c", g, axes=tuple(attrs["axes"]), forward=not attrs["forward"]),)


def _r2c_vjp(g, x, out, attrs):
    last = attrs["axes"][-1]
    pads = [(0, 0)] * g.ndim
    pads[last] = (0, x.shape[last] - g.shape[last])
    full = P("pad", g, pads=pads, value=0)
    return (P("real", P("fft_c2c", full, axes=tuple(attrs["axes"]), forward=False)),)


def hermitian_weights(n: int, like, axis: int):
    """(1, 2, ..., 2, 1 or 2) along `axis` of `like`'s rank: how many frequencies each of n // 2 + 1 stands for."""
    h = n // 2 + 1
    twice = n - h  # Frequencies 1 .. n - h have a mirror image that the half spectrum leaves out.
    w = P("const", value=2, shape=(twice,), dtype=dt.to_real(like.dtype))
    w = P("pad", w, pads=[(1, h - 1 - twice)], value=1)
    shape = [1] * like.ndim
    shape[axis] = h
    return P("reshape", w, shape=tuple(shape))


def _c2r_vjp(g, x, out, attrs):
    axes = tuple(attrs["axes"])
    r = P("fft_r2c", g, axes=axes)
    if attrs["n"] - (attrs["n"] // 2 + 1) == 0:
        return (r,)
    return (r * hermitian_weights(attrs["n"], r, axes[-1]),)


register("fft_c2c", "contraction", 1, _infer_c2c, _c2c_impl, _c2c_vjp, check_attrs=_axes_rule("fft_c2c", ("forward",)))
register("fft_r2c", "contraction", 1, _infer_r2c, _r2c_impl, _r2c_vjp, check_attrs=_axes_rule("fft_r2c", ()))
register("fft_c2r", "contraction", 1, _infer_c2r, _c2r_impl, _c2r_vjp, check_attrs=_axes_rule("fft_c2r", ("n",)))
