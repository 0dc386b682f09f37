"""Pooling ops `torch.nn.functional` has beyond those in `loom.functional.conv`.

Power-average (LP) pooling, max unpooling, fractional max pooling, the
`*_with_indices` spellings and local response normalisation. LP pooling and
LRN are averages of powers; unpooling is one scatter; fractional pooling
computes its window starts in the graph from the random samples (as PyTorch's
kernels do, in the input's precision) and takes the first maximum of each
gathered window, so every op is lazy and differentiable.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.conv import (
    _first_max, _tuple, adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool2d,
    avg_pool3d, max_pool1d, max_pool2d, max_pool3d,
)
from loom.functional.indexing import gather, scatter
from loom.functional.math import abs as _abs, relu, sign
from loom.functional.shape import cat, pad
from loom.tensor import Tensor, arange, rand, tensor, zeros

_IntOrTuple = int | Sequence[int]


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


# ---------------------------------------------------------------- *_with_indices spellings

def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool1d` returning (values, indices)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool2d` returning (values, indices)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool3d` returning (values, indices)."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool1d` returning (values, indices)."""
    return adaptive_max_pool1d(input, output_size, return_indices=True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool2d` returning (values, indices)."""
    return adaptive_max_pool2d(input, output_size, return_indices=True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool3d` returning (values, indices)."""
    return adaptive_max_pool3d(input, output_size, return_indices=True)


# ---------------------------------------------------------------- LP pooling

def _lp_pool(op: str, nsp: int, avg, input, norm_type, kernel_size, stride, ceil_mode) -> Tensor:
    x = _t(input)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.nn.functional.{op}: expected a floating point input, got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")
    k = _tuple(kernel_size, nsp, "kernel_size", op)
    p = float(norm_type)
    if p == 0:
        raise LoomValueError(f"loom.nn.functional.{op}: norm_type must be nonzero")
    out = avg(x ** p, kernel_size, stride, 0, ceil_mode)
    # PyTorch clamps negative averages (odd powers) to 0 while keeping their sign's gradient path.
    return (sign(out) * relu(_abs(out)) * math.prod(k)) ** (1.0 / p)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over (N, C, L): (sum of x^p over each window)^(1/p).

    Examples
    --------
    >>> loom.nn.functional.lp_pool1d(loom.tensor([[[3.0, 4.0]]]), 2, 2).tolist()
    [[[5.0]]]
    """
    return _lp_pool("lp_pool1d", 1, avg_pool1d, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size: _IntOrTuple, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over (N, C, H, W); see `lp_pool1d`.

    Examples
    --------
    >>> loom.nn.functional.lp_pool2d(loom.ones(1, 1, 4, 4), 1, 2).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return _lp_pool("lp_pool2d", 2, avg_pool2d, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input: Tensor, norm_type: float, kernel_size: _IntOrTuple, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over (N, C, D, H, W); see `lp_pool1d`."""
    return _lp_pool("lp_pool3d", 3, avg_pool3d, input, norm_type, kernel_size, stride, ceil_mode)


# ---------------------------------------------------------------- max unpooling

def _max_unpool(op: str, nsp: int, input, indices, kernel_size, stride, padding, output_size) -> Tensor:
    x, idx = _t(input), _t(indices)
    if idx.dtype.is_floating_point or idx.dtype is dt.bool_:
        raise DTypeError(f"loom.nn.functional.{op}: indices must be an integer tensor, got "
                         f"{idx.dtype.name}{fmt_shape(idx.shape)}")
    if tuple(x.shape) != tuple(idx.shape):
        raise ShapeError(f"loom.nn.functional.{op}: input {fmt_shape(x.shape)} and indices "
                         f"{fmt_shape(idx.shape)} must have the same shape")
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ShapeError(f"loom.nn.functional.{op}: expected a {nsp + 1}-d or {nsp + 2}-d input, got "
                         f"{fmt_shape(x.shape)}")
    k = _tuple(kernel_size, nsp, "kernel_size", op)
    s = _tuple(stride if stride is not None else kernel_size, nsp, "stride", op)
    p = _tuple(padding, nsp, "padding", op)
    spatial = x.shape[-nsp:]
    if output_size is None:
        out = [(n - 1) * s[i] - 2 * p[i] + k[i] for i, n in enumerate(spatial)]
    else:
        out = [int(v) for v in output_size]
        if len(out) == nsp + 2 or (len(out) == nsp + 1 and x.ndim == nsp + 1):
            out = out[-nsp:]
        if len(out) != nsp:
            raise ShapeError(f"loom.nn.functional.{op}: output_size {list(output_size)} must have {nsp} "
                             f"(or {nsp + 2}) entries")
        for i, n in enumerate(spatial):
            default = (n - 1) * s[i] - 2 * p[i] + k[i]
            if not default - s[i] < out[i] < default + s[i]:
                raise ShapeError(f"loom.nn.functional.{op}: output_size {out} is not valid for input "
                                 f"{fmt_shape(x.shape)}; dim {i} must lie strictly between "
                                 f"{default - s[i]} and {default + s[i]}")
    lead = list(x.shape[:-nsp])
    flat_x = x.reshape(lead + [-1])
    flat_i = idx.to(dt.int64).reshape(lead + [-1])
    base = zeros(*(lead + [math.prod(out)]), dtype=x.dtype)
    return scatter(base, -1, flat_i, flat_x).reshape(lead + out)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Inverse of `max_pool1d`: each value goes back to the place its index names, zeros elsewhere.

    Examples
    --------
    >>> y, i = loom.nn.functional.max_pool1d(loom.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2, return_indices=True)
    >>> loom.nn.functional.max_unpool1d(y, i, 2).tolist()
    [[[0.0, 3.0, 0.0, 5.0]]]
    """
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Inverse of `max_pool2d` (flat h * W + w indices); see `max_unpool1d`."""
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Inverse of `max_pool3d`; see `max_unpool1d`."""
    return _max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)


# ---------------------------------------------------------------- fractional max pooling

def _fractional(op: str, nsp: int, input, kernel_size, output_size, output_ratio, return_indices,
                _random_samples):
    x = _t(input)
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ShapeError(f"loom.nn.functional.{op}: expected a {nsp + 1}-d or {nsp + 2}-d input, got "
                         f"{fmt_shape(x.shape)}")
    unbatched = x.ndim == nsp + 1
    if unbatched:
        x = x.unsqueeze(0)
    n, c = x.shape[0], x.shape[1]
    spatial = list(x.shape[2:])
    k = _tuple(kernel_size, nsp, "kernel_size", op)
    if output_size is None:
        if output_ratio is None:
            raise LoomValueError(f"loom.nn.functional.{op}: give output_size or output_ratio")
        ratio = [float(r) for r in (output_ratio if isinstance(output_ratio, (tuple, list))
                                    else [output_ratio] * nsp)]
        if len(ratio) != nsp or not all(0 < r < 1 for r in ratio):
            raise LoomValueError(f"loom.nn.functional.{op}: output_ratio {output_ratio} must be {nsp} "
                                 "numbers in (0, 1)")
        out = [int(sz * r) for sz, r in zip(spatial, ratio)]
    else:
        out = list(_tuple(output_size, nsp, "output_size", op))
    for i in range(nsp):
        if out[i] + k[i] - 1 > spatial[i]:
            raise ShapeError(f"loom.nn.functional.{op}: output size {out} with kernel {list(k)} is too large "
                             f"for input {fmt_shape(x.shape)} (dim {i}: output + kernel - 1 must be at most "
                             f"{spatial[i]})")
    if _random_samples is None:
        samples = rand(n, c, nsp, dtype=x.dtype)
    else:
        samples = _t(_random_samples)
        if tuple(samples.shape) != (n, c, nsp):
            raise ShapeError(f"loom.nn.functional.{op}: _random_samples {fmt_shape(samples.shape)} must be "
                             f"{fmt_shape((n, c, nsp))}")
        samples = samples.to(x.dtype)
    samples = samples.detach()
    # PyTorch's kernels read the samples in reverse axis order for 2-d pooling (sample 0 drives W).
    order = [1, 0] if nsp == 2 else list(range(nsp))
    flat = tensor(np.zeros([1] * (2 + 2 * nsp), np.int64))
    stride_in = 1
    for ax in reversed(range(nsp)):
        u = samples[:, :, order[ax]].reshape(n, c, 1)
        o = out[ax]
        if o > 1:
            alpha = (spatial[ax] - k[ax]) / (o - 1)
            steps = arange(o - 1, dtype=x.dtype).reshape(1, 1, -1)
            start = ((steps + u) * alpha).to(dt.int64) - (u * alpha).to(dt.int64)
            last = tensor(np.full((n, c, 1), spatial[ax] - k[ax], np.int64))
            start = cat([start, last], 2)
        else:
            start = tensor(np.full((n, c, o), spatial[ax] - k[ax], np.int64))
        shape_o = [n, c] + [out[i] if i == ax else 1 for i in range(nsp)] + [1] * nsp
        shape_k = [1, 1] + [1] * nsp + [k[i] if i == ax else 1 for i in range(nsp)]
        pos = start.reshape(shape_o) + arange(k[ax]).reshape(shape_k)
        term = pos * stride_in
        flat = flat + term
        stride_in *= spatial[ax]
    flat = flat.expand([n, c] + out + list(k)).reshape(n, c, -1)
    win = gather(x.reshape(n, c, -1), 2, flat).reshape([n, c] + out + [math.prod(k)])
    values, kidx = _first_max(win)
    if unbatched:
        values = values.squeeze(0)
    if not return_indices:
        return values
    where_at = gather(flat.reshape([n, c] + out + [math.prod(k)]), -1, kidx.unsqueeze(-1)).squeeze(-1)
    return values, where_at.squeeze(0) if unbatched else where_at


def fractional_max_pool2d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples=None):
    """Fractional max pooling over (N, C, H, W): windows at pseudo-random, increasing starts.

    Parameters
    ----------
    kernel_size : int or pair
    output_size : int or pair, optional
    output_ratio : float or pair in (0, 1), optional
        Output size as a fraction of the input size (when output_size is not given).
    return_indices : bool
        Also return the flat (h * W + w) index of each maximum.
    _random_samples : Tensor of shape (N, C, 2), optional
        The U(0, 1) samples that place the windows (drawn when not given).

    Examples
    --------
    >>> loom.nn.functional.fractional_max_pool2d(loom.randn(1, 2, 9, 9), 3, output_size=4).shape
    loom.Size([1, 2, 4, 4])
    """
    return _fractional("fractional_max_pool2d", 2, input, kernel_size, output_size, output_ratio,
                       return_indices, _random_samples)


def fractional_max_pool3d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples=None):
    """Fractional max pooling over (N, C, D, H, W); see `fractional_max_pool2d`."""
    return _fractional("fractional_max_pool3d", 3, input, kernel_size, output_size, output_ratio,
                       return_indices, _random_samples)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=True, _random_samples=None):
    """`fractional_max_pool2d` returning (values, indices)."""
    return fractional_max_pool2d(input, kernel_size, output_size, output_ratio, True, _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=True, _random_samples=None):
    """`fractional_max_pool3d` returning (values, indices)."""
    return fractional_max_pool3d(input, kernel_size, output_size, output_ratio, True, _random_samples)


# ---------------------------------------------------------------- local response normalisation

def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, over (N, C, *).

    Examples
    --------
    >>> loom.nn.functional.local_response_norm(loom.ones(1, 3, 2), 2).shape
    loom.Size([1, 3, 2])
    """
    x = _t(input)
    if x.ndim < 3:
        raise ShapeError(f"loom.nn.functional.local_response_norm: expected an input of 3 or more dims "
                         f"(N, C, *), got {fmt_shape(x.shape)}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.nn.functional.local_response_norm: expected a floating point input, got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")
    if x.numel() == 0:
        return x.clone()
    c = x.shape[1]
    sq = x * x
    pads = [0, 0] * (x.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = pad(sq, pads)
    acc = None
    for j in range(size):
        part = padded[:, j:j + c]
        acc = part if acc is None else acc + part
    div = (acc / size) * alpha + k
    return x / div ** beta


NN_FUNCTIONAL = [
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
    "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d",
    "fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d_with_indices", "local_response_norm",
]
__all__ = NN_FUNCTIONAL
