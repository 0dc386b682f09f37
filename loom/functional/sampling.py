"""Sampling at computed positions: `grid_sample`, `affine_grid` and `channel_shuffle`.

`grid_sample` reads the input at real-valued positions: the positions are
unnormalised and padded per axis (as PyTorch's CPU kernel does), each
interpolation tap becomes a flat index gathered from the flattened input, and
the taps are combined with weights computed from the positions. Out-of-range
taps read zero through a mask, so gradients reach both the input and the grid,
to any order, from the primitives' rules.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.indexing import gather
from loom.functional.linalg import matmul
from loom.functional.math import abs as _abs, floor, fmod, round as _round, where
from loom.tensor import Tensor, const, tensor

_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _unnormalize(g: Tensor, size: int, align_corners: bool) -> Tensor:
    """[-1, 1] grid values to pixel coordinates of an axis of `size` pixels."""
    if align_corners:
        return (g + 1.0) * ((size - 1) / 2.0)
    return ((g + 1.0) * size - 1.0) / 2.0


def _clip(c: Tensor, size: int) -> Tensor:
    """Coordinates clipped to [0, size - 1], with a zero gradient where clipped (PyTorch's rule)."""
    c = where(c <= 0, const(0.0, (), c.dtype), c)
    return where(c >= size - 1, const(float(size - 1), (), c.dtype), c)


def _reflect(c: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """Coordinates reflected into [twice_low / 2, twice_high / 2], as PyTorch's reflect_coordinates."""
    if twice_low == twice_high:
        return c * 0.0
    low = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    d = _abs(c - low)
    extra = fmod(d, span)
    flips = floor(d.detach() / span)
    even = fmod(flips, 2.0) == 0
    return where(even, extra + low, (extra * -1.0) + (span + low))


def _pad_coord(c: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    if padding_mode == "border":
        return _clip(c, size)
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        return _clip(c, size)
    return c


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """Keys cubic convolution weights (A = -0.75) of the four taps around fraction t."""
    a = -0.75

    def near(v):  # |v| <= 1
        return ((v * (a + 2.0) - (a + 3.0)) * v) * v + 1.0

    def far(v):  # 1 < |v| < 2
        return ((v * a - 5.0 * a) * v + 8.0 * a) * v - 4.0 * a
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """Sample `input` at the normalised positions in `grid`, as `torch.nn.functional.grid_sample`.

    Parameters
    ----------
    input : Tensor of shape (N, C, H, W) or (N, C, D, H, W)
    grid : Tensor of shape (N, H_out, W_out, 2) or (N, D_out, H_out, W_out, 3)
        Positions in [-1, 1]; the last dim is (x, y[, z]), x indexing W.
    mode : "bilinear" (trilinear for 5-d), "nearest" or "bicubic" (4-d only)
    padding_mode : "zeros", "border" or "reflection"
        What positions outside the input read.
    align_corners : bool
        True: -1 and 1 are the centres of the corner pixels; False (default): their outer edges.

    Examples
    --------
    >>> x = loom.arange(4, dtype=loom.float32).reshape(1, 1, 2, 2)
    >>> g = loom.zeros(1, 1, 1, 2)
    >>> loom.nn.functional.grid_sample(x, g, align_corners=True).tolist()
    [[[[1.5]]]]
    """
    op = "loom.nn.functional.grid_sample"
    x, g = _t(input), _t(grid)
    align = bool(align_corners)
    if mode not in _MODES:
        raise LoomValueError(f"{op}: mode must be 'bilinear', 'nearest' or 'bicubic', got {mode!r}")
    if padding_mode not in _PADDINGS:
        raise LoomValueError(f"{op}: padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}")
    if x.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-d (N, C, H, W) or 5-d (N, C, D, H, W) input, got {fmt_shape(x.shape)}")
    nsp = x.ndim - 2
    if g.ndim != x.ndim or g.shape[-1] != nsp or g.shape[0] != x.shape[0]:
        raise ShapeError(f"{op}: grid {fmt_shape(g.shape)} does not fit input {fmt_shape(x.shape)}; expected "
                         f"(N, {', '.join(['*'] * nsp)}, {nsp}) with N = {x.shape[0]}")
    if mode == "bicubic" and nsp != 2:
        raise LoomValueError(f"{op}: bicubic mode needs a 4-d input, got {fmt_shape(x.shape)}")
    if not x.dtype.is_floating_point or g.dtype is not x.dtype:
        raise DTypeError(f"{op}: input and grid must be floating point tensors of one dtype, got "
                         f"{x.dtype.name} and {g.dtype.name}")
    n, c = x.shape[0], x.shape[1]
    spatial = list(x.shape[2:])
    out = list(g.shape[1:-1])
    p = math.prod(out)
    src = x.reshape(n, c, -1)
    strides = [math.prod(spatial[a + 1:]) for a in range(nsp)]
    # Per input axis a, its coordinates (N, P): grid component nsp-1-a indexes axis a.
    coords = [_unnormalize(g[..., nsp - 1 - a].reshape(n, p), spatial[a], align) for a in range(nsp)]

    def read(idx: list[Tensor], weight: Tensor | None) -> Tensor:
        """Input values at integer positions `idx` (one (N, P) tensor per axis), zero outside."""
        valid = None
        flat = None
        for a, i in enumerate(idx):
            ok = (i >= 0) & (i < spatial[a])
            valid = ok if valid is None else valid & ok
            term = where(ok, i, const(0, (), dt.int64)) * strides[a]
            flat = term if flat is None else flat + term
        vals = gather(src, 2, flat.unsqueeze(1).expand(n, c, p))
        w = valid.to(x.dtype) if weight is None else where(valid, weight, const(0.0, (), x.dtype))
        return vals * w.unsqueeze(1)

    if mode == "bicubic":
        base = [floor(cd.detach()) for cd in coords]
        frac = [cd - b for cd, b in zip(coords, base)]
        wts = [_cubic_weights(f) for f in frac]
        acc = None
        for ty, tx in itertools.product(range(4), range(4)):
            pos = [base[0] + float(ty - 1), base[1] + float(tx - 1)]
            pos = [_pad_coord(q, spatial[a], padding_mode, align) for a, q in enumerate(pos)]
            term = read([q.to(dt.int64) for q in pos], wts[0][ty] * wts[1][tx])
            acc = term if acc is None else acc + term
        return acc.reshape([n, c] + out)

    coords = [_pad_coord(cd, spatial[a], padding_mode, align) for a, cd in enumerate(coords)]
    if mode == "nearest":
        rounded = [_round(cd) for cd in coords]
        # The weight is 1 in value, but depends on the grid through round, so the grid's gradient is zero
        # (as PyTorch gives) rather than missing.
        one = sum((r - r.detach() for r in rounded), const(1.0, (), x.dtype))
        return read([r.detach().to(dt.int64) for r in rounded], one).reshape([n, c] + out)
    base = [floor(cd.detach()) for cd in coords]
    hi_w = [cd - b for cd, b in zip(coords, base)]
    lo_w = [1.0 - h for h in hi_w]
    lo_i = [b.to(dt.int64) for b in base]
    acc = None
    for corner in itertools.product((0, 1), repeat=nsp):
        weight = None
        idx = []
        for a, bit in enumerate(corner):
            w = hi_w[a] if bit else lo_w[a]
            weight = w if weight is None else weight * w
            idx.append(lo_i[a] + 1 if bit else lo_i[a])
        term = read(idx, weight)
        acc = term if acc is None else acc + term
    return acc.reshape([n, c] + out)


def _base_axis(steps: int, align_corners: bool, dtype) -> np.ndarray:
    v = np.linspace(-1.0, 1.0, steps) if steps > 1 else np.array([-1.0])
    if not align_corners:
        v = v * (steps - 1) / steps
    return v.astype(dtype.np)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """Sampling grid of an affine map, for `grid_sample`: (N, H, W, 2) from (N, 2, 3) thetas
    (or (N, D, H, W, 3) from (N, 3, 4)).

    Examples
    --------
    >>> theta = loom.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> loom.nn.functional.affine_grid(theta, (1, 1, 2, 2), align_corners=True).tolist()
    [[[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]]
    """
    op = "loom.nn.functional.affine_grid"
    th = _t(theta)
    size = [int(s) for s in size]
    align = bool(align_corners)
    if not th.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point theta, got {th.dtype.name}{fmt_shape(th.shape)}")
    if len(size) not in (4, 5):
        raise LoomValueError(f"{op}: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    nsp = len(size) - 2
    if tuple(th.shape) != (size[0], nsp, nsp + 1):
        raise ShapeError(f"{op}: theta {fmt_shape(th.shape)} must be {fmt_shape((size[0], nsp, nsp + 1))} for "
                         f"size {size}")
    if min(size[2:]) <= 0:
        raise LoomValueError(f"{op}: size {size} has an empty spatial dim")
    spatial = size[2:]
    # Base grid rows are (x, y[, z], 1) with x running over the last (W) axis.
    axes = [_base_axis(s, align, th.dtype) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [mesh[nsp - 1 - k] for k in range(nsp)] + [np.ones(spatial, th.dtype.np)]
    base = tensor(np.stack(cols, -1).reshape(1, -1, nsp + 1))
    grid = matmul(base, th.transpose(1, 2))
    return grid.reshape([size[0]] + spatial + [nsp])


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Interleave the channels of (N, C, *) across `groups` groups (ShuffleNet).

    Examples
    --------
    >>> loom.nn.functional.channel_shuffle(loom.arange(4).reshape(1, 4, 1), 2).flatten().tolist()
    [0, 2, 1, 3]
    """
    x = _t(input)
    op = "loom.nn.functional.channel_shuffle"
    if x.ndim < 3:
        raise ShapeError(f"{op}: expected an input of 3 or more dims (N, C, *), got {fmt_shape(x.shape)}")
    groups = int(groups)
    if groups <= 0 or x.shape[1] % groups:
        raise LoomValueError(f"{op}: {x.shape[1]} channels of input {fmt_shape(x.shape)} cannot be split into "
                             f"{groups} groups")
    n, c = x.shape[0], x.shape[1]
    rest = list(x.shape[2:])
    return x.reshape([n, groups, c // groups] + rest).transpose(1, 2).reshape([n, c] + rest)


native_channel_shuffle = channel_shuffle

NN_FUNCTIONAL = ["grid_sample", "affine_grid", "channel_shuffle", "native_channel_shuffle"]
__all__ = NN_FUNCTIONAL
