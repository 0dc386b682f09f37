"""Convolution, pooling and resampling, written in movement primitives and one matmul.

conv1d and conv2d are the exception: they apply the ``conv2d`` library
primitive (`loom.ir.conv`, native through oneDNN), whose backward rules are
its two adjoint primitives; conv_transpose1d/2d apply its adjoint in the
input, and max_pool1d/2d the ``max_pool2d_index`` primitive. The 3-d ops
keep the decomposition.

Everything here rests on one window extraction. `_windows` turns an axis of size
n into two axes (k, o) holding out[j, t] = x[j*d + t*s] (kernel offset j,
output position t) with no index tensors: k broadcast copies of the axis are
flattened, padded and re-read with rows of n + d elements, which shifts copy j
by j*d; a strided slice then applies the stride. Non-overlapping windows
(pooling with stride >= kernel) are a plain reshape. Its adjoint `_fold_axis`
(col2im along one axis) runs the same steps backwards and sums the k copies.

- conv = windows of the padded input, then one (grouped) matmul over C*K.
- conv_transpose = matmul to columns, then the adjoint fold (col2im), then crop.
- max pooling = windows, first argmax per window, gather (PyTorch's tie rule).
- avg pooling = windows, sum, divide by a divisor that depends on shapes only.
- adaptive pooling and interpolation select source indices computed from the
  shapes (as PyTorch computes them, in the same float precision) by slicing when
  they are regular and by `gather` otherwise; linear modes combine taps with
  weights per axis, last axis first, the order of PyTorch's CPU kernels.

Index and weight tables are NumPy arrays derived from shapes only; values never
leave the graph, so every op here is lazy and differentiable to any order.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from loom import dtypes as dt
from loom import autocast as _autocast
from loom.errors import DTypeError, ShapeError, fmt_shape
from loom.functional.indexing import gather
from loom.functional.linalg import matmul
from loom.functional.math import div, isnan, minimum, where
from loom.functional.reduce import amax, amin
from loom.functional.shape import _slice_dim
from loom.tensor import Tensor, apply, arange, broadcast_to, tensor

_IntOrTuple = int | Sequence[int]


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


# ================================================================ argument checks

def _tuple(value, n: int, name: str, op: str) -> tuple[int, ...]:
    """An int or a sequence of ints as an n-tuple (a 1-sequence is repeated, as PyTorch does)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * n
    try:
        vals = tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(f"loom.{op}: {name} must be an int or a tuple of {n} ints, got {value!r}") from None
    if len(vals) == 1:
        return vals * n
    if len(vals) != n:
        raise ShapeError(f"loom.{op}: {name} must be an int or a tuple of {n} ints, got {value!r}")
    return vals


def _positive(vals: tuple[int, ...], name: str, op: str) -> None:
    if any(v <= 0 for v in vals):
        raise ShapeError(f"loom.{op}: non-positive {name} is not supported, got {name}={list(vals)}")


def _batched(x, nsp: int, op: str) -> tuple[Tensor, bool]:
    """The input with a batch dim, and whether it had none (PyTorch's unbatched (C, *spatial) form)."""
    x = _t(x)
    if x.ndim == nsp + 1:
        return x.reshape((1,) + tuple(x.shape)), True
    if x.ndim != nsp + 2:
        raise ShapeError(f"loom.{op}: expected a {nsp + 1}-d (unbatched) or {nsp + 2}-d (batched) input, "
                         f"got shape {fmt_shape(x.shape)}")
    return x, False


def _unbatch(y: Tensor, unbatched: bool) -> Tensor:
    return y.reshape(tuple(y.shape[1:])) if unbatched else y


def _sizes(shape) -> str:
    return "(" + " x ".join(str(s) for s in shape) + ")"


# ================================================================ windows (im2col) and their adjoint

def _pad_axes(x: Tensor, pads: dict[int, tuple[int, int]], value=0) -> Tensor:
    """Constant padding of some axes (negative amounts crop)."""
    for ax, (lo, hi) in pads.items():
        if lo < 0 or hi < 0:
            x = _slice_dim(x, ax, max(-lo, 0), x.shape[ax] - max(-hi, 0))
    full = [(0, 0)] * x.ndim
    for ax, (lo, hi) in pads.items():
        full[ax] = (max(lo, 0), max(hi, 0))
    if all(p == (0, 0) for p in full):
        return x
    return apply("pad", (x,), {"pads": full, "value": value})


def _resize_axis(x: Tensor, ax: int, size: int) -> Tensor:
    """Crop or zero-pad axis `ax` at its end to `size`."""
    return _pad_axes(x, {ax: (0, size - x.shape[ax])})


def _swap_next(x: Tensor, ax: int) -> Tensor:
    perm = list(range(x.ndim))
    perm[ax], perm[ax + 1] = perm[ax + 1], perm[ax]
    return x.permute(perm)


def _windows(x: Tensor, ax: int, k: int, s: int, d: int, o: int) -> Tensor:
    """Replace axis `ax` (size n) by axes (k, o) with out[.., j, t, ..] = x[.., j*d + t*s, ..].

    Needs (k - 1) * d + (o - 1) * s < n.
    """
    n = x.shape[ax]
    pre, post = list(x.shape[:ax]), list(x.shape[ax + 1:])
    if k == 1:
        return _slice_dim(x, ax, 0, (o - 1) * s + 1, s).reshape(pre + [1, o] + post)
    if (k - 1) * d < s:
        # Windows do not overlap: blocks of s elements, each holding one window at its start.
        y = _resize_axis(x, ax, o * s).reshape(pre + [o, s] + post)
        return _swap_next(_slice_dim(y, ax + 1, 0, (k - 1) * d + 1, d), ax)
    rest = math.prod(post)
    y = x.reshape(pre + [1, n * rest])
    y = y.expand(pre + [k, n * rest]).reshape(pre + [k * n * rest])
    y = _pad_axes(y, {ax: (0, k * d * rest)})
    y = y.reshape(pre + [k, n + d] + post)
    return _slice_dim(y, ax + 1, 0, (o - 1) * s + 1, s)


def _fold_axis(y: Tensor, ax: int, n: int, s: int, d: int) -> Tensor:
    """The adjoint of `_windows`: axes (k, o) at `ax` back to one axis of size n, summing overlaps."""
    k, o = y.shape[ax], y.shape[ax + 1]
    pre, post = list(y.shape[:ax]), list(y.shape[ax + 2:])
    rest = math.prod(post)
    if s > 1:  # Interleave s - 1 zeros after each output position.
        y = _pad_axes(y.reshape(pre + [k, o, 1] + post), {ax + 2: (0, s - 1)})
        y = y.reshape(pre + [k, o * s] + post)
    y = _resize_axis(y, ax + 1, n + d)
    y = y.reshape(pre + [k * (n + d) * rest])
    y = _slice_dim(y, ax, 0, k * n * rest).reshape(pre + [k, n] + post)
    return y.sum(ax)


