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
    >>> ordered_sum(x, (0,)).tolist(), ordered_sum(x.T.copy().T, (0,)).tolist()
    ([12.0, 15.0, 18.0, 21.0], [12.0, 15.0, 18.0, 21.0])
    """
    x = np.asarray(x)
    nd = x.ndim
    red = tuple(sorted({a % nd for a in axes})) if nd else ()
    keep = [d for d in range(nd) if d not in red]
    out_shape = tuple(1 if d in red else x.shape[d] for d in range(nd)) if keepdims else \
        tuple(x.shape[d] for d in keep)
    m = math.prod(x.shape[d] for d in keep)
    r = math.prod(x.shape[d] for d in red)
    if m == 0 or r == 0:
        return np.zeros(out_shape, x.dtype)
    # Logical order: kept axes first, then the reduced ones; reshape copies whatever the layout was.
    v = x.transpose(keep + list(red)).reshape(m, r)
    if r > BLOCK:
        width = BLOCK
    elif r > LANES:
        width = -(-r // LANES) * LANES
    else:  # One element per lane: the lanes past the next power of two only add -0.0 in the fold.
        width = 1 << (r - 1).bit_length()
    nb = -(-r // width)
    if nb * width != r:  # Pad with -0.0, which leaves every sum unchanged (x + -0.0 == x, also for +-0).
        padded = np.full((m, nb * width), -0.0, x.dtype)
        padded[:, :r] = v
        v = padded
    lanes = np.ascontiguousarray(v).reshape(m * nb, -1, min(width, LANES))
    if lanes.shape[1] > 1:
        # Reducing the middle axis of a C-contiguous (m * nb, k, LANES) array adds each lane's elements one
        # after the other (NumPy sums pairwise only along the fast axis, here the lanes');
        # tests/test_determinism.py checks it against `sequential_sum`.
        lanes = np.add.reduce(lanes, axis=1)
    else:
        lanes = lanes[:, 0]
    h = lanes.shape[1]
    while h > 1:
        h //= 2
        lanes = lanes[:, :h] + lanes[:, h:2 * h]
    blocks = lanes.reshape(m, nb)
    # Sequential in float64 (an accumulate never reassociates); + 0.0 as the C loop's +0 start.
    total = np.cumsum(blocks, axis=1, dtype=np.float64)[:, -1] + 0.0
    return total.astype(x.dtype).reshape(out_shape)


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
