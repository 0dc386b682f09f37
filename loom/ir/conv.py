"""The convolution primitives: conv2d and its two adjoints, library ops like matmul.

``conv2d(x, w)``                   x (N, C, H, W), w (O, C/G, kh, kw) -> (N, O, Ho, Wo)
``conv2d_input_grad(gy, w)``       the adjoint in x (a transposed convolution) -> (N, C, H, W)
``conv2d_weight_grad(x, gy)``      the adjoint in w -> (O, C/G, kh, kw)

Attributes: ``stride`` (sh, sw) >= 1, ``padding`` (top, bottom, left, right)
>= 0, ``dilation`` (dh, dw) >= 1, ``groups`` >= 1; the input gradient also
records ``input_size`` (H, W) and the weight gradient ``kernel_size`` (kh, kw),
which the floor in the output size does not let them recover.

Convolution is bilinear, so each of the three has a backward rule made of the
other two (and itself): gradients of any order stay within these primitives.

The reference implementation is im2col by strides (a view, no index tables)
and one batched matmul per call; float32 calls go to the native library
(`loom.codegen.conv`, oneDNN when it is installed) unless ``LOOM_NATIVE_CONV=0``,
which also keeps ``max_pool2d_index`` off its C loop.
Half-precision inputs arrive widened to float32 (see `loom.runtime.reference`).
"""
from __future__ import annotations

import os

import numpy as np
from numpy.lib.stride_tricks import as_strided

from loom import dtypes as dt
from loom.errors import DTypeError, ShapeError, fmt_shape
from loom.ir.ops import P, _attr_names, _bad_attr, _desc, _int_attr, _ints_attr, _same_dtype, register

OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
_EXTRA = {"conv2d": None, "conv2d_input_grad": "input_size", "conv2d_weight_grad": "kernel_size"}


# ---------------------------------------------------------------- attributes and shapes

def _conv_attrs(op):
    extra = _EXTRA[op]

    def rule(inputs, attrs):
        _attr_names(op, attrs, ("stride", "padding", "dilation", "groups") + ((extra,) if extra else ()))
        for name, n, lo in (("stride", 2, 1), ("padding", 4, 0), ("dilation", 2, 1)) + (
                ((extra, 2, 1),) if extra else ()):
            v = attrs[name]
            _ints_attr(op, name, v, what=f"a tuple of {n} ints")
            if len(v) != n:
                raise _bad_attr(op, name, v, f"a tuple of {n} ints", ShapeError)
            for s in v:
                if s < lo:
                    raise _bad_attr(op, name, v, f"{n} ints >= {lo}", ShapeError)
        _int_attr(op, "groups", attrs["groups"], 1, 1 << 31, " (channel groups, at least 1)")
    return rule


def out_size(size: int, k: int, s: int, lo: int, hi: int, d: int) -> int:
    """The output length of a convolution along one axis (may be < 1 when the kernel does not fit)."""
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


def _out_hw(op, x_shape, k, attrs):
    s, p, d = attrs["stride"], attrs["padding"], attrs["dilation"]
    hw = (out_size(x_shape[2], k[0], s[0], p[0], p[1], d[0]), out_size(x_shape[3], k[1], s[1], p[2], p[3], d[1]))
    if min(hw) < 1:
        padded = (x_shape[2] + p[0] + p[1], x_shape[3] + p[2] + p[3])
        eff = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
        raise ShapeError(f"loom.{op}: padded input size {padded} is smaller than the (dilated) kernel size {eff} "
                         f"(input {fmt_shape(x_shape)}, kernel {tuple(k)}, attrs {_show(attrs)})")
    return hw


def _show(attrs):
    return ", ".join(f"{k}={tuple(v) if isinstance(v, (tuple, list)) else v}" for k, v in attrs.items())


def _check_operands(op, x_shape, o, cg, groups, inputs):
    if o % groups:
        raise ShapeError(f"loom.{op}: {o} output channels do not split into groups={groups} ({_desc(inputs)})")
    if x_shape[1] != cg * groups:
        raise ShapeError(f"loom.{op}: input {fmt_shape(x_shape)} has {x_shape[1]} channels; weight "
                         f"(O, C/G, kh, kw) with C/G={cg} and groups={groups} expects {cg * groups} ({_desc(inputs)})")