def _unfold_nd(x: Tensor, k, s, d, o) -> Tensor:
    """(B, C, *n) -> (B, C, k1, o1, ..., kS, oS): the windows of every spatial axis."""
    for i in reversed(range(len(k))):
        x = _windows(x, 2 + i, k[i], s[i], d[i], o[i])
    return x


def _fold_nd(y: Tensor, n, s, d) -> Tensor:
    """(B, C, k1, o1, ..., kS, oS) -> (B, C, *n), summing the windows back (col2im)."""
    for i in reversed(range(len(n))):
        y = _fold_axis(y, 2 + 2 * i, n[i], s[i], d[i])
    return y


def _kernel_last(win: Tensor, nsp: int) -> Tensor:
    """(B, C, k1, o1, ..., kS, oS) -> (B, C, o1, ..., oS, k1 * ... * kS)."""
    perm = [0, 1] + [3 + 2 * i for i in range(nsp)] + [2 + 2 * i for i in range(nsp)]
    y = win.permute(perm)
    return y.reshape(list(y.shape[:2 + nsp]) + [math.prod(y.shape[2 + nsp:])])


# ================================================================ convolution

def _conv_padding(padding, k, d, s, nsp: int, op: str) -> list[tuple[int, int]]:
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nsp
        if padding == "same":
            if any(v != 1 for v in s):
                raise ShapeError(f"loom.{op}: padding='same' is not supported for strided convolutions "
                                 f"(stride={list(s)})")
            totals = [di * (ki - 1) for ki, di in zip(k, d)]
            return [(t // 2, t - t // 2) for t in totals]
        raise ValueError(f"loom.{op}: padding must be an int, a tuple of ints, 'same' or 'valid', got {padding!r}")
    p = _tuple(padding, nsp, "padding", op)
    if any(v < 0 for v in p):
        raise ShapeError(f"loom.{op}: negative padding is not supported, got padding={list(p)}")
    return [(v, v) for v in p]


def _check_float_pair(op: str, x: Tensor, w: Tensor, bias) -> None:
    for name, v in (("weight", w), ("bias", bias)):
        if v is not None and v.dtype is not x.dtype:
            raise DTypeError(f"loom.{op}: input ({x.dtype.name}) and {name} ({v.dtype.name}) must have "
                             "the same dtype")


def _check_bias(op: str, bias, channels: int) -> Tensor | None:
    if bias is None:
        return None
    bias = _t(bias)
    if tuple(bias.shape) != (channels,):
        raise ShapeError(f"loom.{op}: expected bias of shape [{channels}] (one per output channel), "
                         f"got {fmt_shape(bias.shape)}")
    return bias


def _add_bias(y: Tensor, bias: Tensor | None, nsp: int) -> Tensor:
    if bias is None:
        return y
    return y + bias.reshape([1, bias.shape[0]] + [1] * nsp)


def _check_groups(groups, op: str) -> int:
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups <= 0:
        raise ShapeError(f"loom.{op}: groups must be a positive integer, got {groups!r}")
    return int(groups)


def _conv(op: str, nsp: int, input, weight, bias, stride, padding, dilation, groups) -> Tensor:
    input, weight, bias = _autocast.lower(input, weight, bias)
    x, unbatched = _batched(input, nsp, op)
    w = _t(weight)
    if w.ndim != nsp + 2:
        raise ShapeError(f"loom.{op}: expected a {nsp + 2}-d weight (out_channels, in_channels / groups, "
                         f"*kernel), got {fmt_shape(w.shape)}")
    g = _check_groups(groups, op)
    n_batch, c = x.shape[:2]
    o_ch, cg = w.shape[:2]
    k = tuple(w.shape[2:])
    if o_ch % g:
        raise ShapeError(f"loom.{op}: given groups={g}, expected weight to be divisible by {g} at dim 0, "
                         f"got weight of shape {fmt_shape(w.shape)}")
    if c != cg * g:
        raise ShapeError(f"loom.{op}: given groups={g} and weight of shape {fmt_shape(w.shape)}, expected "
                         f"input {fmt_shape(x.shape)} to have {cg * g} channels, but got {c} channels")
    bias = _check_bias(op, bias, o_ch)
    _check_float_pair(op, x, w, bias)
    s = _tuple(stride, nsp, "stride", op)
    _positive(s, "stride", op)
    d = _tuple(dilation, nsp, "dilation", op)
    _positive(d, "dilation", op)
    pads = _conv_padding(padding, k, d, s, nsp, op)
    n = [size + lo + hi for size, (lo, hi) in zip(x.shape[2:], pads)]
    eff = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    if any(e > size for e, size in zip(eff, n)):
        raise ShapeError(f"loom.{op}: padded input size per channel {_sizes(n)} is smaller than the "
                         f"(dilated) kernel size {_sizes(eff)}; input {fmt_shape(x.shape)}, weight "
                         f"{fmt_shape(w.shape)}. The kernel can't be larger than the padded input")
    o = [(size - e) // si + 1 for size, e, si in zip(n, eff, s)]
    if nsp in (1, 2):  # The conv2d library primitive (1-d as a 2-d convolution of height 1).
        if nsp == 1:
            x, w = x.unsqueeze(2), w.unsqueeze(2)
            s, d, pads = (1,) + s, (1,) + d, [(0, 0)] + pads
        attrs = {"stride": tuple(s), "padding": tuple(v for lo_hi in pads for v in lo_hi), "dilation": tuple(d),
                 "groups": g}
        y = apply("conv2d", (x, w), attrs)
        if nsp == 1:
            y = y.squeeze(2)
        return _unbatch(_add_bias(y, bias, nsp), unbatched)
    x = _pad_axes(x, {2 + i: p for i, p in enumerate(pads)})
    cols = _unfold_nd(x, k, s, d, o)                      # (N, C, k1, o1, ..., kS, oS)
    perm = [1] + [2 + 2 * i for i in range(nsp)] + [0] + [3 + 2 * i for i in range(nsp)]
    cols = cols.permute(perm).reshape(g, cg * math.prod(k), n_batch * math.prod(o))
    y = apply("matmul", (w.reshape(g, o_ch // g, cg * math.prod(k)), cols), {})  # (G, O/G, N*L)
    y = y.reshape([o_ch, n_batch] + o).permute([1, 0] + list(range(2, nsp + 2)))
    return _unbatch(_add_bias(y, bias, nsp), unbatched)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
           padding: _IntOrTuple | str = 0, dilation: _IntOrTuple = 1, groups: int = 1) -> Tensor:
    """1-d convolution (cross-correlation) over (N, C, L) or unbatched (C, L) input.

    Parameters
    ----------
    input : Tensor
        (N, C_in, L) or (C_in, L).
    weight : Tensor
        (C_out, C_in / groups, kL).
    bias : Tensor, optional
        (C_out,).
    stride, dilation : int or tuple
    padding : int, tuple, 'same' or 'valid'
    groups : int
        Channels are split into this many independent groups.

    Examples
    --------
    >>> x = loom.ones(1, 1, 5)
    >>> loom.nn.functional.conv1d(x, loom.ones(1, 1, 3)).tolist()
    [[[3.0, 3.0, 3.0]]]
    """
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
           padding: _IntOrTuple | str = 0, dilation: _IntOrTuple = 1, groups: int = 1) -> Tensor:
    """2-d convolution (cross-correlation) over (N, C, H, W) or unbatched (C, H, W) input.

    One ``conv2d`` library primitive (native through oneDNN where it is
    installed, else im2col and one matmul per group in NumPy); its gradients
    are the ``conv2d_input_grad`` and ``conv2d_weight_grad`` primitives.

    Parameters
    ----------
    input : Tensor
        (N, C_in, H, W) or (C_in, H, W).
    weight : Tensor
        (C_out, C_in / groups, kH, kW).
    bias : Tensor, optional
        (C_out,).
    stride, dilation : int or tuple of 2 ints
    padding : int, tuple of 2 ints, 'same' or 'valid'
    groups : int
        Channels are split into this many independent groups (groups = C_in: depthwise).

    Examples
    --------
    >>> x = loom.ones(1, 1, 4, 4)
    >>> loom.nn.functional.conv2d(x, loom.ones(2, 1, 3, 3), padding=1).shape
    loom.Size([1, 2, 4, 4])
    """
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
           padding: _IntOrTuple | str = 0, dilation: _IntOrTuple = 1, groups: int = 1) -> Tensor:
    """3-d convolution over (N, C, D, H, W) or unbatched (C, D, H, W) input; see `conv2d`.

    Examples
    --------
    >>> x = loom.ones(1, 1, 3, 3, 3)
    >>> loom.nn.functional.conv3d(x, loom.ones(1, 1, 3, 3, 3)).tolist()
    [[[[[27.0]]]]]
    """
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(op: str, nsp: int, input, weight, bias, stride, padding, output_padding, groups,
                    dilation) -> Tensor:
    input, weight, bias = _autocast.lower(input, weight, bias)
    x, unbatched = _batched(input, nsp, op)
    w = _t(weight)
    if w.ndim != nsp + 2:
        raise ShapeError(f"loom.{op}: expected a {nsp + 2}-d weight (in_channels, out_channels / groups, "
                         f"*kernel), got {fmt_shape(w.shape)}")
    g = _check_groups(groups, op)
    n_batch, c = x.shape[:2]
    c_in, og = w.shape[:2]
    k = tuple(w.shape[2:])
    if c != c_in:
        raise ShapeError(f"loom.{op}: weight of shape {fmt_shape(w.shape)} expects input "
                         f"{fmt_shape(x.shape)} to have {c_in} channels, but got {c} channels")
    if c_in % g:
        raise ShapeError(f"loom.{op}: given groups={g}, expected weight to be divisible by {g} at dim 0, "
                         f"got weight of shape {fmt_shape(w.shape)}")
    o_ch = og * g
    bias = _check_bias(op, bias, o_ch)
    _check_float_pair(op, x, w, bias)
    s = _tuple(stride, nsp, "stride", op)
    _positive(s, "stride", op)
    d = _tuple(dilation, nsp, "dilation", op)
    _positive(d, "dilation", op)
    p = _tuple(padding, nsp, "padding", op)
    op_pad = _tuple(output_padding, nsp, "output_padding", op)
    if any(v < 0 for v in p + op_pad):
        raise ShapeError(f"loom.{op}: negative padding is not supported, got padding={list(p)}, "
                         f"output_padding={list(op_pad)}")
    if any(v >= max(si, di) for v, si, di in zip(op_pad, s, d)):
        raise ShapeError(f"loom.{op}: output padding must be smaller than either stride or dilation, got "
                         f"output_padding={list(op_pad)}, stride={list(s)}, dilation={list(d)}")
    i_sp = list(x.shape[2:])
    full = [(i - 1) * si + di * (ki - 1) + 1 + v for i, si, di, ki, v in zip(i_sp, s, d, k, op_pad)]
    out = [f - 2 * pi for f, pi in zip(full, p)]
    if any(v <= 0 for v in out):
        raise ShapeError(f"loom.{op}: input {fmt_shape(x.shape)} with weight {fmt_shape(w.shape)}, "
                         f"stride={list(s)}, padding={list(p)} gives a non-positive output size {_sizes(out)}")
    if nsp in (1, 2) and all(v < si for v, si in zip(op_pad, s)):
        # The adjoint of the conv2d primitive in its input (1-d as 2-d of height 1). With
        # output_padding >= stride (allowed when dilation is larger) the sizes leave its range.
        if nsp == 1:
            x, w, s, d, p, out = x.unsqueeze(2), w.unsqueeze(2), (1,) + s, (1,) + d, (0,) + p, [1] + out
        attrs = {"stride": tuple(s), "padding": tuple(v for pi in p for v in (pi, pi)), "dilation": tuple(d),
                 "groups": g, "input_size": tuple(out)}
        y = apply("conv2d_input_grad", (x, w), attrs)
        if nsp == 1:
            y = y.squeeze(2)
        return _unbatch(_add_bias(y, bias, nsp), unbatched)
    cig, kk = c_in // g, math.prod(k)
    xm = x.permute([1, 0] + list(range(2, nsp + 2))).reshape(g, cig, n_batch * math.prod(i_sp))
    wm = w.reshape(g, cig, og * kk).permute(0, 2, 1)
    cols = apply("matmul", (wm, xm), {})                  # (G, O/G * K, N * L_in)
    cols = cols.reshape([o_ch] + list(k) + [n_batch] + i_sp)
    perm = [nsp + 1, 0] + [v for i in range(nsp) for v in (1 + i, nsp + 2 + i)]
    y = _fold_nd(cols.permute(perm), full, s, d)         # (N, O, *full)
    y = _pad_axes(y, {2 + i: (-pi, -pi) for i, pi in enumerate(p)})
    return _unbatch(_add_bias(y, bias, nsp), unbatched)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
                     padding: _IntOrTuple = 0, output_padding: _IntOrTuple = 0, groups: int = 1,
                     dilation: _IntOrTuple = 1) -> Tensor:
    """1-d transposed convolution (the gradient of conv1d with respect to its input); see `conv_transpose2d`.

    Examples
    --------
    >>> loom.nn.functional.conv_transpose1d(loom.ones(1, 1, 2), loom.ones(1, 1, 2)).tolist()
    [[[1.0, 2.0, 1.0]]]
    """
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding,
                           groups, dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
                     padding: _IntOrTuple = 0, output_padding: _IntOrTuple = 0, groups: int = 1,
                     dilation: _IntOrTuple = 1) -> Tensor:
    """2-d transposed convolution ("deconvolution"), as `torch.nn.functional.conv_transpose2d`.

    Computed as a matmul of the weight with the input (one column per input
    position) followed by col2im, which sums each column into the output; the
    output size is (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.

    Parameters
    ----------
    input : Tensor
        (N, C_in, H, W) or (C_in, H, W).
    weight : Tensor
        (C_in, C_out / groups, kH, kW).
    bias : Tensor, optional
        (C_out,).
    stride, padding, output_padding, dilation : int or tuple of 2 ints
    groups : int

    Examples
    --------
    >>> x = loom.ones(1, 1, 2, 2)
    >>> loom.nn.functional.conv_transpose2d(x, loom.ones(1, 3, 3, 3), stride=2).shape
    loom.Size([1, 3, 5, 5])
    """
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding,
                           groups, dilation)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: _IntOrTuple = 1,
                     padding: _IntOrTuple = 0, output_padding: _IntOrTuple = 0, groups: int = 1,
                     dilation: _IntOrTuple = 1) -> Tensor:
    """3-d transposed convolution; see `conv_transpose2d`.

    Examples
    --------
    >>> loom.nn.functional.conv_transpose3d(loom.ones(1, 1, 1, 1, 1), loom.ones(1, 1, 2, 2, 2)).shape
    loom.Size([1, 1, 2, 2, 2])
    """
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding,
                           groups, dilation)


