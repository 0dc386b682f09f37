"""Indexing: getitem, functional setitem, gather/scatter and friends (basic version)."""
from __future__ import annotations

from loom import dtypes as dt
from loom.errors import LoomIndexError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, normalize_dim, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def gather(x, dim: int, index) -> Tensor:
    x, index = _t(x), _t(index)
    d = normalize_dim(dim, x.ndim, "gather")
    return apply("gather", (x, index), {"axis": d})


def getitem(x: Tensor, index) -> Tensor:
    """Basic indexing only (ints, slices, None, Ellipsis)."""
    if not isinstance(index, tuple):
        index = (index,)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.ndim - n_real) + index[k + 1:]
    index = index + (slice(None),) * (x.ndim - sum(1 for i in index if i is not None))
    starts, stops, steps, out_shape, d = [], [], [], [], 0
    for i in index:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[d]
        if isinstance(i, int):
            if not -n <= i < n:
                raise LoomIndexError(f"loom.getitem: index {i} is out of bounds for dim {d} with size {n}")
            i %= n
            starts.append(i); stops.append(i + 1); steps.append(1)
        else:
            a, b, c = i.indices(n)
            if c < 0:
                raise ShapeError("loom.getitem: negative slice steps are not supported; use flip")
            starts.append(a); stops.append(max(a, b)); steps.append(c)
            out_shape.append(max(0, (max(a, b) - a + c - 1) // c))
        d += 1
    y = apply("slice", (x,), {"starts": starts, "stops": stops, "steps": steps})
    return y.reshape(out_shape)


def index_put_functional(x: Tensor, index, value) -> Tensor:
    raise NotImplementedError("setitem is being built")


METHODS = ["gather"]
INPLACE: list[str] = []
