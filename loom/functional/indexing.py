"""Indexing: getitem, functional setitem, gather/scatter and their relatives.

Everything is built on the movement primitives (slice, flip, reshape, permute,
expand, pad, gather, scatter_add), `where` and `argsort`, so every op here is
lazy and differentiable to any order. Advanced (tensor) indexing flattens the
indexed dims and gathers along them with one linear index; its backward is the
gather primitive's scatter_add.

Indexing follows PyTorch: ints, slices and 0-dim integer tensors select first
(a 0-dim integer tensor acts as an int), then the remaining index tensors
broadcast together and their result dims go where the indexed dims were when
those were adjacent, else in front. Two extensions: slices may have negative
steps (done with flip), and a plain list index is always an index tensor
(PyTorch 2.x still reads some nested lists as tuples, with a deprecation
warning). Only a boolean index realises a value: the mask, to know the shape.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, cast

import numpy as np

from loom import _upper
from loom import dtypes as dt
from loom.alias import make_view
from loom.errors import DTypeError, LoomError, LoomIndexError, ShapeError, fmt_shape
from loom.functional.checks import check, check_index
from loom.ir.ops import PRIMITIVES
from loom.tensor import Tensor, apply, arange, broadcast_shapes, broadcast_to, const, normalize_dim, tensor

# ============================================================== helpers


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _known(t: Tensor) -> np.ndarray | None:
    """The value of `t` when it is already computed (for early checks); never forces a computation."""
    buf = t._node.buffer
    return None if buf is None else np.asarray(buf)


def _reshape(t: Tensor, shape) -> Tensor:
    shape = tuple(shape)
    return t if tuple(t.shape) == shape else apply("reshape", (t,), {"shape": shape})


def _permute(t: Tensor, perm) -> Tensor:
    perm = tuple(perm)
    return t if perm == tuple(range(t.ndim)) else apply("permute", (t,), {"perm": perm})


def _slice_axis(t: Tensor, axis: int, start: int, stop: int) -> Tensor:
    if start == 0 and stop == t.shape[axis]:
        return t
    starts, stops = [0] * t.ndim, list(t.shape)
    starts[axis], stops[axis] = start, stop
    return apply("slice", (t,), {"starts": starts, "stops": stops, "steps": [1] * t.ndim})


def _crop(t: Tensor, shape) -> Tensor:
    """The leading block of `t` with `shape` (same rank)."""
    if tuple(t.shape) == tuple(shape):
        return t
    return apply("slice", (t,), {"starts": [0] * t.ndim, "stops": list(shape), "steps": [1] * t.ndim})


def _where(c: Tensor, a: Tensor, b: Tensor) -> Tensor:
    from loom.functional.math import where
    return where(c, a, b)


def _zeros(shape, d: dt.DType) -> Tensor:
    return const(False if d is dt.bool_ else 0, tuple(shape), d)


def _along(idx: Tensor, shape, axis: int) -> Tensor:
    """A 1-d index laid along `axis` and expanded to `shape` (with shape[axis] = len(idx)), for gather/scatter."""
    view = [1] * len(shape)
    view[axis] = idx.shape[0]
    return broadcast_to(_reshape(idx, view), tuple(shape), "gather")


def _index_tensor(index, op: str, ndim1: bool = False) -> Tensor:
    """An integer index argument as an int64-compatible tensor, or a clear error."""
    if isinstance(index, (list, tuple)) and len(index) == 0:
        index = tensor(np.zeros(0, np.int64))
    index = _t(index)
    if index.dtype.category != 1 or index.dtype is dt.bool_:
        raise DTypeError(f"loom.{op}: expected an integer index tensor, got "
                         f"{index.dtype.name}{fmt_shape(index.shape)}")
    if ndim1:
        if index.ndim > 1:
            raise ShapeError(f"loom.{op}: index must be 0-d or 1-d, got {fmt_shape(index.shape)}")
        index = _reshape(index, (index.numel(),))
    return index


def _in_bounds(index: Tensor, size: int, op: str, dim: int | None, negative: bool = False) -> Tensor:
    """`index` checked against a dim of `size`: now when its values are known, else where it is computed.

    `negative` allows [-size, size) (getitem, take, index_fill); otherwise PyTorch's
    gather/scatter family wants [0, size).
    """
    where = "a 0-d tensor" if dim is None else f"dimension {dim} with size {size}"
    return check_index(index, op, size, where, negative=negative)


def _same_dtype(op: str, x: Tensor, other: Tensor, what: str) -> None:
    if other.dtype is not x.dtype:
        raise DTypeError(f"loom.{op}: expected {what} to have the dtype of self, {x.dtype.name}, "
                         f"got {other.dtype.name}{fmt_shape(other.shape)}")


def _scalar_value(value, x: Tensor, op: str) -> Tensor:
    """A fill value (Python number or 0-d tensor) as a 0-d tensor of x's dtype."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ShapeError(f"loom.{op}: only supports a 0-dimensional value tensor, but got tensor "
                             f"with {value.ndim} dimension(s) ({fmt_shape(value.shape)})")
        return value.to(x.dtype)
    if not isinstance(value, (numbers.Number, np.generic)):
        raise TypeError(f"loom.{op}: value must be a number or a 0-d tensor, got {type(value).__name__}")
    return const(value.item() if isinstance(value, np.generic) else value, (), x.dtype)