def _float_4d(op, inputs):
    for i in inputs:
        if len(i.shape) != 4:
            raise ShapeError(f"loom.{op}: expects 4-d operands (N, C, H, W) and (O, C/G, kh, kw), got {_desc(inputs)}")
    d = _same_dtype(op, inputs)
    if not d.is_floating_point:
        raise DTypeError(f"loom.{op}: expects floating point operands, got {_desc(inputs)}")
    return d


def _infer_conv2d(inputs, attrs):
    x, w = inputs
    d = _float_4d("conv2d", inputs)
    _check_operands("conv2d", x.shape, w.shape[0], w.shape[1], attrs["groups"], inputs)
    ho, wo = _out_hw("conv2d", x.shape, w.shape[2:], attrs)
    return (x.shape[0], w.shape[0], ho, wo), d


def _check_gy(op, gy_shape, x_shape, o, k, attrs, inputs):
    want = (x_shape[0], o) + _out_hw(op, x_shape, k, attrs)
    if tuple(gy_shape) != want:
        raise ShapeError(f"loom.{op}: output gradient {fmt_shape(gy_shape)} does not match the convolution "
                         f"output {fmt_shape(want)} ({_desc(inputs)}, {_show(attrs)})")


def _infer_input_grad(inputs, attrs):
    gy, w = inputs
    d = _float_4d("conv2d_input_grad", inputs)
    g = attrs["groups"]
    x_shape = (gy.shape[0], w.shape[1] * g) + tuple(attrs["input_size"])
    _check_operands("conv2d_input_grad", x_shape, w.shape[0], w.shape[1], g, inputs)
    _check_gy("conv2d_input_grad", gy.shape, x_shape, w.shape[0], w.shape[2:], attrs, inputs)
    return x_shape, d


def _infer_weight_grad(inputs, attrs):
    x, gy = inputs
    d = _float_4d("conv2d_weight_grad", inputs)
    g, k = attrs["groups"], tuple(attrs["kernel_size"])
    if x.shape[1] % g:
        raise ShapeError(f"loom.conv2d_weight_grad: {x.shape[1]} input channels do not split into groups={g} "
                         f"({_desc(inputs)})")
    o = gy.shape[1]
    _check_operands("conv2d_weight_grad", x.shape, o, x.shape[1] // g, g, inputs)
    _check_gy("conv2d_weight_grad", gy.shape, x.shape, o, k, attrs, inputs)
    return (o, x.shape[1] // g) + k, d


# ---------------------------------------------------------------- reference implementation

def _padded(x, p):
    if not any(p):
        return x
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))