def unfold(input: Tensor, kernel_size: _IntOrTuple, dilation: _IntOrTuple = 1, padding: _IntOrTuple = 0,
           stride: _IntOrTuple = 1) -> Tensor:
    """Sliding blocks of a (N, C, H, W) or (C, H, W) input as columns (im2col), as `F.unfold`.

    Returns (N, C * kH * kW, L), L the number of blocks; rows are ordered channel
    first, then kernel offsets in row-major order.

    Examples
    --------
    >>> x = loom.arange(9, dtype=loom.float32).reshape(1, 1, 3, 3)
    >>> loom.nn.functional.unfold(x, 2)[0, :, 0].tolist()
    [0.0, 1.0, 3.0, 4.0]
    """
    op = "unfold"
    x, unbatched = _batched(input, 2, op)
    k = _tuple(kernel_size, 2, "kernel_size", op)
    d = _tuple(dilation, 2, "dilation", op)
    p = _tuple(padding, 2, "padding", op)
    s = _tuple(stride, 2, "stride", op)
    for vals, name in ((k, "kernel_size"), (d, "dilation"), (s, "stride")):
        _positive(vals, name, op)
    if any(v < 0 for v in p):
        raise ShapeError(f"loom.unfold: negative padding is not supported, got padding={list(p)}")
    n = [size + 2 * pi for size, pi in zip(x.shape[2:], p)]
    eff = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    if any(e > size for e, size in zip(eff, n)):
        raise ShapeError(f"loom.unfold: padded input size {_sizes(n)} of input {fmt_shape(x.shape)} is "
                         f"smaller than the (dilated) kernel size {_sizes(eff)}")
    o = [(size - e) // si + 1 for size, e, si in zip(n, eff, s)]
    x = _pad_axes(x, {2: (p[0], p[0]), 3: (p[1], p[1])})
    cols = _unfold_nd(x, k, s, d, o).permute(0, 1, 2, 4, 3, 5)
    cols = cols.reshape(x.shape[0], x.shape[1] * k[0] * k[1], o[0] * o[1])
    return _unbatch(cols, unbatched)


def fold(input: Tensor, output_size: _IntOrTuple, kernel_size: _IntOrTuple, dilation: _IntOrTuple = 1,
         padding: _IntOrTuple = 0, stride: _IntOrTuple = 1) -> Tensor:
    """Sum columns (N, C * kH * kW, L) back into an image (N, C, H, W) (col2im), as `F.fold`.

    The adjoint of `unfold`: overlapping blocks add up.

    Examples
    --------
    >>> cols = loom.ones(1, 4, 4)
    >>> loom.nn.functional.fold(cols, 3, 2).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    op = "fold"
    x = _t(input)
    unbatched = x.ndim == 2
    if x.ndim not in (2, 3):
        raise ShapeError(f"loom.fold: expected a 2-d (unbatched) or 3-d (batched) input, got "
                         f"{fmt_shape(x.shape)}")
    if unbatched:
        x = x.reshape((1,) + tuple(x.shape))
    size = _tuple(output_size, 2, "output_size", op)
    k = _tuple(kernel_size, 2, "kernel_size", op)
    d = _tuple(dilation, 2, "dilation", op)
    p = _tuple(padding, 2, "padding", op)
    s = _tuple(stride, 2, "stride", op)
    for vals, name in ((k, "kernel_size"), (d, "dilation"), (s, "stride")):
        _positive(vals, name, op)
    kk = k[0] * k[1]
    if x.shape[1] % kk:
        raise ShapeError(f"loom.fold: expected size of input's dim 1 to be divisible by the product of "
                         f"kernel_size {list(k)} ({kk}), got input {fmt_shape(x.shape)}")
    n = [v + 2 * pi for v, pi in zip(size, p)]
    o = [(v - di * (ki - 1) - 1) // si + 1 for v, ki, di, si in zip(n, k, d, s)]
    if any(v <= 0 for v in o) or o[0] * o[1] != x.shape[2]:
        raise ShapeError(f"loom.fold: output_size {list(size)}, kernel_size {list(k)}, dilation {list(d)}, "
                         f"padding {list(p)} and stride {list(s)} give {o[0]} x {o[1]} blocks, but input "
                         f"{fmt_shape(x.shape)} has {x.shape[2]} in its last dim")
    c = x.shape[1] // kk
    cols = x.reshape(x.shape[0], c, k[0], k[1], o[0], o[1]).permute(0, 1, 2, 4, 3, 5)
    y = _fold_nd(cols, n, s, d)
    y = _pad_axes(y, {2: (-p[0], -p[0]), 3: (-p[1], -p[1])})
    return _unbatch(y, unbatched)


# ================================================================ pooling

def _pool_geometry(op: str, x: Tensor, nsp: int, kernel_size, stride, padding, dilation, ceil_mode: bool):
    """Kernel, stride, dilation, per-axis (low, high) padding and output sizes, as PyTorch computes them."""
    k = _tuple(kernel_size, nsp, "kernel_size", op)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _tuple(stride, nsp, "stride", op)
    p = _tuple(padding, nsp, "padding", op)
    d = _tuple(dilation, nsp, "dilation", op)
    _positive(k, "kernel_size", op)
    _positive(s, "stride", op)
    _positive(d, "dilation", op)
    for pi, ki, di in zip(p, k, d):
        if pi < 0 or pi > (di * (ki - 1) + 1) // 2:
            raise ShapeError(f"loom.{op}: pad should be at most half of effective kernel size, but got "
                             f"padding={list(p)}, kernel_size={list(k)} and dilation={list(d)}")
    n = list(x.shape[2:])
    out = []
    for ni, ki, si, pi, di in zip(n, k, s, p, d):
        o = (ni + 2 * pi - di * (ki - 1) - 1 + (si - 1 if ceil_mode else 0)) // si + 1
        if ceil_mode and (o - 1) * si >= ni + pi:
            o -= 1  # The last window must start inside the input or its left padding.
        out.append(o)
    if any(o <= 0 for o in out):
        raise ShapeError(f"loom.{op}: output size is too small: input {fmt_shape(x.shape)} with "
                         f"kernel_size={list(k)}, stride={list(s)}, padding={list(p)}, dilation={list(d)} "
                         f"gives {_sizes(out)}")
    pads = [(pi, max(pi, (o - 1) * si + di * (ki - 1) + 1 - ni - pi))
            for ni, ki, si, pi, di, o in zip(n, k, s, p, d, out)]
    return k, s, d, pads, out


def _lowest(d: dt.DType):
    if d.is_floating_point:
        return -math.inf
    if d is dt.bool_:
        return False
    return int(np.iinfo(d.np).min)


def _first_max(win: Tensor) -> tuple[Tensor, Tensor]:
    """Max over the last axis and its index, chosen as PyTorch's pooling kernels choose it.

    The first maximum wins, except that a window holding NaN takes its last NaN
    (the kernels update on `val > max || isnan(val)`). The gradient goes to that element.
    """
    v = win.detach()
    k = v.shape[-1]
    m = amax(v, -1, keepdim=True)  # NaN where the window holds one.
    pos = broadcast_to(arange(k), v.shape, "max_pool")
    hit = v == m
    idx = amin(where(hit, pos, k), -1, keepdim=True)
    if v.dtype.is_floating_point:
        nan = isnan(v)
        last_nan = amax(where(nan, pos, -1), -1, keepdim=True)
        idx = where(isnan(m), last_nan, idx)
    return gather(win, -1, idx).squeeze(-1), idx.squeeze(-1)


def _axis_column(values, ax: int, ndim: int) -> Tensor:
    """An int64 table of one axis shaped to broadcast along axis `ax` of an ndim-d tensor."""
    shape = [1] * ndim
    shape[ax] = len(values)
    return tensor(np.asarray(values, dtype=np.int64).reshape(shape))


def _flat_index(pos: list[Tensor], n: Sequence[int]) -> Tensor:
    """Row-major flat index over the spatial sizes `n` from per-axis positions."""
    flat = pos[0]
    for p, size in zip(pos[1:], n[1:]):
        flat = flat * size + p
    return flat


def _max_pool(op: str, nsp: int, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices):
    x, unbatched = _batched(input, nsp, op)
    k, s, d, pads, o = _pool_geometry(op, x, nsp, kernel_size, stride, padding, dilation, ceil_mode)
    if nsp in (1, 2) and x.dtype.is_floating_point:
        # The max_pool2d_index primitive picks each window's element; a gather takes its value (and the
        # gradient, through gather's backward). 1-d pools as 2-d of height 1.
        if nsp == 1:
            x4, k, s, d, pads = x.unsqueeze(2), (1,) + k, (1,) + s, (1,) + d, [(0, 0)] + pads
        else:
            x4 = x
        attrs = {"kernel_size": tuple(k), "stride": tuple(s), "padding": tuple(v for lo_hi in pads for v in lo_hi),
                 "dilation": tuple(d)}
        idx = apply("max_pool2d_index", (x4.detach(),), attrs)
        n, c = x.shape[:2]
        flat_idx = idx.reshape(n, c, -1)
        values = apply("gather", (x.reshape(n, c, -1), flat_idx), {"axis": 2}).reshape(idx.shape)
        if nsp == 1:
            values, idx = values.squeeze(2), idx.squeeze(2)
        values = _unbatch(values, unbatched)
        return (values, _unbatch(idx, unbatched)) if return_indices else values
    xp = _pad_axes(x, {2 + i: p for i, p in enumerate(pads)}, _lowest(x.dtype))
    values, kidx = _first_max(_kernel_last(_unfold_nd(xp, k, s, d, o), nsp))
    values = _unbatch(values, unbatched)
    if not return_indices:
        return values
    pos, inner = [], math.prod(k)
    for i in range(nsp):
        inner //= k[i]
        ki = (kidx // inner) % k[i]
        start = _axis_column([t * s[i] - pads[i][0] for t in range(o[i])], 2 + i, nsp + 2)
        pos.append(start + ki * d[i])
    return values, _unbatch(_flat_index(pos, x.shape[2:]), unbatched)


def max_pool1d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, dilation: _IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False):
    """1-d max pooling over (N, C, L) or (C, L); see `max_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.max_pool1d(loom.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2).tolist()
    [[[3.0, 5.0]]]
    """
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, dilation: _IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-d max pooling over (N, C, H, W) or (C, H, W), as `torch.nn.functional.max_pool2d`.

    Padding counts as -inf. Within a window the first maximum (row-major) wins and
    receives the gradient, as in PyTorch; with `return_indices` the flat index
    (h * W + w) of that element in the unpadded input comes back as well.

    Parameters
    ----------
    kernel_size : int or tuple of 2 ints
    stride : int or tuple, optional
        Defaults to kernel_size.
    padding, dilation : int or tuple
    ceil_mode : bool
        Round the output size up (windows may hang over the end).
    return_indices : bool

    Examples
    --------
    >>> x = loom.arange(16, dtype=loom.float32).reshape(1, 1, 4, 4)
    >>> loom.nn.functional.max_pool2d(x, 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, dilation: _IntOrTuple = 1, ceil_mode: bool = False,
               return_indices: bool = False):
    """3-d max pooling over (N, C, D, H, W) or (C, D, H, W); see `max_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.max_pool3d(loom.ones(1, 1, 2, 2, 2), 2).shape
    loom.Size([1, 1, 1, 1, 1])
    """
    input, = _autocast.full(input)
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def _window_counts(n: int, k: int, s: int, pad: int, o: int, include_pad: bool) -> np.ndarray:
    """Elements per window along one axis, as PyTorch's avg_pool counts them."""
    start = np.arange(o) * s - pad
    end = np.minimum(start + k, n + pad)
    if include_pad:
        return end - start
    return np.minimum(end, n) - np.maximum(start, 0)


def _avg_pool(op: str, nsp: int, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override) -> Tensor:
    x, unbatched = _batched(input, nsp, op)
    if x.dtype is dt.bool_:
        raise DTypeError(f"loom.{op}: not implemented for bool input")
    k, s, d, pads, o = _pool_geometry(op, x, nsp, kernel_size, stride, padding, 1, ceil_mode)
    xp = _pad_axes(x, {2 + i: p for i, p in enumerate(pads)}, 0)
    total = _unfold_nd(xp, k, s, d, o).sum(tuple(2 + 2 * i for i in range(nsp)))
    if divisor_override is not None:
        if divisor_override == 0:
            raise ShapeError(f"loom.{op}: divisor_override must be non-zero")
        divisor = np.array(divisor_override)
    else:
        divisor = np.ones((), np.int64)
        for i in range(nsp):
            cnt = _window_counts(x.shape[2 + i], k[i], s[i], pads[i][0], o[i], count_include_pad)
            divisor = np.multiply.outer(divisor, cnt)
    if x.dtype.is_floating_point:
        y = total / tensor(divisor, dtype=x.dtype)
    else:  # Integer pooling divides as C does (truncation), like PyTorch's CPU kernel.
        y = div(total, tensor(divisor.astype(np.int64)), rounding_mode="trunc")
    return _unbatch(y, unbatched)


def avg_pool1d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """1-d average pooling over (N, C, L) or (C, L); see `avg_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.avg_pool1d(loom.tensor([[[1.0, 3.0, 2.0, 6.0]]]), 2).tolist()
    [[[2.0, 4.0]]]
    """
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     None)