# ============================================================== index parsing

@dataclass
class _Adv:
    """One advanced index: the dim it indexes (after the basic step) and its int64 values."""

    dim: int
    index: Tensor
    known: np.ndarray | None  # Values when known; then they are already bounds-checked.


@dataclass
class _Plan:
    """How an index applies: one strided slice, 0-d tensor selects, flips, a reshape, then advanced indices."""

    starts: list[int]
    stops: list[int]
    steps: list[int]
    flips: list[int] = field(default_factory=list)
    selects: list[tuple[int, Tensor]] = field(default_factory=list)
    shape: list[int] = field(default_factory=list)  # Shape after the basic step.
    adv: list[_Adv] = field(default_factory=list)

    @property
    def basic(self) -> bool:
        return not self.selects and not self.adv


_VALID = ("only integers, slices (`:`), ellipsis (`...`), None and integer or boolean tensors "
          "(or lists / arrays of them) are valid indices")


def _classify(item, op: str):
    """One index item as (kind, payload): none, ellipsis, int, slice, select, adv, mask, bool0."""
    if item is None:
        return "none", None
    if item is Ellipsis:
        return "ellipsis", None
    if isinstance(item, (bool, np.bool_)):
        return "bool0", bool(item)
    if isinstance(item, (int, np.integer)):
        return "int", int(item)
    if isinstance(item, slice):
        parts = []
        for v in (item.start, item.stop, item.step):
            try:
                parts.append(None if v is None else v.__index__())
            except (AttributeError, TypeError):
                raise LoomIndexError(f"loom.{op}: slice indices must be integers or None, got "
                                     f"{type(v).__name__}") from None
        return "slice", slice(*parts)
    if isinstance(item, (list, tuple, range, np.ndarray)):
        if isinstance(item, np.ndarray):
            arr = item
        elif len(item) == 0:
            arr = np.zeros(0, np.int64)  # An empty list indexes nothing (an int64 index, as in PyTorch).
        else:
            arr = np.asarray(tensor(list(item)).numpy(force=True))
        if arr.dtype == np.bool_:
            return ("bool0", bool(arr)) if arr.ndim == 0 else ("mask", arr)
        if arr.dtype.kind not in "iu":
            raise LoomIndexError(f"loom.{op}: {_VALID}; got an array of dtype {arr.dtype}")
        if arr.ndim == 0:
            return "int", int(arr)
        t = tensor(arr.astype(np.int64))
        return "adv", t
    if isinstance(item, Tensor):
        d = item.dtype
        if d is dt.bool_ or d is dt.uint8:  # uint8 indices are masks, as in PyTorch.
            if item.ndim == 0:
                return "bool0", bool(item.item())
            return "mask", item
        if d.category != 1:
            raise LoomIndexError(f"loom.{op}: tensors used as indices must be long, int, byte or bool "
                                 f"tensors, got {d.name}{fmt_shape(item.shape)}")
        item = item if d is dt.int64 else item.to(dt.int64)
        return ("select", item) if item.ndim == 0 else ("adv", item)
    raise LoomIndexError(f"loom.{op}: {_VALID}; got {type(item).__name__}")


def _mask_array(mask) -> np.ndarray:
    """A boolean mask's value (this realises a lazy mask: the result shape depends on it)."""
    if isinstance(mask, Tensor):
        return np.asarray(mask.detach().numpy()) != 0
    return np.asarray(mask, dtype=bool)


def _parse(shape: tuple[int, ...], index, op: str) -> _Plan:
    """Turn a Python index into a _Plan for a tensor of `shape`, checking what can be checked now."""
    items = index if isinstance(index, tuple) else (index,)
    parts = [_classify(i, op) for i in items]
    ndim = len(shape)
    consumed = 0
    for kind, p in parts:
        if kind in ("int", "slice", "select", "adv"):
            consumed += 1
        elif kind == "mask":
            consumed += p.ndim
    n_ell = sum(1 for kind, _ in parts if kind == "ellipsis")
    if n_ell > 1:
        raise LoomIndexError(f"loom.{op}: an index can only have a single ellipsis ('...')")
    if consumed > ndim:
        raise LoomIndexError(f"loom.{op}: too many indices for tensor of dimension {ndim}: the index "
                             f"addresses {consumed} dims of shape {fmt_shape(shape)}")
    fill = [("slice", slice(None))] * (ndim - consumed)
    if n_ell:
        k = next(i for i, (kind, _) in enumerate(parts) if kind == "ellipsis")
        parts = parts[:k] + fill + parts[k + 1:]
    else:
        parts = parts + fill

    plan = _Plan(starts=[0] * ndim, stops=list(shape), steps=[1] * ndim)
    d = 0
    for kind, p in parts:
        if kind == "none":
            plan.shape.append(1)
        elif kind == "bool0":
            # A 0-d bool adds a dim of size 1 and keeps it (True) or empties it (False).
            plan.shape.append(1)
            idx = np.zeros(1 if p else 0, np.int64)
            plan.adv.append(_Adv(len(plan.shape) - 1, tensor(idx), idx))
        elif kind == "int":
            n = shape[d]
            if not -n <= p < n:
                raise LoomIndexError(f"loom.{op}: index {p} is out of bounds for dimension {d} with size {n}")
            plan.starts[d], plan.stops[d] = p % n, p % n + 1
            d += 1
        elif kind == "slice":
            n = shape[d]
            if p.step == 0:
                raise ShapeError(f"loom.{op}: slice step cannot be zero (dimension {d})")
            a, b, c = p.indices(n)
            length = len(range(a, b, c))
            if length == 0:
                plan.starts[d] = plan.stops[d] = 0
            elif c > 0:
                plan.starts[d], plan.stops[d], plan.steps[d] = a, a + (length - 1) * c + 1, c
            else:  # Negative step: the same elements in ascending order, then flipped.
                plan.starts[d], plan.stops[d], plan.steps[d] = a + (length - 1) * c, a + 1, -c
                if length > 1:
                    plan.flips.append(d)
            plan.shape.append(length)
            d += 1
        elif kind == "select":
            plan.selects.append((d, _in_bounds(p, shape[d], op, d, negative=True)))
            d += 1
        elif kind == "adv":
            p = _in_bounds(p, shape[d], op, d, negative=True)
            plan.shape.append(shape[d])
            plan.adv.append(_Adv(len(plan.shape) - 1, p, _known(p)))
            d += 1
        else:  # mask
            k = p.ndim
            if tuple(p.shape) != tuple(shape[d:d + k]):
                raise LoomIndexError(f"loom.{op}: the shape of the mask {fmt_shape(p.shape)} does not match "
                                     f"the shape {fmt_shape(shape[d:d + k])} of dims {d}..{d + k - 1} it "
                                     f"indexes in the tensor of shape {fmt_shape(shape)}")
            for j, pos in enumerate(np.nonzero(_mask_array(p))):
                pos = pos.astype(np.int64)
                plan.shape.append(shape[d + j])
                plan.adv.append(_Adv(len(plan.shape) - 1, tensor(pos), pos))
            d += k
    return plan