def columns(x, k, ho_wo, attrs):
    """im2col: (N, C, H, W) -> (G, C/G * kh * kw, N * Ho * Wo), one copy of a strided view of the padded input."""
    s, d, g = attrs["stride"], attrs["dilation"], attrs["groups"]
    xp = np.ascontiguousarray(_padded(x, attrs["padding"]))
    n, c = xp.shape[:2]
    sn, sc, sh, sw = xp.strides
    win = as_strided(xp, (c, k[0], k[1], n) + tuple(ho_wo), (sc, sh * d[0], sw * d[1], sn, sh * s[0], sw * s[1]),
                     writeable=False)
    return win.reshape(g, (c // g) * k[0] * k[1], n * ho_wo[0] * ho_wo[1])


def _native():
    """The native convolution library the code generator registered (`loom.runtime.toolchain`), or None."""
    if not native_enabled():
        return None
    from loom.runtime import toolchain  # A leaf module: the code generator hands its library down through it.
    return toolchain.current().conv()


def _blas(macs):
    from loom.runtime import threads
    threads.prepare_blas(macs)


def _grouped(y, g):
    """(N, O, Ho, Wo) -> (G, O/G, N * Ho * Wo): output channels first, one matrix per group."""
    n, o, ho, wo = y.shape
    return np.ascontiguousarray(y.transpose(1, 0, 2, 3)).reshape(g, o // g, n * ho * wo)


def reference_conv2d(x, w, attrs):
    n, g = x.shape[0], attrs["groups"]
    o, k = w.shape[0], w.shape[2:]
    hw = _out_hw("conv2d", x.shape, k, attrs)
    cols = columns(x, k, hw, attrs)
    _blas(cols.size * (o // g))
    y = np.matmul(w.reshape(g, o // g, -1), cols)  # One GEMM per group: (G, O/G, N * L).
    return y.reshape(o, n, hw[0], hw[1]).transpose(1, 0, 2, 3)


def reference_input_grad(gy, w, attrs):
    n, g = gy.shape[0], attrs["groups"]
    o, cg, kh, kw = w.shape
    h, wd = attrs["input_size"]
    s, p, d = attrs["stride"], attrs["padding"], attrs["dilation"]
    ho, wo = gy.shape[2:]
    _blas(n * o * cg * kh * kw * ho * wo)
    cols = np.matmul(w.reshape(g, o // g, -1).transpose(0, 2, 1), _grouped(gy, g))  # (G, K, N * L)
    cols = cols.reshape(g * cg, kh, kw, n, ho, wo)
    xp = np.zeros((g * cg, n, h + p[0] + p[1], wd + p[2] + p[3]), np.result_type(gy, w))
    for i in range(kh):  # col2im: each kernel offset adds one strided slab.
        for j in range(kw):
            xp[:, :, i * d[0]:i * d[0] + s[0] * (ho - 1) + 1:s[0],
               j * d[1]:j * d[1] + s[1] * (wo - 1) + 1:s[1]] += cols[:, i, j]
    return xp[:, :, p[0]:p[0] + h, p[2]:p[2] + wd].transpose(1, 0, 2, 3)


def reference_weight_grad(x, gy, attrs):
    g = attrs["groups"]
    o, k = gy.shape[1], tuple(attrs["kernel_size"])
    cols = columns(x, k, gy.shape[2:], attrs)  # (G, K, N * L)
    _blas(cols.size * (o // g))
    gw = np.matmul(_grouped(gy, g), cols.transpose(0, 2, 1))  # (G, O/G, K)
    return gw.reshape((o, x.shape[1] // g) + k)


REFERENCE = {"conv2d": reference_conv2d, "conv2d_input_grad": reference_input_grad,
             "conv2d_weight_grad": reference_weight_grad}


def native_enabled() -> bool:
    """Whether float32 convolutions may use the native library (``LOOM_NATIVE_CONV=0`` turns it off)."""
    return os.environ.get("LOOM_NATIVE_CONV", "1") != "0"


def _impl(op):
    ref = REFERENCE[op]

    def impl(a, b, attrs):
        native = _native() if a.dtype == np.float32 else None
        if native is not None:
            out = native.run(op, a, b, attrs)
            if out is not None:
                return out
        return ref(a, b, attrs)
    return impl


# ---------------------------------------------------------------- backward rules (bilinear)

def _geometry(attrs):
    return {k: attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _conv2d_vjp(gy, x, w, out, attrs, needs=(True, True)):
    geo = _geometry(attrs)
    gx = P("conv2d_input_grad", gy, w, input_size=tuple(x.shape[2:]), **geo) if needs[0] else None
    gw = P("conv2d_weight_grad", x, gy, kernel_size=tuple(w.shape[2:]), **geo) if needs[1] else None
    return gx, gw


def _input_grad_vjp(gz, gy, w, out, attrs, needs=(True, True)):
    # z = A_w^T gy, with A_w the convolution by w: <z, gz> = <conv(gz, w), gy> = <w, weight_grad(gz, gy)>.
    geo = _geometry(attrs)
    ggy = P("conv2d", gz, w, **geo) if needs[0] else None
    gw = P("conv2d_weight_grad", gz, gy, kernel_size=tuple(w.shape[2:]), **geo) if needs[1] else None
    return ggy, gw


def _weight_grad_vjp(gz, x, gy, out, attrs, needs=(True, True)):
    # <z, gz> = <conv(x, gz), gy> = <x, input_grad(gy, gz)>.
    geo = _geometry(attrs)
    gx = P("conv2d_input_grad", gy, gz, input_size=tuple(x.shape[2:]), **geo) if needs[0] else None
    ggy = P("conv2d", x, gz, **geo) if needs[1] else None
    return gx, ggy


# ---------------------------------------------------------------- max pooling

def _pool_attrs(inputs, attrs):
    op = "max_pool2d_index"
    _attr_names(op, attrs, ("kernel_size", "stride", "padding", "dilation"))
    for name, n, lo in (("kernel_size", 2, 1), ("stride", 2, 1), ("padding", 4, 0), ("dilation", 2, 1)):
        v = attrs[name]
        _ints_attr(op, name, v, what=f"a tuple of {n} ints")
        if len(v) != n:
            raise _bad_attr(op, name, v, f"a tuple of {n} ints", ShapeError)
        for s in v:
            if s < lo:
                raise _bad_attr(op, name, v, f"{n} ints >= {lo}", ShapeError)


def _pool_out(x_shape, attrs):
    k, s, p, d = attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"]
    hw = (out_size(x_shape[2], k[0], s[0], p[0], p[1], d[0]), out_size(x_shape[3], k[1], s[1], p[2], p[3], d[1]))
    for ax, (o, lo) in enumerate(zip(hw, (p[0], p[2]))):
        # Every window must hold an input element: it starts inside the input or its low padding.
        if o < 1 or (o - 1) * s[ax] - lo >= x_shape[2 + ax] or lo > d[ax] * (k[ax] - 1):
            raise ShapeError(f"loom.max_pool2d_index: windows of {_show(attrs)} do not each cover an element of "
                             f"input {fmt_shape(x_shape)}")
    return hw


def _infer_pool_index(inputs, attrs):
    x = inputs[0]
    if len(x.shape) != 4:
        raise ShapeError(f"loom.max_pool2d_index: expects a 4-d input (N, C, H, W), got {_desc(inputs)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.max_pool2d_index: expects a floating point input, got {_desc(inputs)}")
    return (x.shape[0], x.shape[1]) + _pool_out(x.shape, attrs), dt.int64


def pool_index(x, attrs, xp=np):
    """Flat index (h * W + w) of the element each max-pooling window picks, in NumPy or jax.numpy (`xp`).

    PyTorch's loop, one pass per kernel tap over every window at once: start
    at the window's first real (unpadded) element, move on `v > best or
    isnan(v)`. So padding never wins, the first maximum does, and a window
    holding NaN picks its last NaN.
    """
    k, s, p, d = attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"]
    h, w = x.shape[2:]
    ho, wo = _pool_out(x.shape, attrs)
    xpad = xp.pad(x, ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])), constant_values=-np.inf) if any(p) else x
    rows = [np.arange(ho)[:, None] * s[0] - p[0] + i * d[0] for i in range(k[0])]  # (Ho, 1) per tap row
    cols = [np.arange(wo)[None, :] * s[1] - p[2] + j * d[1] for j in range(k[1])]  # (1, Wo) per tap column
    # The first real element of each window: its first row and first column inside the input.
    first_row = np.select([r >= 0 for r in rows], rows, 0)
    first_col = np.select([c >= 0 for c in cols], cols, 0)
    shape = tuple(x.shape[:2]) + (ho, wo)
    best = xp.full(shape, -np.inf, x.dtype)
    flat = xp.broadcast_to((first_row * w + first_col).astype(np.int64), shape)
    eager = xp is np
    check_nan = not eager or bool(np.isnan(x).any())  # NumPy may look at values; a jax trace may not.
    if eager:
        flat, upd, step = flat.copy(), np.empty(shape, bool), np.empty(shape, np.int64)
    for i in range(k[0]):
        for j in range(k[1]):
            tap = xpad[:, :, i * d[0]:i * d[0] + s[0] * (ho - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (wo - 1) + 1:s[1]]
            at = (rows[i] * w + cols[j]).astype(np.int64)
            if eager:  # Branch-free blends into buffers made once (a masked copy mispredicts).
                np.greater(tap, best, out=upd)
                if check_nan:
                    upd |= np.isnan(tap)
                np.maximum(best, tap, out=best)  # Equals where(upd, tap, best), NaN included.
                np.subtract(at, flat, out=step)
                step *= upd
                flat += step
            else:
                upd = tap > best
                if check_nan:
                    upd = upd | xp.isnan(tap)
                best = xp.where(upd, tap, best)
                flat = xp.where(upd, at, flat)
    return flat


def _pool_impl(x, attrs):
    native = _native()
    if native is not None:
        out = native.max_pool2d_index(x, attrs, (x.shape[0], x.shape[1]) + _pool_out(x.shape, attrs))
        if out is not None:
            return out
    return pool_index(x, attrs)


register("max_pool2d_index", "index", 1, _infer_pool_index, _pool_impl, check_attrs=_pool_attrs)


for _op, _infer, _vjp in (("conv2d", _infer_conv2d, _conv2d_vjp),
                          ("conv2d_input_grad", _infer_input_grad, _input_grad_vjp),
                          ("conv2d_weight_grad", _infer_weight_grad, _weight_grad_vjp)):
    register(_op, "contraction", 2, _infer, _impl(_op), _vjp, check_attrs=_conv_attrs(_op))
