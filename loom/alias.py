"""PyTorch's storage semantics over a functional graph (functionalisation).

A view (slicing, `view`, `transpose`, `expand`, `diagonal`, `detach`, ...)
shares its base's storage: an in-place write through any alias is seen by all
of them. The IR stays pure: the first tensor of a storage (its *root*) holds
the storage's value; every other alias records the movement primitives that
derive it from the root (its *path*) and the strides PyTorch would give it. A
write through an alias becomes a new value of the root, computed by putting
the written values back through the inverse of each path step; every live
alias is then re-derived from that value. Aliases of one storage share a
version counter (`.data` gets its own, as in PyTorch), which is what autograd
checks when a tensor saved for backward was changed in place.
"""
from __future__ import annotations

import math
import sys
import weakref
from typing import TYPE_CHECKING, Sequence

import numpy as np

from loom import _upper
from loom.autograd.grad_mode import is_grad_enabled, set_grad_enabled
from loom.errors import AutogradError, LoomError, ShapeError, fmt_shape

if TYPE_CHECKING:
    from loom.tensor import Tensor

# Primitives a view may be built from; each has an inverse below.
VIEW_PRIMS = frozenset({"reshape", "permute", "slice", "expand", "real", "imag"})
# The longest chain of primitives one view function adds.
_MAX_STEPS = 8


