"""`tf.linalg`: matrix products, norms, transposes and diagonals."""
from __future__ import annotations

import loom
from loom.tf._core import _ints, convert_to_tensor as _t, eye, matmul, norm, tensordot  # noqa: F401


def matrix_transpose(a, name=None, conjugate=False):
    """`a` with its last two dimensions swapped."""
    return _t(a).transpose(-1, -2)


def diag(diagonal, name=None, k=0):
    """A matrix (batch) with `diagonal` on its main diagonal."""
    return loom.diag_embed(_t(diagonal), offset=int(k))


def diag_part(input, name=None, k=0):
    """The main diagonal of a matrix (batch)."""
    return loom.diagonal(_t(input), offset=int(k), dim1=-2, dim2=-1)


def trace(x, name=None):
    """Sum of the main diagonal of a matrix (batch)."""
    return diag_part(x).sum(-1)


def band_part(input, num_lower, num_upper, name=None):
    """Keep entries within `num_lower` below and `num_upper` above the diagonal (-1: keep all)."""
    x = _t(input)
    m, n = x.shape[-2], x.shape[-1]
    i = loom.arange(m).unsqueeze(-1)
    j = loom.arange(n).unsqueeze(0)
    keep = loom.ones(m, n, dtype=loom.bool)
    if int(num_lower) >= 0:
        keep = loom.logical_and(keep, i - j <= int(num_lower))
    if int(num_upper) >= 0:
        keep = loom.logical_and(keep, j - i <= int(num_upper))
    return loom.where(keep, x, loom.zeros((), dtype=x.dtype))


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    """`x` divided by its L2 norm over `axis`."""
    from loom.tf.math import l2_normalize as f
    return f(x, axis, epsilon)