def avg_pool2d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """2-d average pooling over (N, C, H, W) or (C, H, W), as `torch.nn.functional.avg_pool2d`.

    Parameters
    ----------
    kernel_size : int or tuple of 2 ints
    stride : int or tuple, optional
        Defaults to kernel_size.
    padding : int or tuple
        Zero padding, at most half the kernel.
    ceil_mode : bool
        Round the output size up; the part of a window past the padded input is never counted.
    count_include_pad : bool
        Count padded zeros in the divisor.
    divisor_override : int, optional
        Divide every window sum by this instead.

    Examples
    --------
    >>> x = loom.arange(16, dtype=loom.float32).reshape(1, 1, 4, 4)
    >>> loom.nn.functional.avg_pool2d(x, 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input: Tensor, kernel_size: _IntOrTuple, stride: _IntOrTuple | None = None,
               padding: _IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """3-d average pooling over (N, C, D, H, W) or (C, D, H, W); see `avg_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.avg_pool3d(loom.ones(1, 1, 2, 2, 2), 2).tolist()
    [[[[[1.0]]]]]
    """
    input, = _autocast.full(input)
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


# ================================================================ adaptive pooling

def _adaptive_sizes(op: str, x: Tensor, nsp: int, output_size) -> list[int]:
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * nsp
    sizes = list(output_size)
    if len(sizes) == 1:
        sizes = sizes * nsp
    if len(sizes) != nsp:
        raise ShapeError(f"loom.{op}: output_size must be an int or a tuple of {nsp} ints, got {output_size!r}")
    out = [int(n) if v is None else int(v) for v, n in zip(sizes, x.shape[2:])]
    if any(v < 0 for v in out):
        raise ShapeError(f"loom.{op}: output_size must be non-negative, got {list(out)}")
    if any(n == 0 for n in x.shape[2:]):
        raise ShapeError(f"loom.{op}: expected non-empty spatial dims, got input {fmt_shape(x.shape)}")
    return out


def _empty_output(x: Tensor, o: list[int]) -> Tensor:
    """A zero-size (N, C, *o) result that stays connected to x (its gradient is zero)."""
    return _slice_dim(x, 2, 0, 0).reshape(list(x.shape[:2]) + o)


def _take(x: Tensor, ax: int, idx: np.ndarray) -> Tensor:
    """x indexed along `ax` by a constant index table: a slice or a repeat when regular, else gather."""
    n, o = x.shape[ax], len(idx)
    if o == n and np.array_equal(idx, np.arange(n)):
        return x
    if o == 1 or (o > 1 and idx[1] > idx[0] and np.all(np.diff(idx) == idx[1] - idx[0])):
        step = int(idx[1] - idx[0]) if o > 1 else 1
        return _slice_dim(x, ax, int(idx[0]), int(idx[-1]) + 1, step)
    if o % n == 0 and np.array_equal(idx, np.arange(o) // (o // n)):
        shape = list(x.shape)
        y = x.reshape(shape[:ax + 1] + [1] + shape[ax + 1:])
        y = y.expand(shape[:ax + 1] + [o // n] + shape[ax + 1:])
        return y.reshape(shape[:ax] + [o] + shape[ax + 1:])
    shape = list(x.shape)
    shape[ax] = o
    return gather(x, ax, broadcast_to(_axis_column(idx, ax, x.ndim), shape, "gather"))


def _adaptive_windows(x: Tensor, ax: int, o: int):
    """Axis `ax` (size n) -> (o, kmax): PyTorch's window i is [floor(i*n/o), ceil((i+1)*n/o)).

    Short windows repeat their last element (harmless for max); `valid` marks the
    real ones (None when every window is full). Also returns the window starts and lengths.
    """
    n = x.shape[ax]
    i = np.arange(o)
    start = (i * n) // o
    end = ((i + 1) * n + o - 1) // o
    shape = list(x.shape)
    if n % o == 0:
        y = x.reshape(shape[:ax] + [o, n // o] + shape[ax + 1:])
        return y, start, end - start, None
    kmax = int((end - start).max())
    pos = start[:, None] + np.arange(kmax)[None, :]
    valid = pos < end[:, None]
    idx = np.minimum(pos, end[:, None] - 1).reshape(-1)
    y = _take(x, ax, idx).reshape(shape[:ax] + [o, kmax] + shape[ax + 1:])
    return y, start, end - start, valid


def _adaptive_avg(op: str, nsp: int, input, output_size) -> Tensor:
    x, unbatched = _batched(input, nsp, op)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point input, got {x.dtype.name}")
    o = _adaptive_sizes(op, x, nsp, output_size)
    if any(v == 0 for v in o):
        return _unbatch(_empty_output(x, o), unbatched)
    if all(v == 1 for v in o):  # Global pooling: one reduction over all spatial axes, not one per axis.
        axes = tuple(range(2, 2 + nsp))
        return _unbatch(x.sum(axes, keepdim=True) / math.prod(x.shape[2:]), unbatched)
    divisor = np.ones((), np.int64)
    for i in reversed(range(nsp)):
        ax = 2 + i
        win, _, lengths, valid = _adaptive_windows(x, ax, o[i])
        if valid is not None:
            mask = tensor(valid.reshape([1] * ax + list(valid.shape) + [1] * (win.ndim - ax - 2)))
            win = where(mask, win, 0)
        x = win.sum(ax + 1)
        divisor = np.multiply.outer(lengths, divisor)
    return _unbatch(x / tensor(divisor, dtype=x.dtype), unbatched)


def adaptive_avg_pool1d(input: Tensor, output_size: _IntOrTuple) -> Tensor:
    """1-d adaptive average pooling to `output_size` positions; see `adaptive_avg_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.adaptive_avg_pool1d(loom.tensor([[[1.0, 2.0, 3.0]]]), 2).tolist()
    [[[1.5, 2.5]]]
    """
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed output size, as `torch.nn.functional.adaptive_avg_pool2d`.

    Output cell i along an axis of size n averages input positions
    floor(i * n / out) to ceil((i + 1) * n / out) - 1, so windows may overlap and
    differ in size when out does not divide n.

    Parameters
    ----------
    input : Tensor
        (N, C, H, W) or (C, H, W).
    output_size : int or tuple of 2 (int or None)
        None keeps that input size.

    Examples
    --------
    >>> x = loom.arange(16, dtype=loom.float32).reshape(1, 1, 4, 4)
    >>> loom.nn.functional.adaptive_avg_pool2d(x, 1).tolist()
    [[[[7.5]]]]
    """
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """3-d adaptive average pooling; see `adaptive_avg_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.adaptive_avg_pool3d(loom.ones(1, 1, 3, 3, 3), 2).shape
    loom.Size([1, 1, 2, 2, 2])
    """
    input, = _autocast.full(input)
    return _adaptive_avg("adaptive_avg_pool3d", 3, input, output_size)