def _apply_plan(x: Tensor, plan: _Plan) -> Tensor:
    y = x
    if plan.starts != [0] * x.ndim or plan.stops != list(x.shape) or plan.steps != [1] * x.ndim:
        y = apply("slice", (y,), {"starts": plan.starts, "stops": plan.stops, "steps": plan.steps})
    for d, idx in plan.selects:  # A 0-d integer tensor selects one entry of its dim (bounds checked in _parse).
        shape = list(y.shape)
        shape[d] = 1
        y = apply("gather", (y, broadcast_to(_reshape(idx, [1] * y.ndim), shape)), {"axis": d})
    if plan.flips:
        y = apply("flip", (y,), {"axes": tuple(plan.flips)})
    y = _reshape(y, plan.shape)
    if plan.adv:
        y = _advanced(y, plan.adv)
    return y


def _advanced(y: Tensor, advs: list[_Adv]) -> Tensor:
    """Index dims of `y` by broadcast integer tensors: one gather over the flattened indexed dims."""
    dims = [a.dim for a in advs]
    try:
        bshape = broadcast_shapes(*(tuple(a.index.shape) for a in advs))
    except ShapeError:
        raise LoomIndexError("loom.getitem: shape mismatch: indexing tensors could not be broadcast together "
                             "with shapes " + ", ".join(fmt_shape(a.index.shape) for a in advs)) from None
    sizes = [y.shape[d] for d in dims]
    total = math.prod(sizes)
    if len(advs) == 1:
        lin = broadcast_to(advs[0].index, bshape)  # The gather primitive wraps negative indices.
    else:
        # Every index is bounds-checked already (_parse, index_select): only negatives need wrapping.
        parts: list[Tensor] = []
        stride = 1
        for a, n in zip(reversed(advs), reversed(sizes)):
            t = a.index
            if a.known is None or (a.known < 0).any():
                t = _where(t < 0, t + n, t)
            parts.append(t * stride if stride != 1 else t)
            stride *= n
        lin = parts[0]
        for part in parts[1:]:
            lin = lin + part
        lin = broadcast_to(lin, bshape)
    rest = [i for i in range(y.ndim) if i not in dims]
    rest_shape = [y.shape[i] for i in rest]
    z = _reshape(_permute(y, dims + rest), [total] + rest_shape)
    m = math.prod(bshape)
    idx = broadcast_to(_reshape(lin, [m] + [1] * len(rest)), [m] + rest_shape)
    out = _reshape(apply("gather", (z, idx), {"axis": 0}), list(bshape) + rest_shape)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        nb, p = len(bshape), dims[0]
        out = _permute(out, list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + len(rest))))
    return out


# ============================================================== getitem / setitem

def getitem(x: Tensor, index) -> Tensor:
    """`x[index]` with PyTorch's semantics, as a lazy, differentiable view-like result.

    Supports ints (negative too), slices with any step (negative steps via flip),
    None, Ellipsis, integer tensors / lists / NumPy arrays (advanced indexing,
    broadcast together), boolean masks and 0-d bools, in any combination.
    A boolean mask is realised to know the result's shape; everything else
    stays lazy. Out-of-range indices raise `LoomIndexError` at the call when the
    index values are known (ints, lists, arrays, computed tensors), else when the
    index is computed (a ``check`` node in the graph), in every backend and trace.

    Examples
    --------
    >>> x = loom.arange(12).reshape(3, 4)
    >>> x[1:, ::-2].tolist()
    [[7, 5], [11, 9]]
    >>> x[[0, 2], [1, 3]].tolist()
    [1, 11]
    """
    plan = _parse(tuple(x.shape), index, "getitem")
    # Basic indexing (ints, slices with positive steps, None, Ellipsis) gives a view of x, as in
    # PyTorch; advanced indices, masks and negative steps give a copy.
    return make_view(x, _apply_plan(x, plan))


