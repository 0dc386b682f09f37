"""loom's floating-point summation order: one fixed order, whatever the memory layout or the tier.

A float sum's bits depend on the order of its additions. NumPy's `np.sum`
follows the memory layout of its input (pairwise along the fast axis, one
element at a time along slower ones), so the same values stored transposed
(a convolution's output from the NumPy path rather than oneDNN, say) add up
to different bits; the C kernels (`loom.codegen.c`) have their own order. So
every float ``sum`` primitive adds in this order, defined on the *logical*
index r = 0 .. R-1 of the reduced elements (the reduced axes in ascending
order, row-major), for each output element:

1. blocks of `BLOCK` consecutive r (the last one may be shorter);
2. within a block, `LANES` lanes: lane j adds the elements with r % LANES == j
   one after the other, in the input's dtype, starting from +0;
3. the block's sum folds the lanes in halves: ``l[j] += l[j + h]`` for j < h,
   h = LANES / 2, ..., 2, 1; the block sum is l[0];
4. the block sums are added one after the other in float64, starting from +0,
   and the total is rounded once to the output dtype.

The NumPy reference (`ordered_sum`) and the generated C follow it exactly, so
both tiers give the same bits (a zero sum is always +0); lanes are what a SIMD
loop computes, and the float64 across blocks keeps long sums accurate.
"""
from __future__ import annotations

import math

import numpy as np

LANES = 32  # A power of two.
BLOCK = 1024  # A multiple of LANES.


def ordered_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """Sum a float32/float64 array over `axes` in loom's fixed order (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(12, dtype=np.float32).reshape(3, 4)
    >>> ordered_sum(x, (0,)).tolist(), ordered_sum(np.asfortranarray(x), (0,)).tolist()
    ([12.0, 15.0, 18.0, 21.0], [12.0, 15.0, 18.0, 21.0])
    """
    x = np.asarray(x)
    nd = x.ndim
    red = sorted({a % nd for a in axes}) if nd else []
    out_shape = tuple(1 if d in red else x.shape[d] for d in range(nd)) if keepdims else \
        tuple(x.shape[d] for d in range(nd) if d not in red)
    if x.size == 0 or math.prod(out_shape) == 0:
        return np.zeros(out_shape, x.dtype)
    if not red:
        return (x + 0.0).reshape(out_shape)  # A 0-d sum: the element, a zero made +0 as by the fold.
    # Put the reduced axes side by side in ascending order (the logical order r runs in), moving as little
    # memory as possible: the layout's own axis order if it has them so, else one copy.
    perm = _grouping(x, red)
    y = np.ascontiguousarray(x.transpose(perm))
    p = perm.index(red[0])
    pre, r, post = (math.prod(y.shape[:p]), math.prod(y.shape[p:p + len(red)]),
                    math.prod(y.shape[p + len(red):]))
    v = y.reshape(pre, r, post)
    if r > BLOCK:
        width = BLOCK
    elif r > LANES:
        width = -(-r // LANES) * LANES
    else:  # One element per lane: the lanes past the next power of two only add +-0 in the fold.
        width = 1 << (r - 1).bit_length()
    nb = -(-r // width)
    if nb * width != r:  # Pad with -0.0, which leaves every sum unchanged (x + -0.0 == x, also for +-0).
        padded = np.full((pre, nb * width, post), -0.0, x.dtype)
        padded[:, :r] = v
        v = padded
    lanes = v.reshape(pre, nb, -1, min(width, LANES), post)
    # Reducing axis 2 of this C-contiguous view adds each lane's elements one after the other: NumPy sums
    # pairwise only along the innermost loop, here the lanes' or the kept trailing axes'
    # (tests/test_determinism.py checks it against `sequential_sum`).
    lanes = np.add.reduce(lanes, axis=2) if lanes.shape[2] > 1 else lanes[:, :, 0]
    h = lanes.shape[2]
    while h > 1:
        h //= 2
        lanes = lanes[:, :, :h] + lanes[:, :, h:2 * h]
    blocks = lanes[:, :, 0]  # (pre, nb, post)
    # Sequential in float64 (an accumulate never reassociates); + 0.0 as the C loop's +0 start.
    total = np.cumsum(blocks, axis=1, dtype=np.float64)[:, -1] + 0.0
    kept = [d for d in perm if d not in red]
    total = total.astype(x.dtype).reshape([x.shape[d] for d in kept])
    return total.transpose(np.argsort(kept)).reshape(out_shape)


def _grouping(x: np.ndarray, red: list[int]) -> list[int]:
    """An axis order with `red` adjacent and ascending: x's memory order when it has them so (no copy), else
    the kept axes around them with x's innermost axis last (a copy in runs along it)."""
    order = sorted(range(x.ndim), key=lambda d: (-abs(x.strides[d]), d) if x.shape[d] > 1 else (0, d))
    pos = [order.index(d) for d in red]
    if pos == list(range(pos[0], pos[0] + len(red))):
        return order
    keep = [d for d in range(x.ndim) if d not in red]
    inner = order[-1] if order else x.ndim - 1
    return red + keep if inner in keep and keep[-1] == inner else keep + red


def sequential_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """`ordered_sum` written as plain loops (slow): the definition the fast one is tested against."""
    x = np.asarray(x)
    nd = x.ndim
    red = tuple(sorted({a % nd for a in axes})) if nd else ()
    keep = [d for d in range(nd) if d not in red]
    m = math.prod(x.shape[d] for d in keep)
    r = math.prod(x.shape[d] for d in red)
    v = x.transpose(keep + list(red)).reshape(m, r)
    t = x.dtype.type
    out = np.zeros(m, x.dtype)
    for i in range(m):
        total = 0.0
        for lo in range(0, r, BLOCK):
            lanes = [t(0.0)] * LANES
            for j in range(lo, min(lo + BLOCK, r)):
                lanes[j % LANES] = t(lanes[j % LANES] + v[i, j])
            h = LANES
            while h > 1:
                h //= 2
                lanes = [t(lanes[j] + lanes[j + h]) for j in range(h)]
            blk = lanes[0]
            total = float(np.float64(total) + np.float64(blk))
        out[i] = t(total)
    shape = tuple(1 if d in red else x.shape[d] for d in range(nd)) if keepdims else tuple(x.shape[d] for d in keep)
    return out.reshape(shape)