class VersionCounter:
    """How many in-place writes a group of aliases has seen (PyTorch's `_version`)."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value


# ---------------------------------------------------------------- layouts (strides, offset)

def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    n = len(shape)
    strides, acc = [1] * n, 1
    for i in range(n - 1, -1, -1):
        strides[i] = acc
        s = shape[i]
        if s > 1:
            acc *= s
    return tuple(strides)


def layout_of(t: Tensor) -> tuple[tuple[int, ...], int]:
    """(strides, storage offset) of `t`, in elements, as PyTorch would report them."""
    if t._layout is not None:
        return t._layout
    return contiguous_strides(t.shape), 0


def is_contiguous(t: Tensor) -> bool:
    strides, _ = layout_of(t)
    expected = contiguous_strides(t.shape)
    return all(a == b for a, b, s in zip(strides, expected, t.shape) if s != 1)


def reshape_strides(shape, strides, new_shape) -> tuple[int, ...] | None:
    """Strides that view (shape, strides) as `new_shape`, or None when only a copy can (PyTorch's rule)."""
    shape, strides, new_shape = tuple(shape), tuple(strides), tuple(new_shape)
    if math.prod(shape) == 0 or not shape:
        return contiguous_strides(new_shape)
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        # A chunk of dims that is contiguous in memory ends here.
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base_stride = strides[d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(out)


def _step_layout(step, in_shape, layout):
    """The layout after one path step, or None when the result is not a strided view."""
    strides, offset = layout
    op, attrs = step
    if op == "reshape":
        new = reshape_strides(in_shape, strides, attrs["shape"])
        return None if new is None else (new, offset)
    if op == "permute":
        return tuple(strides[p] for p in attrs["perm"]), offset
    if op == "slice":
        if any(s <= 0 for s in attrs["steps"]):
            return None
        offset += sum(a * s for a, s in zip(attrs["starts"], strides))
        return tuple(s * k for s, k in zip(strides, attrs["steps"])), offset
    if op == "expand":
        shape = attrs["shape"]
        lead = len(shape) - len(in_shape)
        new = [0] * lead + [0 if (i != o) else s for i, o, s in zip(in_shape, shape[lead:], strides)]
        return tuple(new), offset
    if op == "as_strided":
        return tuple(attrs["stride"]), attrs["offset"]
    if op in ("real", "imag"):  # A part of complex storage, counted in real elements as PyTorch counts it.
        return tuple(2 * s for s in strides), 2 * offset + (op == "imag")
    return None


# ---------------------------------------------------------------- creating views

def _chain_between(base_node, out_node) -> list | None:
    """The movement nodes that lead from `base_node` to `out_node`, or None if it is not such a chain."""
    nodes = []
    node = out_node
    while node is not base_node:
        if node.op not in VIEW_PRIMS or len(node.inputs) != 1 or len(nodes) >= _MAX_STEPS:
            return None
        nodes.append(node)
        node = node.inputs[0]
    nodes.reverse()
    return nodes


def _path_between(base_node, out_node) -> list | None:
    """The movement steps (op, attrs) that lead from `base_node` to `out_node`, or None."""
    nodes = _chain_between(base_node, out_node)
    return None if nodes is None else [(n.op, dict(n.attrs)) for n in nodes]


def make_view(base: Tensor, out: Tensor, layout=None) -> Tensor:
    """Mark `out`, computed from `base` by movement primitives, as a view sharing `base`'s storage.

    `layout` gives its (strides, offset) when the path's own steps cannot
    express them (a diagonal); without it, a result that is not a strided view
    of `base` (a reshape PyTorch would copy) stays a tensor of its own.
    """
    if out is base:
        return out
    if out._root is not None:
        if out._root is (base._root if base._root is not None else base):
            return out
        unlink(out)  # A view of an intermediate of the view function: it aliases `base` instead.
    nodes = _chain_between(base._node, out._node)
    if nodes is None:
        return out
    path = tuple((n.op, dict(n.attrs)) for n in nodes)
    if layout is None:
        layout = layout_of(base)
        for step, node in zip(path, nodes):
            layout = _step_layout(step, node.inputs[0].shape, layout)
            if layout is None:
                return out
    link(base, out, path, layout, differentiable=True)
    return out


def _step_shape(step, shape):
    op, attrs = step
    if op in ("reshape", "expand"):
        return tuple(attrs["shape"])
    if op == "permute":
        return tuple(shape[p] for p in attrs["perm"])
    if op == "slice":
        return tuple(len(range(a, b, c)) for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"]))
    if op in ("real", "imag"):
        return tuple(shape)
    return tuple(attrs["size"])


def link(base: Tensor, out: Tensor, path: tuple, layout, differentiable: bool, share_version: bool = True) -> None:
    """Record `out` as an alias of `base`'s storage reached by `path` from `base`."""
    root = base._root if base._root is not None else base
    out._root = root
    out._path = (base._path + path) if base._root is not None else path
    # Writes through a view change the root's autograd history only when the view is
    # differentiable all the way up and was made with grad enabled.
    out._vdiff = differentiable and is_grad_enabled() and (base._root is None or base._vdiff)
    out._layout = layout
    out._vc = base._vc if share_version else out._vc
    if root._views is None:
        root._views = []
    views = root._views
    if len(views) > 8 and len(views) & (len(views) - 1) == 0:
        views[:] = [r for r in views if r() is not None]  # Drop dead aliases now and then.
    views.append(weakref.ref(out))


def unlink(t: Tensor) -> None:
    """`t` stops sharing its root's storage."""
    root = t._root
    if root is not None and root._views:
        root._views[:] = [r for r in root._views if r() is not None and r() is not t]
    t._root, t._path, t._vdiff, t._layout = None, (), False, None


def alias(base: Tensor, differentiable: bool, share_version: bool = True) -> Tensor:
    """A new tensor object for the whole of `base`'s storage (`detach()`, `.data`)."""
    from loom.tensor import Tensor
    t = Tensor._wrap(base._node)
    link(base, t, (), layout_of(base), differentiable, share_version)
    return t


# ---------------------------------------------------------------- as_strided

def as_strided(x: Tensor, size, stride, storage_offset: int | None = None) -> Tensor:
    """A view of `x`'s storage with the given sizes, strides and offset (in elements), as PyTorch's."""
    size = tuple(int(s) for s in size)
    stride = tuple(int(s) for s in stride)
    root = x._root if x._root is not None else x
    offset = layout_of(x)[1] if storage_offset is None else int(storage_offset)
    if len(size) != len(stride):
        raise ShapeError(f"loom.as_strided: mismatch in length of strides and shape: size {list(size)}, "
                         f"stride {list(stride)}")
    if any(s < 0 for s in size) or any(s < 0 for s in stride) or offset < 0:
        raise ShapeError(f"loom.as_strided: sizes, strides and the offset must be non-negative, got size "
                         f"{list(size)}, stride {list(stride)}, offset {offset}")
    n = root.numel()
    needed = offset + sum((a - 1) * b for a, b in zip(size, stride)) + 1 if all(size) else 0
    if needed > n:
        raise ShapeError(f"loom.as_strided: size {list(size)}, stride {list(stride)} and offset {offset} "
                         f"reach element {needed - 1} of a storage of {n} elements "
                         f"({x.dtype.name}{fmt_shape(root.shape)})")
    step = ("as_strided", {"size": size, "stride": stride, "offset": offset})
    diff = x._root is None or x._vdiff
    with set_grad_enabled(is_grad_enabled() and diff):
        out = _apply_step(root if diff else _detached(root), step)
    link(root, out, (step,), (stride, offset), differentiable=diff)
    return out


def _strided_positions(size, stride, offset) -> np.ndarray:
    pos = np.full(tuple(size), offset, dtype=np.int64)
    for d, (s, k) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = s
        pos = pos + (np.arange(s, dtype=np.int64) * k).reshape(shape)
    return pos


# ---------------------------------------------------------------- path steps and their inverses

def _apply_step(t: Tensor, step) -> Tensor:
    from loom.tensor import apply, tensor
    op, attrs = step
    if op != "as_strided":
        return apply(op, (t,), attrs)
    pos = _strided_positions(attrs["size"], attrs["stride"], attrs["offset"])
    flat = apply("reshape", (t,), {"shape": (t.numel(),)})
    if pos.size == 0:
        return apply("slice", (flat,), {"starts": [0], "stops": [0], "steps": [1]}).reshape(attrs["size"])
    return _upper.take(flat, tensor(pos))


def _inverse_perm(perm) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _unapply_step(old: Tensor, step, new: Tensor) -> Tensor:
    """`old` (a step's input) with the step's output replaced by `new`."""
    from loom.ir.ops import PRIMITIVES
    from loom.tensor import apply, const, tensor
    from loom import dtypes as dt
    op, attrs = step
    if op == "reshape":
        return apply("reshape", (new,), {"shape": tuple(old.shape)})
    if op == "permute":
        return apply("permute", (new,), {"perm": _inverse_perm(attrs["perm"])})
    if op == "slice":
        if tuple(new.shape) == tuple(old.shape):
            return new
        place = PRIMITIVES["slice"].vjp  # Putting a slice back in place is the slice's transpose.
        hit = const(True, tuple(new.shape), dt.bool_)
        return apply("where", (place(hit, old, None, attrs)[0], place(new, old, None, attrs)[0], old), {})
    if op in ("real", "imag"):  # The other part stays as it was.
        other = apply("imag" if op == "real" else "real", (old,), {})
        return apply("complex", (new, other) if op == "real" else (other, new), {})
    if op == "as_strided":
        pos = _strided_positions(attrs["size"], attrs["stride"], attrs["offset"]).reshape(-1)
        flat = apply("reshape", (old,), {"shape": (old.numel(),)})
        if pos.size:
            flat = _upper.index_put_functional(flat, (tensor(pos),), apply("reshape", (new,), {"shape": (pos.size,)}))
        return apply("reshape", (flat,), {"shape": tuple(old.shape)})
    raise LoomError(f"loom: internal error: no inverse for view step {op}")


def check_writable(t: Tensor, op: str) -> None:
    """PyTorch's refusals for an in-place write through a view."""
    strides, offset = layout_of(t)
    if any(k == 0 and s > 1 for k, s in zip(strides, t.shape)) or (
            t._path and t._path[-1][0] == "as_strided" and t.numel() > 1
            and len(np.unique(_strided_positions(t.shape, strides, offset))) < t.numel()):
        raise LoomError(f"loom.{op}: unsupported operation: more than one element of the written-to tensor "
                        f"({t.dtype.name}{fmt_shape(t.shape)}, strides {list(strides)}) refers to a single "
                        "memory location (an expanded or overlapping view); clone() the tensor before "
                        "writing to it")
    root = t._root
    if t._vdiff and is_grad_enabled() and root.requires_grad and root._ctx is None:
        raise AutogradError(f"loom.{op}: a view of a leaf tensor that requires grad "
                            f"({root.dtype.name}{fmt_shape(root.shape)}) is being used in an in-place "
                            "operation; write under `with loom.no_grad():` or to a clone")


def root_value_with(t: Tensor, result: Tensor) -> tuple[Tensor, Tensor | None]:
    """The root's value after `result` is written through the view `t`, and the root's snapshot it read."""
    root = t._root
    snap = None
    with set_grad_enabled(t._vdiff and is_grad_enabled()):
        # The root's current value as a snapshot: the write that follows bumps the root's version,
        # and the new value must keep reading (and differentiating into) the old one.
        src = snap = root._snapshot() if t._vdiff else _detached(root)
        values = [src]
        for step in t._path[:-1]:
            values.append(_apply_step(values[-1], step))
        new = result
        for step, old in zip(reversed(t._path), reversed(values)):
            new = _unapply_step(old, step, new)
        if snap is not None and snap.requires_grad and not _reads(new._node, snap._node):
            # The view covers the whole storage: as in PyTorch the old value still gets a (zero) gradient.
            from loom import dtypes as dt
            from loom.tensor import apply, const
            new = apply("where", (const(True, tuple(new.shape), dt.bool_), new, snap), {})
    return new, (snap if t._vdiff else None)


def _reads(node, target, limit: int = 64) -> bool:
    """Whether `node` is computed from `target` (looked for among its nearest `limit` ancestors)."""
    stack, seen = [node], set()
    while stack and len(seen) < limit:
        n = stack.pop()
        if n is target:
            return True
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(n.inputs)
    return False


def _detached(t: Tensor) -> Tensor:
    from loom.tensor import Tensor
    d = Tensor._wrap(t._node)
    d._owner = t.__dict__.get("_owner") or weakref.ref(t)  # Traces bind values to the original.
    return d


def live_views(root: Tensor) -> list:
    if not root._views:
        return []
    out = [v for v in (r() for r in root._views) if v is not None]
    if len(out) != len(root._views):
        root._views[:] = [weakref.ref(v) for v in out]
    return out


def rederive(t: Tensor) -> None:
    """Give the alias `t` its value from its root's current value."""
    root = t._root
    if not t._path:
        t._node = root._node
        if t._vdiff:
            t._ctx, t.requires_grad = root._ctx, root.requires_grad
        return
    with set_grad_enabled(t._vdiff):
        v = root if t._vdiff else _detached(root)
        for step in t._path:
            v = _apply_step(v, step)
    t._node = v._node
    if t._vdiff:
        t._ctx, t.requires_grad = v._ctx, v.requires_grad


def rederive_all(root: Tensor) -> None:
    for v in live_views(root):
        rederive(v)


def snapshot_group(root: Tensor, vc: VersionCounter) -> None:
    """Before a write bumps `vc`: aliases with history keep their current value for ops that read it."""
    for v in live_views(root):
        if v._vc is vc and v.requires_grad and v._ctx is not None:
            if v._past is None:
                v._past = {}
            v._past[vc.value] = v._snapshot()


def rehome(root: Tensor) -> None:
    """`root` is about to take other storage (`.data = ...`): its aliases keep the old one."""
    views = live_views(root)
    if not views:
        return
    from loom.tensor import Tensor
    keeper = Tensor._wrap(root._node, root._ctx, root.requires_grad)
    keeper._vc = root._vc
    keeper._views = [weakref.ref(v) for v in views]
    for v in views:
        v._root = keeper
    root._views = None


def reshaped_in_place(t: Tensor, old_node) -> None:
    """`t` changed its own shape in place (`t_()`, `squeeze_()`): the metadata of its aliases follows."""
    steps = _path_between(old_node, t._node)
    if steps is None:
        raise LoomError("loom: internal error: an in-place shape change is not a movement")
    if t._root is not None:
        layout, shape = t._layout, tuple(old_node.shape)
        for step in steps:
            layout = _step_layout(step, shape, layout) if layout is not None else None
            shape = _step_shape(step, shape)
        t._path = t._path + tuple(steps)
        t._layout = layout if layout is not None else (contiguous_strides(t.shape), 0)
        return
    # The root's storage is unchanged: its aliases reach it through the inverse steps first.
    inverse = []
    shape = tuple(old_node.shape)
    for step in steps:
        if step[0] == "permute":
            inverse.append(("permute", {"perm": _inverse_perm(step[1]["perm"])}))
        else:
            inverse.append(("reshape", {"shape": shape}))
        shape = _step_shape(step, shape)
    inverse.reverse()
    for v in live_views(t):
        v._path = tuple(inverse) + v._path


_upper.register(alias=sys.modules[__name__])