def _as_value(x: Tensor, value) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (numbers.Number, np.generic)):
        return const(value.item() if isinstance(value, np.generic) else value, (), x.dtype)
    return tensor(value)


def _value_like(x: Tensor, value, shape, op: str) -> Tensor:
    """`value` cast to x's dtype and broadcast to `shape` (leading size-1 dims may be dropped)."""
    v = _as_value(x, value)
    given = tuple(v.shape)
    v = v.to(x.dtype)
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = _reshape(v, v.shape[1:])
    try:
        return broadcast_to(v, tuple(shape), op)
    except ShapeError:
        raise ShapeError(f"loom.{op}: shape mismatch: value tensor of shape {fmt_shape(given)} cannot "
                         f"be broadcast to indexing result of shape {fmt_shape(shape)}") from None


def _last_wins(key: Tensor, axis: int) -> Tensor | None:
    """Which entries of a scatter index win when several write one place: the last, as PyTorch's CPU loop."""
    n = key.shape[axis]
    if n <= 1 or key.numel() == 0:
        return None
    order = apply("argsort", (key,), {"axis": axis, "descending": False})  # Stable: ties keep their order.
    s = apply("gather", (key, order), {"axis": axis})
    differs = _slice_axis(s, axis, 0, n - 1) != _slice_axis(s, axis, 1, n)
    pads = [(0, 0)] * key.ndim
    pads[axis] = (0, 1)
    last_sorted = apply("pad", (differs,), {"pads": pads, "value": True})
    return apply("scatter_add", (_zeros(key.shape, dt.bool_), order, last_sorted), {"axis": axis})


def _scatter_overwrite(x: Tensor, axis: int, idx: Tensor, src: Tensor, unique: bool = False) -> Tensor:
    """x with x[.., idx[i], ..] = src[i] along `axis`: the other entries and their gradients pass through.

    Duplicate indices keep the last source (PyTorch leaves this undefined); `unique`
    skips that bookkeeping when the index is known to have no duplicates.
    """
    src = _crop(src, idx.shape)
    if idx.numel() == 0:
        return x
    n = x.shape[axis] if x.ndim else 1
    keep = None
    if not unique:
        key = _where(idx < 0, idx + n, idx) if x.ndim else idx
        keep = _last_wins(key, axis)
    if keep is not None:
        src = _where(keep, src, _zeros((), x.dtype))
        mark = keep
    else:
        mark = const(True, tuple(idx.shape), dt.bool_)
    hit = apply("scatter_add", (_zeros(x.shape, dt.bool_), idx, mark), {"axis": axis})
    placed = apply("scatter_add", (_zeros(x.shape, x.dtype), idx, src), {"axis": axis})
    return apply("where", (hit, placed, x), {})


def _positions(x: Tensor, plan: _Plan) -> Tensor:
    """The flat position in x of every element of x[index] (int64, the indexing result's shape)."""
    flat = _reshape(arange(x.numel()), tuple(x.shape))
    return _apply_plan(flat, plan)


def _unique_positions(pos: Tensor, plan: _Plan) -> bool:
    """Whether the positions are known to hold no duplicates (every index value known up front)."""
    if any(a.known is None for a in plan.adv) or any(_known(t) is None for _, t in plan.selects):
        return False
    p = np.asarray(pos.realize()._node.buffer).reshape(-1)  # Computed from constants only.
    return len(np.unique(p)) == p.size


def _mask_only(x: Tensor, index):
    """The boolean tensor of `x[mask] = value` when the index is just a mask of x's leading dims."""
    m = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if isinstance(m, Tensor) and m.dtype in (dt.bool_, dt.uint8) and \
            tuple(m.shape) == tuple(x.shape[:m.ndim]):
        return m if m.dtype is dt.bool_ else m != 0
    return None


def index_put_functional(x: Tensor, index, value, op: str = "setitem") -> Tensor:
    """x with `x[index] = value` applied, as a new tensor (what `Tensor.__setitem__` assigns).

    Every index kind `getitem` takes works here. `value` broadcasts to the shape
    of `x[index]` and is cast to x's dtype. Gradients flow to x (zero where
    overwritten) and to `value`. A mask index with a value that does not depend
    on the number of selected elements stays lazy; other masks are realised.
    Duplicate positions keep the last value written.

    Examples
    --------
    >>> x = loom.zeros(2, 3)
    >>> x[:, [0, 2]] = loom.tensor([1.0, 2.0])
    >>> x.tolist()
    [[1.0, 0.0, 2.0], [1.0, 0.0, 2.0]]
    """
    value = _as_value(x, value)
    m = _mask_only(x, index)
    if m is not None:
        rest = tuple(x.shape[m.ndim:])
        squeezed = value.ndim
        while squeezed > len(rest) and value.shape[value.ndim - squeezed] == 1:
            squeezed -= 1
        if squeezed <= len(rest):  # The value does not depend on how many elements the mask selects.
            v = _value_like(x, value, rest, "setitem")
            mb = broadcast_to(_reshape(m, tuple(m.shape) + (1,) * len(rest)), tuple(x.shape), "setitem")
            return apply("where", (mb, broadcast_to(v, tuple(x.shape), "setitem"), x), {})
    plan = _parse(tuple(x.shape), index, op)
    if plan.basic:
        v = _value_like(x, value, plan.shape, "setitem")
        sliced = [len(range(a, b, c)) for a, b, c in zip(plan.starts, plan.stops, plan.steps)]
        v = _reshape(v, sliced)
        if plan.flips:
            v = apply("flip", (v,), {"axes": tuple(plan.flips)})
        hit = const(True, tuple(sliced), dt.bool_)
        if sliced != list(x.shape):
            attrs = {"starts": plan.starts, "stops": plan.stops, "steps": plan.steps}
            # Putting a slice back in place is the slice's own transpose.
            place = cast(Callable[..., tuple], PRIMITIVES["slice"].vjp)
            v, hit = place(v, x, None, attrs)[0], place(hit, x, None, attrs)[0]
        return apply("where", (hit, v, x), {})
    pos = _positions(x, plan)
    v = _value_like(x, value, pos.shape, "setitem")
    flat = _reshape(x, (x.numel(),))
    out = _scatter_overwrite(flat, 0, _reshape(pos, (pos.numel(),)), _reshape(v, (v.numel(),)),
                             unique=_unique_positions(pos, plan))
    return _reshape(out, tuple(x.shape))


