"""Movement ops: views, joins and splits, built on reshape/permute/expand/pad/slice/flip.

Every op here follows PyTorch's name, signature and result (shape, dtype,
values, gradient). Ops that PyTorch implements as views return views: they
share their input's storage, so an in-place write through either is seen by
both (loom/alias.py). An op that leaves the tensor unchanged (a reshape to
the same shape, an identity permute) returns its input object itself.
"""
from __future__ import annotations

import math
from typing import Sequence

from loom import dtypes as dt
from loom.alias import layout_of, make_view
from loom.errors import DTypeError, LoomError, LoomIndexError, ShapeError, fmt_shape
from loom.tensor import Size, Tensor, apply, broadcast_shapes, const, normalize_dim, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _sizes(shape, op: str) -> list[int]:
    """Sizes given as varargs or as one sequence, as ints."""
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, Size)):
        shape = shape[0]
    out = []
    for s in shape:
        if isinstance(s, Tensor):
            s = int(s.item())
        if not isinstance(s, int) or isinstance(s, bool):
            try:
                s = int(s)  # NumPy integers.
            except (TypeError, ValueError):
                raise TypeError(f"loom.{op}: sizes must be ints, got {shape!r}") from None
        out.append(s)
    return out


def _dim_list(dims, op: str) -> list:
    """Dims given as one int, varargs or one sequence."""
    if len(dims) == 1:
        dims = dims[0]
    return [dims] if isinstance(dims, int) else list(dims)


def _copy(x: Tensor) -> Tensor:
    """A new node with x's value (PyTorch ops that copy must not alias their input)."""
    return apply("reshape", (x,), {"shape": tuple(x.shape)})


def _zero_pad_value(d: dt.DType):
    """The pad value that adds as an exact identity: -0.0 keeps the sign of a -0.0 it is added to."""
    if d is dt.bool_:
        return False
    return -0.0 if d.is_floating_point else 0


# ================================================================ views

def reshape(x, *shape) -> Tensor:
    """The elements of `x` in a new shape; one size may be -1 (inferred).

    Examples
    --------
    >>> loom.arange(6).reshape(2, -1).shape
    loom.Size([2, 3])
    """
    x = _t(x)
    sizes = _sizes(shape, "reshape")
    n = x.numel()
    if sizes.count(-1) > 1:
        raise ShapeError(f"loom.reshape: only one dimension can be inferred, got {sizes}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or n % known:
            raise ShapeError(f"loom.reshape: shape {sizes} is invalid for input of size {n} "
                             f"(shape {fmt_shape(x.shape)})"
                             + ("; -1 is ambiguous next to a 0-size dim" if known == 0 else ""))
        sizes[sizes.index(-1)] = n // known
    if any(s < 0 for s in sizes) or math.prod(sizes) != n:
        raise ShapeError(f"loom.reshape: shape {sizes} is invalid for input of size {n} "
                         f"(shape {fmt_shape(x.shape)})")
    if tuple(sizes) == tuple(x.shape):
        return x
    # A view of x where PyTorch's strides allow one, else a copy.
    return make_view(x, apply("reshape", (x,), {"shape": tuple(sizes)}))


def view(x, *shape) -> Tensor:
    """`x` in a new shape, sharing its storage; `x.view(dtype)` reads a copy of its bytes as `dtype`.

    Like PyTorch's, it raises when `x`'s strides do not allow the new shape
    without a copy (a transposed matrix flattened); `reshape` copies then.

    Examples
    --------
    >>> loom.zeros(4).view(2, 2).shape
    loom.Size([2, 2])
    """
    if len(shape) == 1 and (isinstance(shape[0], dt.DType) or shape[0] in (float, int, bool)
                            or type(shape[0]).__name__ == "dtype"):
        return _view_dtype(_t(x), dt.as_dtype(shape[0]))
    x = _t(x)
    out = reshape(x, *shape)
    if out is not x and out._root is None:
        raise ShapeError(f"loom.view: view size {list(out.shape)} is not compatible with the input's size "
                         f"{fmt_shape(x.shape)} and stride {list(layout_of(x)[0])} (at least one dimension "
                         "spans across two contiguous subspaces); use .reshape(...) instead")
    return out


def _view_dtype(x: Tensor, d: dt.DType) -> Tensor:
    """`x`'s bytes read as dtype `d`, as PyTorch's `x.view(dtype)`; the last dim scales by the itemsize ratio.

    Unlike PyTorch's, the result is a copy: in-place writes to it do not reach `x`.
    """
    import numpy as np
    from loom.tensor import _share
    from loom.function import tracing
    if d is x.dtype:
        return x
    if tracing():
        raise LoomError(f"loom.view: viewing a tensor as another dtype ({x.dtype.name} as {d.name}) runs eagerly "
                        "only; loom.function cannot trace it")
    src, dst = np.dtype(x.dtype.np).itemsize, np.dtype(d.np).itemsize
    if src != dst and (x.ndim == 0 or (x.shape[-1] * src) % dst):
        raise ShapeError(f"loom.view: cannot view a {x.dtype.name} tensor of shape {fmt_shape(x.shape)} as "
                         f"{d.name}: the last dim's size in bytes ({x.shape[-1] if x.ndim else 0} x {src}) must "
                         f"be a multiple of {dst}")
    if src != dst and not x.is_contiguous():
        raise ShapeError(f"loom.view: viewing a non-contiguous {x.dtype.name} tensor (stride "
                         f"{list(layout_of(x)[0])}) as {d.name} changes the element size; call .contiguous() first")
    # A copy of the bytes, not shared memory: loom's lazy values must not see later writes through either tensor.
    a = np.ascontiguousarray(x.detach()._array()).view(d.np)
    return _share(np.array(a), d)


def view_as(x, other) -> Tensor:
    """`x` viewed with `other`'s shape.

    Examples
    --------
    >>> loom.zeros(6).view_as(loom.zeros(2, 3)).shape
    loom.Size([2, 3])
    """
    return reshape(x, tuple(other.shape))


def reshape_as(x, other) -> Tensor:
    """`x` reshaped to `other`'s shape.

    Examples
    --------
    >>> loom.zeros(6).reshape_as(loom.zeros(3, 2)).shape
    loom.Size([3, 2])
    """
    return reshape(x, tuple(other.shape))


def permute(x, *dims) -> Tensor:
    """Reorder the dims of `x`: output dim i is input dim `dims[i]`.

    Examples
    --------
    >>> loom.zeros(2, 3, 4).permute(2, 0, 1).shape
    loom.Size([4, 2, 3])
    """
    x = _t(x)
    dims = _sizes(dims, "permute")
    n = len(x._node.shape)
    if len(dims) == n and n and all(0 <= d < n for d in dims):
        perm = tuple(dims)  # Already normalised (the common case): checked by the permute rule itself.
        if len(set(perm)) == n:
            return perm_view(x, perm)
    if len(dims) != x.ndim:
        raise ShapeError(f"loom.permute: number of dims {len(dims)} does not match the rank "
                         f"{x.ndim} of the input {fmt_shape(x.shape)}")
    perm = tuple(normalize_dim(d, x.ndim, "permute") for d in dims) if x.ndim else ()
    if len(set(perm)) != len(perm):
        raise ShapeError(f"loom.permute: repeated dim in {dims}")
    return perm_view(x, perm)


def perm_view(x: Tensor, perm: tuple) -> Tensor:
    """`x` permuted by `perm` (distinct dims in range) as a view; `x` itself for the identity."""
    if perm == tuple(range(len(perm))):
        return x
    return make_view(x, apply("permute", (x,), {"perm": perm}))


def transpose(x, dim0: int, dim1: int) -> Tensor:
    """Swap two dims.

    Examples
    --------
    >>> loom.zeros(2, 3, 4).transpose(0, -1).shape
    loom.Size([4, 3, 2])
    """
    x = _t(x)
    n = len(x._node.shape)
    a, b = normalize_dim(dim0, n, "transpose"), normalize_dim(dim1, n, "transpose")
    if n == 0:
        return x
    perm = list(range(n))
    perm[a], perm[b] = perm[b], perm[a]
    return perm_view(x, tuple(perm))


swapaxes = swapdims = transpose


def t(x) -> Tensor:
    """Transpose a matrix; 0-d and 1-d tensors come back as they are.

    Examples
    --------
    >>> loom.zeros(2, 3).t().shape
    loom.Size([3, 2])
    """
    x = _t(x)
    n = len(x._node.shape)
    if n > 2:
        raise ShapeError(f"loom.t: expects a tensor with <= 2 dims, got {fmt_shape(x.shape)}; "
                         "use transpose(dim0, dim1) or .mT")
    return perm_view(x, (1, 0)) if n == 2 else x


def adjoint(x) -> Tensor:
    """The conjugate transpose of the last two dims (a transpose for real tensors).

    Examples
    --------
    >>> loom.zeros(5, 2, 3).adjoint().shape
    loom.Size([5, 3, 2])
    """
    return _conj(_mT(_t(x), "adjoint"))


def _conj(x: Tensor) -> Tensor:
    """The conjugate of a complex tensor (a computed value, not a view); a real tensor itself."""
    return apply("conj", (x,), {}) if x.dtype.is_complex else x


def _mH(x: Tensor) -> Tensor:
    return _conj(_mT(x, "mH"))


def _H(x: Tensor) -> Tensor:
    return _conj(_T(x))


def _mT(x: Tensor, op: str = "mT") -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"loom.{op}: only supported on matrices or batches of matrices, got a "
                         f"{x.ndim}-d tensor {fmt_shape(x.shape)}")
    return transpose(x, -2, -1)


