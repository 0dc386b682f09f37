"""Grouped matrix products (`torch.nn.functional.grouped_mm`): one matmul per group of rows, columns
or contraction slices, the groups given by cumulative offsets.

Every group's product is formed over the whole operand and the right one is
selected per row (column, slice) by a mask built in the graph from `offs`,
so the op keeps static shapes and stays lazy.
"""
from __future__ import annotations

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.functional.linalg import matmul
from loom.tensor import Tensor, arange, tensor

_OP = "loom.nn.functional.grouped_mm"


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _groups(offs: Tensor, n: int, g: int) -> Tensor:
    """(g, n) 0/1 membership of positions 0..n-1 in the groups ending at the cumulative `offs`."""
    ends = offs.to(dt.int64).reshape(g, 1)
    starts = _prev(ends)
    pos = arange(n).reshape(1, n)
    return (pos >= starts) & (pos < ends)


def _prev(ends: Tensor) -> Tensor:
    """Each group's start: the previous group's end (0 for the first)."""
    from loom.functional.shape import cat
    zero = tensor([[0]], dtype=dt.int64)
    return cat([zero, ends[:-1]], 0)


def grouped_mm(mat_a: Tensor, mat_b: Tensor, *, offs: Tensor | None = None, bias: Tensor | None = None,
               out_dtype=None) -> Tensor:
    """Grouped matrix products, as `torch.nn.functional.grouped_mm`.

    - (G, M, K) @ (G, K, N) -> (G, M, N): a batched matmul (no offs).
    - (M, K) @ (G, K, N) with offs (G,) -> (M, N): rows of group g use mat_b[g].
    - (G, M, K) @ (K, N) with offs (G,) -> (M, N): columns of group g use mat_a[g].
    - (M, K) @ (K, N) with offs (G,) -> (G, M, N): group g contracts over its slice of K.

    `offs` holds the cumulative ends of the groups.

    Examples
    --------
    >>> a, b = loom.ones(4, 2), loom.stack([loom.ones(2, 3), 2 * loom.ones(2, 3)])
    >>> loom.nn.functional.grouped_mm(a, b, offs=loom.tensor([1, 4], dtype=loom.int32))[:, 0].tolist()
    [2.0, 4.0, 4.0, 4.0]
    """
    a, b = _t(mat_a), _t(mat_b)
    if bias is not None:
        raise LoomValueError(f"{_OP}: bias is not supported (as in PyTorch's CPU kernel)")
    if not a.dtype.is_floating_point or a.dtype is not b.dtype:
        raise DTypeError(f"{_OP}: mat_a and mat_b must be floating point tensors of one dtype, got {a.dtype.name} "
                         f"and {b.dtype.name}")
    if a.shape[-1] != b.shape[-2 if b.ndim == 3 else 0]:
        raise ShapeError(f"{_OP}: contraction sizes differ: mat_a {fmt_shape(a.shape)}, mat_b {fmt_shape(b.shape)}")
    dims = (a.ndim, b.ndim)
    if dims == (3, 3):
        if offs is not None or a.shape[0] != b.shape[0]:
            raise ShapeError(f"{_OP}: 3-d @ 3-d takes no offs and needs one group count, got {fmt_shape(a.shape)} "
                             f"and {fmt_shape(b.shape)}")
        out = matmul(a, b)
    else:
        if offs is None or dims not in ((2, 3), (3, 2), (2, 2)):
            raise ShapeError(f"{_OP}: expected 2-d/3-d operands with offs, got {fmt_shape(a.shape)} and "
                             f"{fmt_shape(b.shape)} with offs={'given' if offs is not None else 'None'}")
        offs = _t(offs)
        g = offs.shape[0]
        if dims == (2, 3):
            m = a.shape[0]
            member = _groups(offs, m, g).to(a.dtype)            # (G, M)
            every = matmul(a.unsqueeze(0), b)                   # (G, M, N)
            out = (every * member.unsqueeze(-1)).sum(0)
        elif dims == (3, 2):
            n = b.shape[1]
            member = _groups(offs, n, g).to(a.dtype)            # (G, N)
            every = matmul(a, b.unsqueeze(0))                   # (G, M, N)
            out = (every * member.unsqueeze(1)).sum(0)
        else:
            k = a.shape[1]
            member = _groups(offs, k, g).to(a.dtype)            # (G, K)
            out = matmul(a.unsqueeze(0) * member.unsqueeze(1), b)
    return out.to(out_dtype) if out_dtype is not None else out


NN_FUNCTIONAL = ["grouped_mm"]
__all__ = NN_FUNCTIONAL