def index_put(x, indices, values, accumulate: bool = False) -> Tensor:
    """Out-of-place `x[indices] = values` (or `+=` with `accumulate`, summing duplicates).

    `indices` is a tuple of index tensors, one per leading dim (None skips a dim).

    Examples
    --------
    >>> x = loom.zeros(3)
    >>> x.index_put((loom.tensor([0, 0, 2]),), loom.tensor(1.0), accumulate=True).tolist()
    [2.0, 0.0, 1.0]
    """
    x = _t(x)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"loom.index_put: indices must be a tuple of tensors, got {type(indices).__name__}")
    values = _t(values)
    _same_dtype("index_put", x, values, "values")
    index = tuple(slice(None) if i is None else i for i in indices)
    if not accumulate:
        return index_put_functional(x, index, values, "index_put")
    plan = _parse(tuple(x.shape), index, "index_put")
    pos = _positions(x, plan)
    v = _value_like(x, values, pos.shape, "index_put")
    flat = apply("scatter_add", (_reshape(x, (x.numel(),)), _reshape(pos, (pos.numel(),)),
                                 _reshape(v, (v.numel(),))), {"axis": 0})
    return _reshape(flat, tuple(x.shape))


# ============================================================== gather / scatter

def gather(x, dim: int, index) -> Tensor:
    """Values of x along `dim` at `index`: out[i][j] = x[index[i][j]][j] for dim 0 (torch.gather).

    `index` has x's rank and is no larger than x outside `dim`.

    Examples
    --------
    >>> x = loom.tensor([[1, 2], [3, 4]])
    >>> loom.gather(x, 1, loom.tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    x, index = _t(x), _index_tensor(index, "gather")
    d = normalize_dim(dim, x.ndim, "gather")
    index = _in_bounds(index, x.shape[d] if x.ndim else 1, "gather", d if x.ndim else None)
    return apply("gather", (x, index), {"axis": d})


def _scatter_args(x, dim, index, src, op: str):
    x, index = _t(x), _index_tensor(index, op)
    d = normalize_dim(dim, x.ndim, op)
    if isinstance(src, Tensor):
        _same_dtype(op, x, src, "src")
    else:
        src = const(src, tuple(index.shape), x.dtype)
    index = _in_bounds(index, x.shape[d] if x.ndim else 1, op, d if x.ndim else None)
    return x, d, index, src


def scatter_add(x, dim: int, index, src) -> Tensor:
    """x plus src summed into the places `index` names along `dim` (torch.scatter_add).

    Examples
    --------
    >>> loom.zeros(3).scatter_add(0, loom.tensor([0, 2, 0]), loom.tensor([1.0, 2.0, 3.0])).tolist()
    [4.0, 0.0, 2.0]
    """
    x, d, index, src = _scatter_args(x, dim, index, src, "scatter_add")
    return apply("scatter_add", (x, index, src), {"axis": d})


def scatter(x, dim: int, index, src=None, value=None, reduce: str | None = None) -> Tensor:
    """x with src (or a scalar `value`) written at `index` along `dim` (torch.scatter).

    Entries of x that no index names, and their gradients, pass through. With
    duplicate indices PyTorch leaves the result undefined; loom keeps the last.
    `reduce="add"` / `"multiply"` combine with x instead of overwriting.

    Examples
    --------
    >>> loom.zeros(2, 3).scatter(1, loom.tensor([[2], [0]]), 5.0).tolist()
    [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]
    """
    if src is None and value is None:
        raise TypeError("loom.scatter: expected src or value")
    src = value if src is None else src
    if reduce is not None:
        modes = {"add": "sum", "multiply": "prod"}
        if reduce not in modes:
            raise LoomError(f"loom.scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
        return scatter_reduce(x, dim, index, src, modes[reduce])
    x, d, index, src = _scatter_args(x, dim, index, src, "scatter")
    if x.ndim == 0:
        return src.to(x.dtype) if index.numel() else x
    return _scatter_overwrite(x, d, index, src, unique=_known_unique(index, d))


def _known_unique(index: Tensor, axis: int) -> bool:
    k = _known(index)
    if k is None or k.ndim == 0:
        return k is not None
    s = np.sort(np.moveaxis(k, axis, -1), axis=-1)
    return not np.any(s[..., 1:] == s[..., :-1])


_REDUCE_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


def scatter_reduce(x, dim: int, index, src, reduce: str, *, include_self: bool = True) -> Tensor:
    """Reduce src into x at `index` along `dim` with sum, prod, mean, amax or amin (torch.scatter_reduce).

    Built densely: each target place compares against every index entry of its
    row, so memory grows with dim size times index size. Ties in amax/amin share
    the gradient evenly, as in PyTorch.

    Examples
    --------
    >>> x = loom.tensor([1.0, 5.0])
    >>> x.scatter_reduce(0, loom.tensor([0, 0, 1]), loom.tensor([3.0, 2.0, 4.0]), "amax").tolist()
    [3.0, 5.0]
    """
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise LoomError(f"loom.scatter_reduce: reduce must be one of sum, prod, mean, amax, amin; got {reduce!r}")
    x, d, index, src = _scatter_args(x, dim, index, src, "scatter_reduce")
    if x.ndim == 0:
        x, index, src = (_reshape(v, (1,)) for v in (x, index, src))
        return _reshape(scatter_reduce(x, 0, index, src, reduce, include_self=include_self), ())
    src = _crop(src, index.shape)
    n = x.shape[d]
    ones = const(1, tuple(index.shape), dt.int64)
    count = apply("scatter_add", (_zeros(x.shape, dt.int64), index, ones), {"axis": d})  # Checks bounds.
    hit = count > 0
    # Dense form: dim d last, then one column per index entry (plus x's own value when included).
    rest = [i for i in range(x.ndim) if i != d]
    perm = rest + [d]
    im, sm = _permute(index, perm), _permute(src, perm)
    block = [index.shape[i] for i in rest]
    xm = _crop(_permute(x, perm), block + [n])
    key = _where(im < 0, im + n, im)
    match = _reshape(key, block + [1, index.shape[d]]) == _reshape(arange(n), [1] * len(block) + [n, 1])
    if reduce in ("amax", "amin"):
        if x.dtype.is_floating_point:
            ident = -math.inf if reduce == "amax" else math.inf
        elif x.dtype is dt.bool_:
            ident = reduce == "amin"
        else:
            info = np.iinfo(x.dtype.np)
            ident = int(info.min if reduce == "amax" else info.max)
    else:
        ident = _REDUCE_IDENTITY[reduce]
    cols = _where(match, _reshape(sm, block + [1, index.shape[d]]), const(ident, (), x.dtype))
    if include_self:
        from loom.functional.shape import cat
        cols = cat([cols, _reshape(xm, block + [n, 1])], -1)
    op = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}[reduce]
    if x.dtype is dt.bool_ and op in ("sum", "prod"):
        from loom.functional import reduce as _reduce
        red = _reduce.any(cols, -1) if op == "sum" else _reduce.all(cols, -1)
    else:
        red = apply(op, (cols,), {"axes": (cols.ndim - 1,), "keepdim": False})
    inv = [0] * x.ndim
    for i, p in enumerate(perm):
        inv[p] = i
    pads = [(0, x.shape[p] - s) for p, s in zip(perm, red.shape)]
    if any(hi for _, hi in pads):
        red = apply("pad", (red,), {"pads": pads, "value": 0})
    red = _permute(red, inv)
    if reduce == "mean":
        denom = count + 1 if include_self else _where(hit, count, const(1, (), dt.int64))
        red = red / denom.to(x.dtype) if x.dtype.is_floating_point else (red // denom.to(x.dtype))
    return apply("where", (hit, red.to(x.dtype), x), {})


def index_select(x, dim: int, index) -> Tensor:
    """The entries of x at the 1-d `index` along `dim` (torch.index_select).

    Examples
    --------
    >>> loom.arange(6).reshape(2, 3).index_select(1, loom.tensor([2, 0])).tolist()
    [[2, 0], [5, 3]]
    """
    x, index = _t(x), _index_tensor(index, "index_select", ndim1=True)
    if x.ndim == 0:
        index = _in_bounds(index, 1, "index_select", None)
        return _reshape(_advanced(_reshape(x, (1,)), [_Adv(0, index, _known(index))]), ())
    d = normalize_dim(dim, x.ndim, "index_select")
    index = _in_bounds(index, x.shape[d], "index_select", d)
    return _advanced(x, [_Adv(d, index, _known(index))])


def _index_source(x: Tensor, d: int, index: Tensor, source: Tensor, op: str) -> Tensor:
    """Check that `source` is x's shape with dim d of len(index)."""
    want = list(x.shape)
    if x.ndim:
        want[d] = index.shape[0]
    if list(source.shape) != want and not (x.ndim == 0 and source.numel() == index.numel() == 1):
        raise ShapeError(f"loom.{op}: source of shape {fmt_shape(source.shape)} does not fit self "
                         f"{fmt_shape(x.shape)} indexed by {index.shape[0]} entries along dim {d} "
                         f"(expected {fmt_shape(want)})")
    return _reshape(source, want)