def _T(x: Tensor) -> Tensor:
    return permute(x, list(range(x.ndim))[::-1]) if x.ndim > 1 else x


def movedim(x, source, destination) -> Tensor:
    """Move dims `source` to positions `destination`; the others keep their order.

    Examples
    --------
    >>> loom.zeros(2, 3, 4).movedim(0, -1).shape
    loom.Size([3, 4, 2])
    """
    x = _t(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError(f"loom.movedim: source {src} and destination {dst} must have the same length")
    src = [normalize_dim(s, x.ndim, "movedim") for s in src]
    dst = [normalize_dim(d, x.ndim, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"loom.movedim: repeated dim in source {src} or destination {dst}")
    if x.ndim == 0:
        return x
    perm = [-1] * x.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(x.ndim) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return permute(x, perm)


moveaxis = movedim


def expand(x, *sizes) -> Tensor:
    """Broadcast to `sizes` without copying data; -1 keeps a dim, new dims go in front.

    Examples
    --------
    >>> loom.zeros(3, 1).expand(2, -1, 4).shape
    loom.Size([2, 3, 4])
    """
    x = _t(x)
    sizes = _sizes(sizes, "expand")
    if len(sizes) < x.ndim:
        raise ShapeError(f"loom.expand: the number of sizes {len(sizes)} must be at least the rank "
                         f"{x.ndim} of {fmt_shape(x.shape)}")
    lead = len(sizes) - x.ndim
    target = []
    for i, s in enumerate(sizes):
        if s == -1:
            if i < lead:
                raise ShapeError(f"loom.expand: -1 is not allowed for the new leading dim {i}")
            s = x.shape[i - lead]
        elif s < 0:
            raise ShapeError(f"loom.expand: invalid size {s} in {sizes}")
        target.append(s)
    for i, s in enumerate(x.shape):
        if s != 1 and s != target[lead + i]:
            raise ShapeError(f"loom.expand: the expanded size {target[lead + i]} must match the existing "
                             f"size {s} at non-singleton dim {lead + i}; input {fmt_shape(x.shape)}, "
                             f"target {fmt_shape(target)}")
    return make_view(x, _broadcast(x, target, "expand"))


def expand_as(x, other) -> Tensor:
    """`x` expanded to `other`'s shape.

    Examples
    --------
    >>> loom.zeros(3).expand_as(loom.zeros(2, 3)).shape
    loom.Size([2, 3])
    """
    return expand(x, tuple(other.shape))


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    """All tensors broadcast to their common shape.

    Examples
    --------
    >>> [t.shape for t in loom.broadcast_tensors(loom.zeros(3, 1), loom.zeros(4))]
    [loom.Size([3, 4]), loom.Size([3, 4])]
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [_t(v) for v in tensors]
    shape = broadcast_shapes(*(tuple(v.shape) for v in ts), op="broadcast_tensors")
    return tuple(_broadcast(v, shape, "broadcast_tensors") for v in ts)


def broadcast_to(x, size) -> Tensor:
    """`x` broadcast to `size` (-1 keeps a dim), as :func:`expand`.

    Examples
    --------
    >>> loom.broadcast_to(loom.zeros(3), (2, 3)).shape
    loom.Size([2, 3])
    """
    return expand(x, tuple(size))


def _broadcast(x: Tensor, shape, op: str) -> Tensor:
    from loom.tensor import broadcast_to as bt
    return bt(x, shape, op)


def squeeze(x, dim=None) -> Tensor:
    """Drop dims of size 1: all of them, or those among `dim` (an int or a tuple).

    Examples
    --------
    >>> loom.zeros(1, 3, 1).squeeze().shape
    loom.Size([3])
    """
    x = _t(x)
    if dim is None:
        dims = [i for i, s in enumerate(x.shape) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_dim(d, x.ndim, "squeeze") for d in dims]
        dims = [d for d in dims if x.ndim and x.shape[d] == 1]
    if not dims:
        return x
    return reshape(x, [s for i, s in enumerate(x.shape) if i not in dims])


def unsqueeze(x, dim: int) -> Tensor:
    """Insert a dim of size 1 at `dim` (negative counts from the end of the result).

    Examples
    --------
    >>> loom.zeros(2, 3).unsqueeze(-1).shape
    loom.Size([2, 3, 1])
    """
    x = _t(x)
    d = normalize_dim(dim, x.ndim + 1, "unsqueeze")
    shape = list(x.shape)
    shape.insert(d, 1)
    return reshape(x, shape)


def flatten(x, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims `start_dim`..`end_dim` into one.

    Examples
    --------
    >>> loom.zeros(2, 3, 4).flatten(1).shape
    loom.Size([2, 12])
    """
    x = _t(x)
    s = normalize_dim(start_dim, x.ndim, "flatten")
    e = normalize_dim(end_dim, x.ndim, "flatten")
    if x.ndim == 0:
        return reshape(x, 1)
    if s > e:
        raise ShapeError(f"loom.flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:s]) + [math.prod(x.shape[s:e + 1])] + list(x.shape[e + 1:])
    return reshape(x, shape)


def unflatten(x, dim: int, sizes) -> Tensor:
    """Split dim `dim` into `sizes` (one may be -1).

    Examples
    --------
    >>> loom.zeros(3, 8).unflatten(1, (2, -1)).shape
    loom.Size([3, 2, 4])
    """
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "unflatten")
    sizes = _sizes((sizes,), "unflatten")
    if not sizes:
        raise ShapeError("loom.unflatten: sizes must be non-empty")
    if sizes.count(-1) > 1:
        raise ShapeError(f"loom.unflatten: only one dimension can be inferred, got {sizes}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or x.shape[d] % known:
            raise ShapeError(f"loom.unflatten: sizes {sizes} do not fit dim {d} of size {x.shape[d]}")
        sizes[sizes.index(-1)] = x.shape[d] // known
    if math.prod(sizes) != x.shape[d]:
        raise ShapeError(f"loom.unflatten: sizes {sizes} do not multiply to dim {d} of size {x.shape[d]}")
    return reshape(x, list(x.shape[:d]) + sizes + list(x.shape[d + 1:]))


def ravel(x) -> Tensor:
    """All elements as a 1-d tensor, in row-major order.

    Examples
    --------
    >>> loom.zeros(2, 3).ravel().shape
    loom.Size([6])
    """
    return reshape(x, -1)


# ================================================================ slicing

def _slice_dim(x: Tensor, dim: int, start: int, stop: int, step: int = 1) -> Tensor:
    if start == 0 and stop == x.shape[dim] and step == 1:
        return x
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return make_view(x, apply("slice", (x,), {"starts": starts, "stops": stops, "steps": steps}))


def narrow(x, dim: int, start: int, length: int) -> Tensor:
    """Elements `start` .. `start + length` of dim `dim` (a negative start counts from the end).

    Examples
    --------
    >>> loom.arange(6).narrow(0, 2, 3).tolist()
    [2, 3, 4]
    """
    x = _t(x)
    if x.ndim == 0:
        raise ShapeError("loom.narrow: cannot be applied to a 0-dim tensor")
    d = normalize_dim(dim, x.ndim, "narrow")
    start = int(start.item()) if isinstance(start, Tensor) else int(start)
    n = x.shape[d]
    if not -n <= start <= n:
        raise LoomIndexError(f"loom.narrow: start {start} is out of range for dim {d} of size {n}")
    if start < 0:
        start += n
    if length < 0 or start + length > n:
        raise ShapeError(f"loom.narrow: start {start} + length {length} exceeds dim {d} of size "
                         f"{n} in {fmt_shape(x.shape)}")
    return _slice_dim(x, d, start, start + length)


def select(x, dim: int, index: int) -> Tensor:
    """The slice at `index` of dim `dim`, with that dim removed.

    Examples
    --------
    >>> loom.arange(6).reshape(2, 3).select(1, -1).tolist()
    [2, 5]
    """
    x = _t(x)
    if x.ndim == 0:
        raise LoomIndexError("loom.select: cannot be applied to a 0-dim tensor")
    d = normalize_dim(dim, x.ndim, "select")
    n = x.shape[d]
    index = int(index)
    if not -n <= index < n:
        raise LoomIndexError(f"loom.select: index {index} is out of range for dim {d} of size {n}")
    index %= n
    return reshape(_slice_dim(x, d, index, index + 1), [s for i, s in enumerate(x.shape) if i != d])


# ================================================================ joins

def _join(parts: list[Tensor], d: int, pad_value) -> Tensor:
    """Concatenate same-dtype parts along d: pad each half into place and add (a balanced tree)."""
    if len(parts) == 1:
        return parts[0]
    mid = len(parts) // 2
    left, right = _join(parts[:mid], d, pad_value), _join(parts[mid:], d, pad_value)
    lp = [(0, 0)] * left.ndim
    rp = [(0, 0)] * left.ndim
    lp[d] = (0, right.shape[d])
    rp[d] = (left.shape[d], 0)
    a = apply("pad", (left,), {"pads": lp, "value": pad_value})
    b = apply("pad", (right,), {"pads": rp, "value": pad_value})
    # Pads of -0.0 (floats), 0 (ints) or False (bool) make the sum exact: -0.0, inf and NaN survive.
    return apply("or" if left.dtype is dt.bool_ else "add", (a, b), {})


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim, promoting their dtypes as PyTorch does.

    Built from pad and add only: each part is padded into place (with -0.0, so
    the sum is exact for every float value) and the parts are summed.

    Examples
    --------
    >>> loom.cat([loom.zeros(2, 3), loom.ones(1, 3)]).shape
    loom.Size([3, 3])
    """
    if isinstance(tensors, Tensor):
        raise TypeError("loom.cat: expected a sequence of tensors, got a single Tensor")
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError("loom.cat: expected a non-empty sequence of tensors")
    dtype = dt.result_type(*ts)
    # PyTorch skips 1-d empty tensors when checking shapes (they still take part in promotion).
    skipped = [v.ndim == 1 and v.shape[0] == 0 for v in ts]
    full = [v for v, skip in zip(ts, skipped) if not skip]
    if not full:
        return _copy(ts[0].to(dtype))
    ref = full[0]
    if ref.ndim == 0:
        raise ShapeError("loom.cat: zero-dimensional tensor cannot be concatenated")
    d = normalize_dim(dim, ref.ndim, "cat")
    for v in full:
        if v.ndim == 0:
            raise ShapeError("loom.cat: zero-dimensional tensor cannot be concatenated")
        if v.ndim != ref.ndim:
            raise ShapeError(f"loom.cat: tensors must have the same number of dimensions: got "
                             f"{fmt_shape(ref.shape)} and {fmt_shape(v.shape)}")
        bad = [i for i, (a, b) in enumerate(zip(v.shape, ref.shape)) if i != d and a != b]
        if bad:
            raise ShapeError(f"loom.cat: sizes of tensors must match except in dim {d}; expected size "
                             f"{ref.shape[bad[0]]} but got {v.shape[bad[0]]} in dim {bad[0]}: shapes "
                             f"{fmt_shape(ref.shape)} and {fmt_shape(v.shape)}")
    empty_shape = list(ref.shape)
    empty_shape[d] = 0
    # Skipped empties still get a (zero-size) gradient: reshape them to an empty slab.
    parts = [(reshape(v, empty_shape) if skip else v).to(dtype) for v, skip in zip(ts, skipped)]
    if len(parts) == 1:
        return _copy(parts[0])
    return _join(parts, d, _zero_pad_value(dtype))


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join same-shape tensors along a new dim `dim`.

    Examples
    --------
    >>> loom.stack([loom.zeros(2), loom.ones(2)], dim=1).shape
    loom.Size([2, 2])
    """
    if isinstance(tensors, Tensor):
        raise TypeError("loom.stack: expected a sequence of tensors, got a single Tensor")
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError("loom.stack: expected a non-empty sequence of tensors")
    for k, v in enumerate(ts):
        if tuple(v.shape) != tuple(ts[0].shape):
            raise ShapeError(f"loom.stack: all tensors must have one shape; tensor 0 has "
                             f"{fmt_shape(ts[0].shape)} and tensor {k} has {fmt_shape(v.shape)}")
    d = normalize_dim(dim, ts[0].ndim + 1, "stack")
    return cat([unsqueeze(v, d) for v in ts], d)


def _many(op: str, tensors) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        raise TypeError(f"loom.{op}: expected a sequence of tensors, got a single Tensor")
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError(f"loom.{op}: expected a non-empty sequence of tensors")
    return ts


def hstack(tensors) -> Tensor:
    """Join along dim 0 for 1-d tensors, dim 1 otherwise (0-d tensors count as 1-d).

    Examples
    --------
    >>> loom.hstack([loom.zeros(2), loom.ones(3)]).shape
    loom.Size([5])
    """
    ts = [atleast_1d(v) for v in _many("hstack", tensors)]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Join along dim 0 after making every tensor at least 2-d.

    Examples
    --------
    >>> loom.vstack([loom.zeros(3), loom.ones(3)]).shape
    loom.Size([2, 3])
    """
    return cat([atleast_2d(v) for v in _many("vstack", tensors)], 0)


row_stack = vstack


def dstack(tensors) -> Tensor:
    """Join along dim 2 after making every tensor at least 3-d.

    Examples
    --------
    >>> loom.dstack([loom.zeros(3), loom.ones(3)]).shape
    loom.Size([1, 3, 2])
    """
    return cat([atleast_3d(v) for v in _many("dstack", tensors)], 2)


def column_stack(tensors) -> Tensor:
    """Join as columns: 0-d and 1-d tensors become (n, 1) columns, then join along dim 1.

    Examples
    --------
    >>> loom.column_stack([loom.zeros(3), loom.ones(3, 2)]).shape
    loom.Size([3, 3])
    """
    ts = [reshape(v, v.numel(), 1) if v.ndim <= 1 else v for v in _many("column_stack", tensors)]
    return cat(ts, 1)


def _atleast(n: int, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(_atleast(n, (v,)) for v in tensors[0])
    if len(tensors) > 1:
        return tuple(_atleast(n, (v,)) for v in tensors)
    x = _t(tensors[0])
    if x.ndim >= n:
        return x
    if n == 3 and x.ndim == 2:
        return reshape(x, *x.shape, 1)
    if n == 3 and x.ndim == 1:
        return reshape(x, 1, x.shape[0], 1)
    return reshape(x, [1] * (n - max(x.ndim, 1)) + [x.numel()])


def atleast_1d(*tensors):
    """Tensors with at least one dim (0-d become shape (1,)).

    Examples
    --------
    >>> loom.atleast_1d(loom.tensor(3.0)).shape
    loom.Size([1])
    """
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Tensors with at least two dims (new dims go in front).

    Examples
    --------
    >>> loom.atleast_2d(loom.zeros(3)).shape
    loom.Size([1, 3])
    """
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Tensors with at least three dims, as NumPy: (n,) -> (1, n, 1), (m, n) -> (m, n, 1).

    Examples
    --------
    >>> loom.atleast_3d(loom.zeros(2, 3)).shape
    loom.Size([2, 3, 1])
    """
    return _atleast(3, tensors)


# ================================================================ splits

def _pieces(x: Tensor, d: int, bounds: list[tuple[int, int]]) -> tuple[Tensor, ...]:
    return tuple(_slice_dim(x, d, a, b) for a, b in bounds)


def split(x, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `split_size` along `dim` (the last may be smaller), or pieces of the given sizes.

    Examples
    --------
    >>> [p.shape[0] for p in loom.zeros(5).split(2)]
    [2, 2, 1]
    """
    x = _t(x)
    if x.ndim == 0:
        raise ShapeError("loom.split: cannot split a 0-dim tensor")
    d = normalize_dim(dim, x.ndim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, Tensor) and split_size_or_sections.ndim == 0:
        split_size_or_sections = int(split_size_or_sections.item())
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size < 0 or (size == 0 and n > 0):
            raise ShapeError(f"loom.split: split_size must be positive for dim {d} of size {n}, got {size}")
        sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    else:
        sizes = _sizes((split_size_or_sections,), "split")
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ShapeError(f"loom.split: sections {sizes} do not add up to dim {d} of size {n} "
                             f"in {fmt_shape(x.shape)}")
    bounds, start = [], 0
    for s in sizes:
        bounds.append((start, start + s))
        start += s
    return _pieces(x, d, bounds)


def split_with_sizes(x, split_sizes, dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of the given sizes along `dim`.

    Examples
    --------
    >>> [p.shape[0] for p in loom.zeros(5).split_with_sizes([1, 4])]
    [1, 4]
    """
    return split(x, list(split_sizes), dim)


def tensor_split(x, indices_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `sections` near-equal pieces, or at the given indices (Python slice semantics).

    Examples
    --------
    >>> [p.tolist() for p in loom.arange(5).tensor_split(3)]
    [[0, 1], [2, 3], [4]]
    """
    x = _t(x)
    if x.ndim == 0:
        raise ShapeError("loom.tensor_split: expected at least a 1-dimensional tensor")
    d = normalize_dim(dim, x.ndim, "tensor_split")
    n = x.shape[d]
    spec = indices_or_sections
    if isinstance(spec, Tensor):
        if spec.dtype.category != 1 or spec.ndim > 1:
            raise DTypeError(f"loom.tensor_split: indices_or_sections must be an int or a 0-d/1-d integer "
                             f"tensor, got {spec.dtype.name}{fmt_shape(spec.shape)}")
        spec = int(spec.item()) if spec.ndim == 0 else spec.tolist()
    if isinstance(spec, int):
        if spec <= 0:
            raise ShapeError(f"loom.tensor_split: number of sections must be larger than 0, got {spec}")
        bounds, start = [], 0
        for i in range(spec):
            size = n // spec + (1 if i < n % spec else 0)
            bounds.append((start, start + size))
            start += size
        return _pieces(x, d, bounds)
    cuts = [None] + [int(i) for i in spec] + [None]
    bounds = []
    for a, b in zip(cuts, cuts[1:]):
        lo, hi, _ = slice(a, b).indices(n)
        bounds.append((lo, max(lo, hi)))
    return _pieces(x, d, bounds)


def chunk(x, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into pieces of ceil(n / chunks) along `dim` (so possibly fewer than `chunks`).

    Examples
    --------
    >>> [p.shape[0] for p in loom.zeros(6).chunk(4)]
    [2, 2, 2]
    """
    x = _t(x)
    if x.ndim == 0:
        raise ShapeError("loom.chunk: expected at least a 1-dimensional tensor")
    if chunks <= 0:
        raise ShapeError(f"loom.chunk: chunks must be positive, got {chunks}")
    d = normalize_dim(dim, x.ndim, "chunk")
    n = x.shape[d]
    if n == 0:
        return _pieces(x, d, [(0, 0)] * chunks)
    return split(x, -(-n // chunks), d)


def unbind(x, dim: int = 0) -> tuple[Tensor, ...]:
    """Every slice along `dim`, with that dim removed.

    Examples
    --------
    >>> [v.tolist() for v in loom.arange(4).reshape(2, 2).unbind(1)]
    [[0, 2], [1, 3]]
    """
    x = _t(x)
    if x.ndim == 0:
        raise LoomIndexError("loom.unbind: dimension specified as 0 but tensor has no dimensions")
    d = normalize_dim(dim, x.ndim, "unbind")
    return tuple(select(x, d, i) for i in range(x.shape[d]))


# ================================================================ tiling

def repeat(x, *sizes) -> Tensor:
    """Tile the tensor `sizes[i]` times along each dim (PyTorch's repeat; new dims go in front).

    Examples
    --------
    >>> loom.tensor([1, 2]).repeat(2).tolist()
    [1, 2, 1, 2]
    """
    x = _t(x)
    reps = _sizes(sizes, "repeat")
    if len(reps) < x.ndim:
        raise ShapeError(f"loom.repeat: number of repeat dims {len(reps)} can not be smaller than the "
                         f"rank {x.ndim} of {fmt_shape(x.shape)}")
    if any(r < 0 for r in reps):
        raise ShapeError(f"loom.repeat: repeats must be non-negative, got {reps}")
    x = reshape(x, [1] * (len(reps) - x.ndim) + list(x.shape))
    inter = [v for s in x.shape for v in (1, s)]
    y = reshape(x, inter)
    y = expand(y, [v for r, s in zip(reps, x.shape) for v in (r, s)])
    out = reshape(y, [r * s for r, s in zip(reps, x.shape)])
    # PyTorch's repeat always copies; a result that is still a view of x must not alias it.
    return _copy(out) if out is x or out._root is not None else out


def tile(x, dims) -> Tensor:
    """Like :func:`repeat`, but a short `dims` is padded with leading 1s.

    Examples
    --------
    >>> loom.zeros(2, 3).tile((2,)).shape
    loom.Size([2, 6])
    """
    x = _t(x)
    dims = _sizes((dims,) if not isinstance(dims, int) else ((dims,),), "tile")
    if len(dims) < x.ndim:
        dims = [1] * (x.ndim - len(dims)) + dims
    return repeat(x, dims)


def repeat_interleave(x, repeats=None, dim=None, *, output_size=None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (flattened when dim is None).

    With a tensor of per-element `repeats` the output shape depends on its
    values, so those values are read (the repeats tensor is realised). With
    only a tensor of counts, returns indices repeated by those counts.

    Examples
    --------
    >>> loom.tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
    """
    x = _t(x)
    if repeats is None:
        if x.ndim > 1 or x.dtype.category != 1:
            raise ShapeError(f"loom.repeat_interleave: repeats must be a 0-d or 1-d integer tensor, "
                             f"got {x.dtype.name}{fmt_shape(x.shape)}")
        from loom.tensor import arange
        return repeat_interleave(arange(x.numel(), dtype=x.dtype), reshape(x, -1), 0)
    if dim is None:
        x, dim = reshape(x, -1), 0
    if x.ndim == 0:
        x = reshape(x, 1)
    d = normalize_dim(dim, x.ndim, "repeat_interleave")
    n = x.shape[d]
    if isinstance(repeats, Tensor) and repeats.numel() != 1:
        if repeats.ndim != 1 or repeats.dtype.category != 1:
            raise ShapeError(f"loom.repeat_interleave: repeats must be a 0-d or 1-d integer tensor, "
                             f"got {repeats.dtype.name}{fmt_shape(repeats.shape)}")
        reps = [int(r) for r in repeats.tolist()]
        if len(reps) != n:
            raise ShapeError(f"loom.repeat_interleave: repeats has {len(reps)} entries but dim {d} "
                             f"of {fmt_shape(x.shape)} has size {n}")
        if any(r < 0 for r in reps):
            raise ShapeError(f"loom.repeat_interleave: repeats must be non-negative, got {reps}")
        idx = [i for i, r in enumerate(reps) for _ in range(r)]
        shape = list(x.shape)
        shape[d] = len(idx)
        index_shape = [1] * x.ndim
        index_shape[d] = len(idx)
        index = _broadcast(reshape(tensor(idx, dtype=dt.int64), index_shape), shape, "repeat_interleave")
        return apply("gather", (x, index), {"axis": d})
    r = int(repeats.item()) if isinstance(repeats, Tensor) else int(repeats)
    if r < 0:
        raise ShapeError(f"loom.repeat_interleave: repeats must be non-negative, got {r}")
    y = unsqueeze(x, d + 1)
    shape = list(y.shape)
    shape[d + 1] = r
    y = expand(y, shape)
    out = list(x.shape)
    out[d] *= r
    res = reshape(y, out)
    return _copy(res) if res is x else res


# ================================================================ flips and rolls

def flip(x, *dims) -> Tensor:
    """Reverse the order of elements along `dims`.

    Examples
    --------
    >>> loom.arange(3).flip(0).tolist()
    [2, 1, 0]
    """
    x = _t(x)
    dims = _dim_list(dims, "flip")
    axes = [normalize_dim(d, x.ndim, "flip") for d in dims]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"loom.flip: dim {dims} appears multiple times in the list of dims")
    axes = tuple(sorted(a for a in axes if x.ndim and x.shape[a] > 1))
    if not axes:
        return _copy(x)
    return apply("flip", (x,), {"axes": axes})


def fliplr(x) -> Tensor:
    """Flip dim 1 (left/right).

    Examples
    --------
    >>> loom.tensor([[1, 2]]).fliplr().tolist()
    [[2, 1]]
    """
    x = _t(x)
    if x.ndim < 2:
        raise ShapeError(f"loom.fliplr: expected a tensor with at least 2 dims, got {fmt_shape(x.shape)}")
    return flip(x, [1])


def flipud(x) -> Tensor:
    """Flip dim 0 (up/down).

    Examples
    --------
    >>> loom.tensor([[1], [2]]).flipud().tolist()
    [[2], [1]]
    """
    x = _t(x)
    if x.ndim < 1:
        raise ShapeError("loom.flipud: expected a tensor with at least 1 dim, got a 0-d tensor")
    return flip(x, [0])


def roll(x, shifts, dims=None) -> Tensor:
    """Shift elements cyclically along `dims` (over the flattened tensor when dims is None).

    Examples
    --------
    >>> loom.arange(4).roll(1).tolist()
    [3, 0, 1, 2]
    """
    x = _t(x)
    shifts = [shifts] if isinstance(shifts, int) else [int(s) for s in shifts]
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(f"loom.roll: shifts {shifts} need dims of the same length")
        return reshape(roll(reshape(x, -1), shifts, 0), tuple(x.shape))
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"loom.roll: shifts {shifts} and dims {dims} must have the same length")
    out = x
    for s, dim in zip(shifts, dims):
        d = normalize_dim(dim, x.ndim, "roll")
        n = out.shape[d] if out.ndim else 1
        if n == 0 or s % n == 0:
            continue
        s %= n
        out = cat([_slice_dim(out, d, n - s, n), _slice_dim(out, d, 0, n - s)], d)
    return _copy(out) if out is x else out


def rot90(x, k: int = 1, dims=(0, 1)) -> Tensor:
    """Rotate by 90 degrees `k` times in the plane of `dims`, from the first towards the second.

    Examples
    --------
    >>> loom.tensor([[1, 2], [3, 4]]).rot90().tolist()
    [[2, 4], [1, 3]]
    """
    x = _t(x)
    dims = list(dims)
    if len(dims) != 2:
        raise ShapeError(f"loom.rot90: expected total rotation dims == 2, got {dims}")
    if x.ndim < 2:
        raise ShapeError(f"loom.rot90: expected a tensor with at least 2 dims, got {fmt_shape(x.shape)}")
    a, b = (normalize_dim(v, x.ndim, "rot90") for v in dims)
    if a == b:
        raise ShapeError(f"loom.rot90: expected two distinct dims, got {dims}")
    k %= 4
    if k == 1:
        return transpose(flip(x, [b]), a, b)
    if k == 2:
        return flip(x, [a, b])
    if k == 3:
        return transpose(flip(x, [a]), a, b)
    return _copy(x)


# ================================================================ triangles

def _triangle(x, diagonal: int, upper: bool) -> Tensor:
    op = "triu" if upper else "tril"
    x = _t(x)
    if x.ndim < 2:
        raise ShapeError(f"loom.{op}: expected a tensor with at least 2 dims, got {fmt_shape(x.shape)}")
    from loom.tensor import arange
    n, m = x.shape[-2], x.shape[-1]
    offset = reshape(arange(m), 1, m) - reshape(arange(n), n, 1)
    keep = (offset >= diagonal) if upper else (offset <= diagonal)
    keep = _broadcast(keep, tuple(x.shape), op)
    return apply("where", (keep, x, const(0, tuple(x.shape), x.dtype)), {})


def tril(x, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (on and below `diagonal`); the rest is zero.

    Examples
    --------
    >>> loom.ones(2, 2).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _triangle(x, diagonal, False)


def triu(x, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (on and above `diagonal`); the rest is zero.

    Examples
    --------
    >>> loom.ones(2, 2).triu().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return _triangle(x, diagonal, True)


# ================================================================ padding

def pad(x, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last dims: `pad` is (left, right, top, bottom, ...) from the last dim backwards.

    Negative constant amounts crop. Modes: constant, reflect, replicate, circular.

    Examples
    --------
    >>> loom.nn.functional.pad(loom.ones(1, 2), (1, 0)).tolist()
    [[0.0, 1.0, 1.0]]
    """
    x = _t(x)
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"loom.pad: padding length {len(pad)} must be even and at most twice the rank "
                         f"{x.ndim} of {fmt_shape(x.shape)}")
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        out = x
        for d, (lo, hi) in enumerate(pairs):
            if lo < 0 or hi < 0:
                n = out.shape[d]
                if n + lo + hi < 0:
                    raise ShapeError(f"loom.pad: padding ({lo}, {hi}) leaves a negative size for dim {d} "
                                     f"of size {n} in {fmt_shape(x.shape)}")
                start = max(-lo, 0)
                out = _slice_dim(out, d, start, max(start, n - max(-hi, 0)))
        pos = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        if all(p == (0, 0) for p in pos):
            return _copy(out) if out is x else out
        v = 0 if value is None else value
        if x.dtype is dt.bool_:
            v = bool(v)
        elif not x.dtype.is_floating_point:
            v = int(v)
        else:
            v = float(v)
        return apply("pad", (out,), {"pads": pos, "value": v})
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"loom.pad: unknown mode {mode!r}; expected constant, reflect, replicate or circular")
    if value not in (None, 0):
        raise ValueError(f"loom.pad: padding mode {mode!r} doesn't take a value argument")
    out = x
    for d, (lo, hi) in enumerate(pairs):
        if lo == 0 and hi == 0:
            continue
        n = out.shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ShapeError(f"loom.pad: reflect padding ({lo}, {hi}) must be smaller than dim {d} of "
                             f"size {n} in {fmt_shape(x.shape)}")
        if mode == "circular" and (lo > n or hi > n):
            raise ShapeError(f"loom.pad: circular padding ({lo}, {hi}) must be at most dim {d} of "
                             f"size {n} in {fmt_shape(x.shape)}")
        if mode == "replicate" and n == 0:
            raise ShapeError(f"loom.pad: replicate padding needs a non-empty dim {d} in {fmt_shape(x.shape)}")
        if lo < 0 or hi < 0:
            if mode != "circular":
                raise ShapeError(f"loom.pad: negative padding ({lo}, {hi}) is only allowed in constant "
                                 "and circular modes")
            # Circular padding with a negative side crops that side (as PyTorch does).
            start, stop = max(-lo, 0), n - max(-hi, 0)
            core = _slice_dim(out, d, start, stop)
            lo, hi = max(lo, 0), max(hi, 0)
        else:
            core = out
        parts = []
        if lo:
            if mode == "reflect":
                parts.append(flip(_slice_dim(out, d, 1, lo + 1), [d]))
            elif mode == "replicate":
                parts.append(_expand_dim(_slice_dim(out, d, 0, 1), d, lo))
            else:
                parts.append(_slice_dim(out, d, n - lo, n))
        parts.append(core)
        if hi:
            if mode == "reflect":
                parts.append(flip(_slice_dim(out, d, n - hi - 1, n - 1), [d]))
            elif mode == "replicate":
                parts.append(_expand_dim(_slice_dim(out, d, n - 1, n), d, hi))
            else:
                parts.append(_slice_dim(out, d, 0, hi))
        out = cat(parts, d)
    return out


def _expand_dim(x: Tensor, d: int, size: int) -> Tensor:
    shape = list(x.shape)
    shape[d] = size
    return _broadcast(x, shape, "pad")


# ================================================================ diagonals

def _diag_dims(op: str, ndim: int, dim1: int, dim2: int) -> tuple[int, int]:
    a, b = normalize_dim(dim1, ndim, op), normalize_dim(dim2, ndim, op)
    if a == b:
        raise ShapeError(f"loom.{op}: dim1 and dim2 cannot be identical, got {dim1} and {dim2}")
    return a, b


def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal `offset` of the (dim1, dim2) planes, appended as the last dim.

    Built as a strided slice of the flattened plane, so it is a movement op
    with an exact gradient.

    Examples
    --------
    >>> loom.arange(9).reshape(3, 3).diagonal(1).tolist()
    [1, 5]
    """
    x = _t(x)
    if x.ndim < 2:
        raise ShapeError(f"loom.diagonal: expected a tensor with at least 2 dims, got {fmt_shape(x.shape)}")
    a, b = _diag_dims("diagonal", x.ndim, dim1, dim2)
    y = movedim(x, (a, b), (-2, -1))
    n, m = y.shape[-2], y.shape[-1]
    batch = list(y.shape[:-2])
    if offset >= 0:
        length, start = max(0, min(n, m - offset)), offset
    else:
        length, start = max(0, min(n + offset, m)), -offset * m
    flat = reshape(y, batch + [n * m])
    if length == 0:
        out = _slice_dim(flat, len(batch), 0, 0)
    else:
        out = _slice_dim(flat, len(batch), start, start + (length - 1) * (m + 1) + 1, m + 1)
    # A view of x: the plane's two strides add up along the diagonal.
    strides, off = layout_of(x)
    keep = [strides[i] for i in range(x.ndim) if i not in (a, b)]
    off += offset * strides[b] if offset >= 0 else -offset * strides[a]
    return make_view(x, out, (tuple(keep) + (strides[a] + strides[b],), off if length else layout_of(x)[1]))


def diag_embed(x, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices whose diagonal `offset` in the (dim1, dim2) planes holds the last dim of `x`.

    Each value is padded into place (no multiplication), so inf and NaN stay on
    the diagonal and the off-diagonal entries are exact zeros.

    Examples
    --------
    >>> loom.diag_embed(loom.tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]
    """
    x = _t(x)
    if x.ndim == 0:
        raise ShapeError("loom.diag_embed: expected a tensor with at least 1 dim, got a 0-d tensor")
    a, b = _diag_dims("diag_embed", x.ndim + 1, dim1, dim2)
    n = x.shape[-1]
    size = n + abs(offset)
    batch = list(x.shape[:-1])
    start = offset if offset >= 0 else -offset * size
    # Row i of (n, size + 1) holds x[i] then zeros; flattened, x[i] lands at i * (size + 1).
    pads = [(0, 0)] * (x.ndim + 1)
    pads[-1] = (0, size)
    zero = False if x.dtype is dt.bool_ else 0
    rows = apply("pad", (unsqueeze(x, -1),), {"pads": pads, "value": zero})
    flat = reshape(rows, batch + [n * (size + 1)])
    keep = (n - 1) * (size + 1) + 1 if n else 0
    flat = _slice_dim(flat, len(batch), 0, keep)
    pads = [(0, 0)] * len(batch) + [(start if n else 0, size * size - keep - (start if n else 0))]
    flat = apply("pad", (flat,), {"pads": pads, "value": zero})
    out = reshape(flat, batch + [size, size])
    return movedim(out, (x.ndim - 1, x.ndim), (a, b))


def diag(x, diagonal: int = 0) -> Tensor:
    """1-d input: a square matrix with `x` on diagonal `diagonal`; 2-d input: that diagonal.

    Examples
    --------
    >>> loom.diag(loom.tensor([1, 2]), 1).tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    """
    x = _t(x)
    if x.ndim == 1:
        return diag_embed(x, diagonal)
    if x.ndim == 2:
        return _diagonal(x, diagonal)
    raise ShapeError(f"loom.diag: expected a 1-d or 2-d tensor, got {fmt_shape(x.shape)}")


_diagonal = diagonal


def meshgrid(*tensors, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 0-d/1-d tensors; 'xy' swaps the roles of the first two inputs.

    Examples
    --------
    >>> [g.shape for g in loom.meshgrid(loom.zeros(2), loom.zeros(3), indexing="xy")]
    [loom.Size([3, 2]), loom.Size([3, 2])]
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError("loom.meshgrid: expected a non-empty list of tensors")
    if indexing not in ("ij", "xy"):
        raise ValueError(f"loom.meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for v in ts:
        if v.ndim > 1:
            raise ShapeError(f"loom.meshgrid: expected 0-d or 1-d tensors, got {fmt_shape(v.shape)}")
        if v.dtype is not ts[0].dtype:
            raise DTypeError(f"loom.meshgrid: expected all tensors to have the same dtype, got "
                             f"{ts[0].dtype.name} and {v.dtype.name}")
    shape = [v.numel() for v in ts]
    outs = []
    for i, v in enumerate(ts):
        s = [1] * len(ts)
        s[i] = shape[i]
        outs.append(_broadcast(reshape(v, s), shape, "meshgrid"))
    if indexing == "xy" and len(ts) >= 2:
        outs = [transpose(o, 0, 1) for o in outs]
    return tuple(outs)


METHODS = ["reshape", "view", "view_as", "reshape_as", "permute", "transpose", "swapaxes", "swapdims", "t",
           "adjoint", "movedim", "moveaxis", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
           "unflatten", "ravel", "narrow", "select", "split", "split_with_sizes", "tensor_split", "chunk",
           "unbind", "repeat", "tile", "repeat_interleave", "flip", "fliplr", "flipud", "roll", "rot90",
           "tril", "triu", "diagonal", "diag", "diag_embed", "broadcast_to"]
INPLACE = ["tril", "triu", "squeeze", "unsqueeze", "transpose", "t", "swapaxes", "swapdims"]
PROPERTIES = {"mT": _mT, "T": _T, "mH": _mH, "H": _H}