def _adaptive_max(op: str, nsp: int, input, output_size, return_indices: bool):
    x, unbatched = _batched(input, nsp, op)
    o = _adaptive_sizes(op, x, nsp, output_size)
    if any(v == 0 for v in o):
        raise ShapeError(f"loom.{op}: output_size {list(o)} must be positive (input {fmt_shape(x.shape)})")
    n = list(x.shape[2:])
    starts, lasts, kmax = [], [], []
    win = x
    for i in reversed(range(nsp)):
        win, start, length, _ = _adaptive_windows(win, 2 + i, o[i])
        starts.insert(0, start)
        lasts.insert(0, start + length - 1)
        kmax.insert(0, win.shape[3 + i])
    # (N, C, o1, k1, ..., oS, kS) -> (N, C, o1, ..., oS, k1 * ... * kS)
    perm = [0, 1] + [2 + 2 * i for i in range(nsp)] + [3 + 2 * i for i in range(nsp)]
    win = win.permute(perm)
    values, kidx = _first_max(win.reshape(list(win.shape[:2 + nsp]) + [math.prod(kmax)]))
    values = _unbatch(values, unbatched)
    if not return_indices:
        return values
    pos, inner = [], math.prod(kmax)
    for i in range(nsp):
        inner //= kmax[i]
        # A short window's repeats of its last element map back to that element.
        p = _axis_column(starts[i], 2 + i, nsp + 2) + (kidx // inner) % kmax[i]
        pos.append(minimum(p, _axis_column(lasts[i], 2 + i, nsp + 2)))
    return values, _unbatch(_flat_index(pos, n), unbatched)


def adaptive_max_pool1d(input: Tensor, output_size: _IntOrTuple, return_indices: bool = False):
    """1-d adaptive max pooling; see `adaptive_max_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.adaptive_max_pool1d(loom.tensor([[[1.0, 4.0, 2.0]]]), 2).tolist()
    [[[4.0, 4.0]]]
    """
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Max pooling to a fixed output size, with the windows of `adaptive_avg_pool2d`.

    The first maximum of each window wins (and gets the gradient); with
    `return_indices` its flat index h * W + w comes back too.

    Examples
    --------
    >>> x = loom.arange(16, dtype=loom.float32).reshape(1, 1, 4, 4)
    >>> loom.nn.functional.adaptive_max_pool2d(x, 1).tolist()
    [[[[15.0]]]]
    """
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    """3-d adaptive max pooling; see `adaptive_max_pool2d`.

    Examples
    --------
    >>> loom.nn.functional.adaptive_max_pool3d(loom.ones(1, 1, 3, 3, 3), 2).shape
    loom.Size([1, 1, 2, 2, 2])
    """
    return _adaptive_max("adaptive_max_pool3d", 3, input, output_size, return_indices)


# ================================================================ interpolation

_INTERP_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def _opmath(d: dt.DType):
    """The precision PyTorch's CPU kernels compute source indices and weights in."""
    return np.float64 if d is dt.float64 else np.float32


def _source_scale(n: int, o: int, scale, align_corners: bool, ft):
    if align_corners:
        return ft(n - 1) / ft(o - 1) if o > 1 else ft(0)
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(n) / ft(o)


def _nearest_taps(n: int, o: int, scale, exact: bool, shortcuts: bool):
    if shortcuts and o in (n, 2 * n):
        # PyTorch's 2-d nearest kernel copies (o == n) or halves the index (o == 2n) whatever the scale.
        return [(np.arange(o) // (o // n), None)]
    ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n) / np.float32(o)
    dst = np.arange(o)
    if exact:
        src = np.floor(((dst.astype(np.float64) + 0.5) * np.float64(ratio)).astype(np.float32))
    else:
        src = np.floor(dst.astype(np.float32) * ratio)
    return [(np.minimum(src.astype(np.int64), n - 1), None)]


def _linear_taps(n: int, o: int, scale, align_corners: bool, ft):
    if o == n:
        return [(np.arange(n), None)]
    ratio = _source_scale(n, o, scale, align_corners, ft)
    dst = np.arange(o).astype(ft)
    src = ratio * dst if align_corners else np.maximum(ratio * (dst + ft(0.5)) - ft(0.5), ft(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    l1 = np.clip(src - i0.astype(ft), ft(0), ft(1)).astype(ft)
    i1 = i0 + (i0 < n - 1)
    return [(i0, (ft(1) - l1).astype(ft)), (i1, l1)]


def _cubic_taps(n: int, o: int, scale, align_corners: bool, ft):
    a = ft(-0.75)
    ratio = _source_scale(n, o, scale, align_corners, ft)
    dst = np.arange(o).astype(ft)
    src = ratio * dst if align_corners else ratio * (dst + ft(0.5)) - ft(0.5)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.clip(src - i0.astype(ft), ft(0), ft(1)).astype(ft)

    def near(v):  # |v| <= 1
        return ((a + ft(2)) * v - (a + ft(3))) * v * v + ft(1)

    def far(v):  # 1 < |v| < 2
        return ((a * v - ft(5) * a) * v + ft(8) * a) * v - ft(4) * a

    weights = [far(t + ft(1)), near(t), near(ft(1) - t), far(ft(1) - t + ft(1))]
    return [(np.clip(i0 - 1 + j, 0, n - 1), w.astype(ft)) for j, w in enumerate(weights)]


def _apply_taps(x: Tensor, ax: int, taps) -> Tensor:
    """Sum over taps of x[idx] * weight along `ax` (weight None: a plain selection)."""
    out = None
    for idx, w in taps:
        term = _take(x, ax, idx)
        if w is not None:
            shape = [1] * x.ndim
            shape[ax] = len(w)
            term = term * tensor(w.reshape(shape), dtype=x.dtype)
        out = term if out is None else out + term
    return out


def _interp_sizes(x: Tensor, nsp: int, size, scale_factor, recompute_scale_factor):
    n = list(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("loom.interpolate: exactly one of size or scale_factor must be given")
    if size is not None:
        sizes = [size] * nsp if isinstance(size, (int, np.integer)) else list(size)
        if len(sizes) != nsp:
            raise ShapeError(f"loom.interpolate: input {fmt_shape(x.shape)} has {nsp} spatial dims, but size "
                             f"{list(sizes)} has {len(sizes)}")
        return [int(v) for v in sizes], [None] * nsp
    scales = [scale_factor] * nsp if isinstance(scale_factor, (int, float)) else list(scale_factor)
    if len(scales) != nsp:
        raise ShapeError(f"loom.interpolate: input {fmt_shape(x.shape)} has {nsp} spatial dims, but "
                         f"scale_factor {list(scales)} has {len(scales)}")
    out = [int(math.floor(float(ni) * float(sc))) for ni, sc in zip(n, scales)]
    return out, ([None] * nsp if recompute_scale_factor else [float(sc) for sc in scales])


def interpolate(input: Tensor, size: _IntOrTuple | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """Resize (N, C, *spatial) input, as `torch.nn.functional.interpolate`.

    Source positions and weights are computed as PyTorch's CPU kernels compute
    them (same formulas, same float precision), then applied one spatial axis at a
    time, last axis first.

    Parameters
    ----------
    input : Tensor
        (N, C, L), (N, C, H, W) or (N, C, D, H, W).
    size : int or tuple, optional
        Output spatial size.
    scale_factor : float or tuple, optional
        Multiplier of the spatial size (output = floor(input * scale)).
    mode : str
        'nearest', 'nearest-exact', 'linear' (3-d), 'bilinear' (4-d), 'bicubic' (4-d),
        'trilinear' (5-d) or 'area' (adaptive average pooling).
    align_corners : bool, optional
        For the linear and cubic modes: map corner pixel centres onto each other. Default False.
    recompute_scale_factor : bool, optional
        Derive the source scale from the sizes instead of `scale_factor`.
    antialias : bool
        For 'bilinear' and 'bicubic' (4-d): filter as PyTorch's antialiased resize (PIL's), which
        averages over the source pixels a shrunk output pixel covers.

    Examples
    --------
    >>> x = loom.tensor([[[1.0, 2.0]]])
    >>> loom.nn.functional.interpolate(x, scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    >>> loom.nn.functional.interpolate(x, size=3, mode="linear", align_corners=True).tolist()
    [[[1.0, 1.5, 2.0]]]
    """
    x = _t(input)
    nsp = x.ndim - 2
    if mode not in _MODES:
        raise ValueError(f"loom.interpolate: unknown mode {mode!r}; expected one of {', '.join(_MODES)}")
    if not 1 <= nsp <= 3:
        raise ShapeError(f"loom.interpolate: expected a 3-d, 4-d or 5-d input (N, C, *spatial), got "
                         f"{fmt_shape(x.shape)}")
    if mode in _INTERP_RANK and _INTERP_RANK[mode] != nsp:
        raise ShapeError(f"loom.interpolate: mode {mode!r} needs a {_INTERP_RANK[mode] + 2}-d input, got "
                         f"{fmt_shape(x.shape)}")
    if align_corners is not None and mode not in _INTERP_RANK:
        raise ValueError("loom.interpolate: align_corners can only be set with the interpolating modes "
                         "linear, bilinear, bicubic and trilinear")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError(f"loom.interpolate: antialias=True needs mode 'bilinear' or 'bicubic', got {mode!r}")
    if antialias and align_corners:
        raise ValueError("loom.interpolate: antialias=True with align_corners=True is not supported")
    out, scales = _interp_sizes(x, nsp, size, scale_factor, recompute_scale_factor)
    if antialias:
        return _antialiased(x, mode, out, scales)
    if mode == "area":
        return _adaptive_avg("interpolate", nsp, x, out)
    if any(v <= 0 for v in out):
        raise ShapeError(f"loom.interpolate: output size {list(out)} must be positive (input "
                         f"{fmt_shape(x.shape)})")
    if mode in _INTERP_RANK and not x.dtype.is_floating_point:
        raise DTypeError(f"loom.interpolate: mode {mode!r} needs a floating point input, got {x.dtype.name}")
    half = x.dtype in (dt.float16, dt.bfloat16)
    y = x.to(dt.float32) if half else x
    ft = _opmath(y.dtype)
    corners = bool(align_corners)
    for i in reversed(range(nsp)):
        n = x.shape[2 + i]
        if mode in ("nearest", "nearest-exact"):
            taps = _nearest_taps(n, out[i], scales[i], mode == "nearest-exact", nsp == 2 and mode == "nearest")
        elif mode == "bicubic":
            taps = _cubic_taps(n, out[i], scales[i], corners, ft)
        else:
            taps = _linear_taps(n, out[i], scales[i], corners, ft)
        y = _apply_taps(y, 2 + i, taps)
    return y.to(x.dtype) if half else y


def _aa_weights(n_in: int, n_out: int, scale: float | None, mode: str) -> np.ndarray:
    """[n_out, n_in] weights of PyTorch's antialiased resize along one axis (a PIL-style separable filter:
    triangle or Keys cubic with a = -0.5, stretched by the scale when shrinking, renormalised at the borders)."""
    s = (1.0 / scale) if scale else n_in / n_out
    support = (1.0 if mode == "bilinear" else 2.0) * max(s, 1.0)
    inv = 1.0 / s if s >= 1.0 else 1.0
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = s * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        d = np.abs((np.arange(lo, hi) - center + 0.5) * inv)
        if mode == "bilinear":
            k = np.clip(1.0 - d, 0.0, None)
        else:
            a = -0.5
            k = np.where(d < 1.0, ((a + 2) * d - (a + 3)) * d * d + 1,
                         np.where(d < 2.0, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
        total = k.sum()
        w[i, lo:hi] = k / total if total != 0 else k
    return w


def _antialiased(x: Tensor, mode: str, out: list[int], scales: list) -> Tensor:
    """interpolate(..., antialias=True) for (N, C, H, W): the weights of each axis applied as a matmul."""
    if x.ndim != 4:
        raise ShapeError(f"loom.interpolate: antialias=True needs a 4-d input, got {fmt_shape(x.shape)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.interpolate: mode {mode!r} needs a floating point input, got {x.dtype.name}")
    half = x.dtype in (dt.float16, dt.bfloat16)
    y = x.to(dt.float32) if half else x
    wh = tensor(_aa_weights(x.shape[2], out[0], scales[0], mode), dtype=y.dtype)
    ww = tensor(_aa_weights(x.shape[3], out[1], scales[1], mode), dtype=y.dtype)
    y = matmul(wh, matmul(y, ww.transpose(0, 1)))
    return y.to(x.dtype) if half else y


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated PyTorch alias of `interpolate`.

    Examples
    --------
    >>> loom.nn.functional.upsample(loom.ones(1, 1, 2), scale_factor=2).shape
    loom.Size([1, 1, 4])
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated PyTorch alias: `interpolate(..., mode='nearest')`.

    Examples
    --------
    >>> loom.nn.functional.upsample_nearest(loom.ones(1, 1, 2, 2), scale_factor=2).shape
    loom.Size([1, 1, 4, 4])
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated PyTorch alias: `interpolate(..., mode='bilinear', align_corners=True)`.

    Examples
    --------
    >>> loom.nn.functional.upsample_bilinear(loom.ones(1, 1, 2, 2), size=3).shape
    loom.Size([1, 1, 3, 3])
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


METHODS: list[str] = []
INPLACE: list[str] = []
NN_FUNCTIONAL = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "unfold", "fold",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
]