def _index_prep(x, dim, index, op: str, negative: bool = False):
    x, index = _t(x), _index_tensor(index, op, ndim1=True)
    d = normalize_dim(dim, x.ndim, op)
    index = _in_bounds(index, x.shape[d] if x.ndim else 1, op, d if x.ndim else None, negative)
    return x, d, index


def index_add(x, dim: int, index, source, alpha=1) -> Tensor:
    """x plus `alpha * source` added at the 1-d `index` along `dim` (duplicates accumulate).

    Examples
    --------
    >>> loom.zeros(3).index_add(0, loom.tensor([0, 0, 2]), loom.tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    x, d, index = _index_prep(x, dim, index, "index_add")
    source = _t(source)
    _same_dtype("index_add", x, source, "source")
    source = _index_source(x, d, index, source, "index_add")
    if alpha != 1:
        source = (source * alpha).to(x.dtype)
    if x.ndim == 0:
        return x + _reshape(source, ()) if index.numel() else x
    return apply("scatter_add", (x, _along(index, source.shape, d), source), {"axis": d})


def index_copy(x, dim: int, index, source) -> Tensor:
    """x with the slices at the 1-d `index` along `dim` replaced by those of `source`.

    Examples
    --------
    >>> loom.zeros(2, 3).index_copy(1, loom.tensor([2]), loom.ones(2, 1)).tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    """
    x, d, index = _index_prep(x, dim, index, "index_copy")
    source = _t(source)
    _same_dtype("index_copy", x, source, "source")
    source = _index_source(x, d, index, source, "index_copy")
    if x.ndim == 0:
        return _reshape(source, ()) if index.numel() else x
    return _scatter_overwrite(x, d, _along(index, source.shape, d), source,
                              unique=_known_unique(index, 0))


def index_fill(x, dim: int, index, value) -> Tensor:
    """x with the slices at the 1-d `index` along `dim` set to `value` (a number or 0-d tensor).

    Examples
    --------
    >>> loom.zeros(2, 3).index_fill(1, loom.tensor([0, 2]), 7.0).tolist()
    [[7.0, 0.0, 7.0], [7.0, 0.0, 7.0]]
    """
    x, d, index = _index_prep(x, dim, index, "index_fill", negative=True)  # As PyTorch: negatives wrap.
    v = _scalar_value(value, x, "index_fill")
    n = x.shape[d] if x.ndim else 1
    ones = const(True, (index.shape[0],), dt.bool_)
    hit = apply("scatter_add", (_zeros((n,), dt.bool_), index, ones), {"axis": 0})
    view = [1] * x.ndim
    if x.ndim:
        view[d] = n
    return _where(_reshape(hit, view), v, x)


def masked_fill(x, mask, value) -> Tensor:
    """x with `value` (a number or 0-d tensor) wherever the boolean `mask` (broadcast) is True.

    Examples
    --------
    >>> x = loom.tensor([1.0, -2.0, 3.0])
    >>> x.masked_fill(x < 0, 0.0).tolist()
    [1.0, 0.0, 3.0]
    """
    x, mask = _t(x), _t(mask)
    if mask.dtype is not dt.bool_:
        raise DTypeError(f"loom.masked_fill: only supports boolean masks, got mask of dtype {mask.dtype.name}")
    v = _scalar_value(value, x, "masked_fill")
    return _where(mask, v, x)


def masked_select(x, mask) -> Tensor:
    """The entries of x where the boolean `mask` (broadcast with x) is True, as a 1-d tensor.

    Realises the mask: the result's length depends on its values.

    Examples
    --------
    >>> x = loom.tensor([[1, 2], [3, 4]])
    >>> x.masked_select(x > 1).tolist()
    [2, 3, 4]
    """
    x, mask = _t(x), _t(mask)
    if mask.dtype is not dt.bool_:
        raise DTypeError(f"loom.masked_select: expected a boolean mask, got {mask.dtype.name}")
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape), op="masked_select")
    xb = broadcast_to(x, shape, "masked_select")
    mb = broadcast_to(mask, shape, "masked_select")
    return _reshape(xb, (xb.numel(),))[_mask_array(_reshape(mb, (mb.numel(),)))]


def masked_scatter(x, mask, source) -> Tensor:
    """x with consecutive elements of `source` written where the boolean `mask` is True.

    Stays lazy: each True entry reads `source` at its running count (a cumsum of the mask).

    Examples
    --------
    >>> loom.zeros(4).masked_scatter(loom.tensor([True, False, True, False]), loom.tensor([5.0, 6.0])).tolist()
    [5.0, 0.0, 6.0, 0.0]
    """
    x, mask, source = _t(x), _t(mask), _t(source)
    if mask.dtype is not dt.bool_:
        raise DTypeError(f"loom.masked_scatter: expected a boolean mask, got {mask.dtype.name}")
    _same_dtype("masked_scatter", x, source, "source")
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape), op="masked_scatter")
    xb = broadcast_to(x, shape, "masked_scatter")
    mb = _reshape(broadcast_to(mask, shape, "masked_scatter"), (math.prod(shape),))
    src = _reshape(source, (source.numel(),))
    if src.numel() == 0:
        if np.any(_mask_array(mb)):
            raise LoomError("loom.masked_scatter: source is empty but the mask selects elements")
        return xb
    from loom.functional.reduce import cumsum
    pos = _where(mb, cumsum(mb.to(dt.int64), 0) - 1, const(0, (), dt.int64))
    n = src.numel()
    pos = check(pos, "masked_scatter", f"loom.masked_scatter: number of elements of source ({n}) < number of ones "
                f"in mask: the mask asks for source element {{value}} (expected 0 <= position < {n})",
                low=0, high=n, error="value")
    taken = _reshape(apply("gather", (src, pos), {"axis": 0}), shape)
    return apply("where", (_reshape(mb, shape), taken, xb), {})


def take(x, index) -> Tensor:
    """Entries of x read as a flat 1-d tensor, at `index` (any shape; negative counts from the end).

    Examples
    --------
    >>> loom.tensor([[4, 3], [5, 6]]).take(loom.tensor([0, -1])).tolist()
    [4, 6]
    """
    return _take(_t(x), _index_tensor(index, "take"), "take")


def _take(x: Tensor, index: Tensor, op: str) -> Tensor:
    index = check_index(index, op, x.numel(), f"the flattened input with {x.numel()} elements", negative=True)
    flat = _reshape(x, (x.numel(),))
    out = apply("gather", (flat, _reshape(index, (index.numel(),))), {"axis": 0})
    return _reshape(out, tuple(index.shape))


def take_along_dim(x, indices, dim: int | None = None) -> Tensor:
    """gather with broadcasting: x and `indices` broadcast outside `dim` (flattened when dim is None).

    Examples
    --------
    >>> x = loom.tensor([[10, 30, 20], [60, 40, 50]])
    >>> loom.take_along_dim(x, x.argmax(1, keepdim=True), 1).tolist()
    [[30], [60]]
    """
    x, indices = _t(x), _index_tensor(indices, "take_along_dim")
    if dim is None:
        return _take(x, _reshape(indices, (indices.numel(),)), "take_along_dim")
    d = normalize_dim(dim, x.ndim, "take_along_dim")
    if x.ndim != indices.ndim:
        raise ShapeError(f"loom.take_along_dim: input {fmt_shape(x.shape)} and indices "
                         f"{fmt_shape(indices.shape)} should have the same number of dimensions")
    xs, ishape = list(x.shape), list(indices.shape)
    xs[d] = ishape[d] = 1
    common = list(broadcast_shapes(tuple(xs), tuple(ishape), op="take_along_dim"))
    xt, it = list(common), list(common)
    xt[d], it[d] = x.shape[d], indices.shape[d]
    indices = _in_bounds(indices, x.shape[d], "take_along_dim", d, negative=True)  # PyTorch wraps negatives.
    return apply("gather", (broadcast_to(x, xt, "take_along_dim"), broadcast_to(indices, it, "take_along_dim")),
                 {"axis": d})


# ============================================================== value-dependent shapes

def nonzero(x, as_tuple: bool = False):
    """Indices of the nonzero entries of x: an int64 [n, ndim] tensor, or one 1-d tensor per dim.

    Realises x: the number of results depends on its values.

    Examples
    --------
    >>> loom.tensor([[0, 1], [2, 0]]).nonzero().tolist()
    [[0, 1], [1, 0]]
    """
    x = _t(x)
    a = np.asarray(x.detach().numpy())
    if as_tuple:
        return tuple(tensor(p.astype(np.int64)) for p in np.nonzero(a.reshape(1) if a.ndim == 0 else a))
    pos = np.argwhere(a).astype(np.int64)
    return tensor(pos.reshape(pos.shape[0], a.ndim))


def argwhere(x) -> Tensor:
    """Same as `nonzero(x)`: an int64 [n, ndim] tensor of the nonzero entries' indices (realises x).

    Examples
    --------
    >>> loom.argwhere(loom.tensor([0.0, 3.0, 1.0])).tolist()
    [[1], [2]]
    """
    return nonzero(x)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim of size `num_classes` (inferred as max + 1 when -1).

    Inferring the number of classes realises the input; with `num_classes`
    given it stays lazy and out-of-range classes raise when it runs.

    Examples
    --------
    >>> loom.nn.functional.one_hot(loom.tensor([0, 2]), 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    t = _t(tensor)
    if t.dtype is not dt.int64:
        raise DTypeError(f"loom.one_hot: is only applicable to index tensors of dtype int64, got {t.dtype.name}")
    if num_classes == -1:
        if t.numel() == 0:
            raise LoomError("loom.one_hot: cannot infer the number of classes from an empty tensor")
        num_classes = int(np.asarray(t.numpy(force=True)).max()) + 1  # Realises t: checked right away.
    if num_classes < 0:
        raise LoomError(f"loom.one_hot: num_classes must be -1 or non-negative, got {num_classes}")
    t = check_index(t, "one_hot", num_classes, f"num_classes={num_classes}", what="class value",
                    out_of="range")
    shape = tuple(t.shape) + (num_classes,)
    idx = _reshape(t, tuple(t.shape) + (1,))
    ones = const(1, tuple(idx.shape), dt.int64)
    return apply("scatter_add", (_zeros(shape, dt.int64), idx, ones), {"axis": len(shape) - 1})

METHODS = ["gather", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "index_copy",
           "index_fill", "masked_fill", "masked_select", "masked_scatter", "take", "take_along_dim", "nonzero",
           "argwhere", "index_put"]
INPLACE = ["scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_fill", "masked_fill",
           "masked_scatter", "index_put"]
NN_FUNCTIONAL = ["one_hot"]


_upper.register(getitem=getitem, index_put_functional=index_put_functional, take=take, nonzero=nonzero)
