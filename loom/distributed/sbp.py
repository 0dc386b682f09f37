"""Global tensors: one logical tensor laid out over ranks by a placement and an SBP signature.

A `GlobalTensor` is one value seen from every rank of a `Placement` (a mesh
of ranks, 1-D or of several axes). Its signature (one per mesh axis) says
how each rank's local tensor relates to the global value:

- ``split(d)``: the global value is the ranks' locals concatenated along
  dimension ``d`` (each rank holds one slice);
- ``broadcast``: every rank holds the whole value;
- ``partial_sum``: the global value is the sum of the ranks' locals.

Ops on global tensors pick an output signature from their inputs': each op
declares in `loom.distributed.sbp_rules` which combinations it runs locally
(``split(0) @ broadcast -> split(0)``, ``broadcast @ split(1) -> split(1)``,
``split(1) @ split(0) -> partial_sum``, ...); `choose` takes the one the
inputs match, else the legal one cheapest to box into, per mesh axis. The
inputs are converted first where needed; converting between signatures
(*boxing*) inserts the collective it needs, over each mesh axis's sub-group:

===================  ===================  =========================
from                 to                   collective
===================  ===================  =========================
split(d)             broadcast            all_gather
partial_sum          broadcast            all_reduce
partial_sum          split(d)             reduce_scatter
split(i)             split(j)             all_to_all
broadcast            split(d)             none (each rank slices)
broadcast            partial_sum          none (rank 0 keeps it)
===================  ===================  =========================

Moving a tensor to another placement (``to_global(placement=...)``) sends
each destination rank its part of the value from a source rank (send/recv).
Gradients cross back: `GlobalTensor.backward`, called on every rank, sends
each move's gradient the other way (send/recv), boxed into the source's
layout, and continues the backward pass on the source ranks, last move first.
Inside `loom.function` a move is a pair of send/recv nodes of the traced step
(forward and backward alike), and boxing inserts the collective primitives
(all_gather, all_reduce, reduce_scatter, all_to_all) as nodes of the step.

Gradients follow the global view: ``loss.backward()`` on a global scalar
differentiates the one global loss (not a sum of per-rank losses), and each
rank's local gradient is laid out with its tensor's signature. A broadcast
tensor used where ranks compute different parts (a replicated weight times
a batch split) gets its gradient summed over ranks, so replicated
parameters stay equal.

Examples
--------
.. code-block:: python

    import loom.distributed as dist
    from loom.distributed import sbp

    mesh = sbp.placement(ranks=[0, 1])
    x = sbp.from_full(loom.randn(8, 4), mesh, sbp.split(0))      # rows split over the 2 ranks
    w = sbp.from_full(loom.randn(4, 6), mesh, sbp.split(1))      # columns split
    y = x.to_global(sbp=sbp.broadcast) @ w                       # all_gather x, then local: split(1)
    y.sbp, y.shape                                               # (split(1), (8, 6))
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from loom.autograd.function import Function
from loom.distributed import collectives as c
from loom.distributed.process_group import (
    _ON_DESTROY, DistributedError, ProcessGroup, destroy_process_group, new_group, resolve,
)
from loom.distributed.sbp_rules import SBP, broadcast, nd_boxing_steps, partial_sum, signatures, split
from loom.distributed.sbp_rules import boxing_bytes as _boxing_bytes
from loom.errors import LoomError, ShapeError

__all__ = ["Placement", "placement", "SBP", "split", "broadcast", "partial_sum", "GlobalTensor", "to_global",
           "from_full", "linear", "layer_norm", "embedding", "cross_entropy", "choose", "OpChoice"]


# ----------------------------------------------------------------------------- placement
class _AxisMesh:
    """One axis of a placement seen from this rank: the ranks that differ from it only along that axis."""

    def __init__(self, group, size: int, coord: int | None):
        self.group, self.size, self._coord = group, size, coord

    def index(self) -> int:
        if self._coord is None:
            raise DistributedError("loom.distributed.sbp: this process is not in the placement")
        return self._coord


class Placement:
    """A mesh of ranks (``shape``, 1-D by default) that a global tensor lives on, on ``device`` ('cpu').

    The ranks are laid out in increasing order, row-major over `shape`: on a
    (2, 2) mesh of ranks 0-3, axis 0 joins ranks {0, 2} and {1, 3}, axis 1
    joins {0, 1} and {2, 3}.
    """

    def __init__(self, ranks: Sequence[int] | None = None, device: str = "cpu",
                 shape: Sequence[int] | None = None):
        if device != "cpu":
            raise LoomError(f"loom.distributed.sbp.placement: device {device!r} is not available; loom's distributed "
                            "layer runs on 'cpu' (Open MPI)")
        world = resolve(None, "sbp.placement")
        all_ranks = list(range(world.size()))
        given = list(all_ranks if ranks is None else ranks)
        if not given or len(set(given)) != len(given) or not set(given) <= set(all_ranks):
            raise LoomError(f"loom.distributed.sbp.placement: ranks must be distinct ranks of the job "
                            f"(0..{len(all_ranks) - 1}), got {given}")
        self.ranks = sorted(given)
        self.shape = (len(self.ranks),) if shape is None else tuple(int(s) for s in shape)
        if int(np.prod(self.shape)) != len(self.ranks) or any(s < 1 for s in self.shape):
            raise ShapeError(f"loom.distributed.sbp.placement: a mesh of shape {list(self.shape)} needs "
                             f"{int(np.prod(self.shape))} ranks, got {len(self.ranks)} ({self.ranks})")
        self.device = device
        _Effects.start()
        _anchor()
        self.group: ProcessGroup | Any = world if self.ranks == all_ranks else new_group(self.ranks)
        self._owned: list = [] if self.group is world else [self.group]  # Groups `destroy` frees.
        me = world.rank()
        self.coords: tuple[int, ...] | None = (tuple(int(c) for c in np.unravel_index(self.ranks.index(me),
                                                                                     self.shape))
                                               if me in self.ranks else None)
        grid = np.array(self.ranks).reshape(self.shape)
        self._axes: list[_AxisMesh] = []
        for a in range(len(self.shape)):
            if len(self.shape) == 1:
                self._axes.append(_AxisMesh(self.group, self.shape[0], None if self.coords is None
                                            else self.coords[0]))
                continue
            mine = None
            lines = np.moveaxis(grid, a, -1).reshape(-1, self.shape[a])
            for line in lines:  # Every rank of the job creates every sub-group (new_group is collective).
                g = new_group([int(r) for r in line])
                self._owned.append(g)
                if me in line:
                    mine = g
            self._axes.append(_AxisMesh(mine, self.shape[a], None if self.coords is None else self.coords[a]))

    def destroy(self) -> None:
        """Free the process groups this placement made (its ranks' group, one per line of each mesh axis).

        Every rank of the job calls it; tensors on the placement can no longer box or move afterwards.
        `loom.distributed.destroy_process_group()` frees them too.
        """
        for g in self._owned:
            destroy_process_group(g)
        self._owned = []

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_member(self) -> bool:
        """Whether this process holds a part of tensors on this placement."""
        return self.coords is not None

    def axis(self, a: int) -> _AxisMesh:
        """The sub-mesh along axis `a` that this rank belongs to (its group, size and this rank's position)."""
        return self._axes[a]

    def index(self) -> int:
        """This process's position in the mesh (row-major)."""
        if self.coords is None:
            raise DistributedError(f"loom.distributed.sbp: this process is not in the placement {self}")
        return int(np.ravel_multi_index(self.coords, self.shape))

    def __eq__(self, other) -> bool:
        return isinstance(other, Placement) and (self.ranks, self.shape, self.device) == \
            (other.ranks, other.shape, other.device)

    def __hash__(self) -> int:
        return hash((tuple(self.ranks), self.shape, self.device))

    def __repr__(self) -> str:
        mesh = f", shape={list(self.shape)}" if self.ndim > 1 else ""
        return f"placement(device={self.device!r}, ranks={self.ranks}{mesh})"


def placement(device: str = "cpu", ranks: Sequence[int] | None = None,
              shape: Sequence[int] | None = None) -> Placement:
    """The mesh of `ranks` (default: every rank of the job), of `shape` (default 1-D). Every rank of the job must
    call it, in the same order (it creates the mesh's process groups).

    Examples
    --------
    .. code-block:: python

        mesh = loom.distributed.sbp.placement(ranks=[0, 1])
        mesh2d = loom.distributed.sbp.placement(shape=(2, 2))   # 4 ranks: axis 0 data, axis 1 tensor parallel
    """
    return Placement(ranks, device, shape)


# ----------------------------------------------------------------------------- boxing, differentiable
def _bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """Slices of a length-`n` axis over `parts` ranks: as even as possible, the first ranks one longer."""
    base, extra = divmod(n, parts)
    out, at = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append((at, at + size))
        at += size
    return out


def _slice(t, dim: int, lo: int, hi: int):
    index = [slice(None)] * t.ndim
    index[dim] = slice(lo, hi)
    return t[tuple(index)].contiguous()


def _pad(t, dim: int, size: int):
    """`t` with zeros appended along `dim` up to `size` (collectives move parts of one shape)."""
    from loom import _api as loom
    pad = size - t.shape[dim]
    if pad <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = pad
    return loom.cat([t, loom.zeros(shape, dtype=t.dtype)], dim=dim)


def _dfn():
    import loom.distributed.nn.functional as dfn
    return dfn


def _gather(local, dim: int, mesh: Placement, full: int):
    """All ranks' slices along `dim`, concatenated (all_gather, padded to equal sizes for the transfer).

    Inside `loom.function` the all_gather is a node of the traced step; eagerly it runs now.
    """
    from loom import _api as loom
    bounds = _bounds(full, mesh.size)
    local = _pad(local, dim, max(h - lo for lo, h in bounds)).contiguous()
    if _tracing():
        parts = list(_Effects.collective(lambda v: _dfn().all_gather(v, group=mesh.group), local))
    else:
        parts = [loom.zeros(tuple(local.shape), dtype=local.dtype) for _ in range(mesh.size)]
        c.all_gather(parts, local, group=mesh.group)
    pieces = [_slice(p, dim, 0, h - lo) for p, (lo, h) in zip(parts, bounds)]
    return loom.cat(pieces, dim=dim)


def _sum_over(x, mesh):
    """The sum over `mesh`'s ranks of `x`, as a new tensor (an all_reduce node when traced)."""
    if _tracing():
        return _Effects.collective(lambda v: _dfn().all_reduce(v, group=mesh.group), x)
    out = x.clone()
    c.all_reduce(out, group=mesh.group)
    return out


class _SplitToBroadcast(Function):
    @staticmethod
    def forward(ctx, mesh, dim, full, x):
        ctx.mesh, ctx.dim, ctx.full = mesh, dim, full
        return _gather(x, dim, mesh, full)

    @staticmethod
    def backward(ctx, g):  # The gradient of a broadcast value is whole on every rank: keep this rank's slice.
        lo, hi = _bounds(ctx.full, ctx.mesh.size)[ctx.mesh.index()]
        return None, None, None, _slice(g, ctx.dim, lo, hi)


class _BroadcastToSplit(Function):
    @staticmethod
    def forward(ctx, mesh, dim, x):
        ctx.mesh, ctx.dim, ctx.full = mesh, dim, x.shape[dim]
        lo, hi = _bounds(x.shape[dim], mesh.size)[mesh.index()]
        return _slice(x, dim, lo, hi)

    @staticmethod
    def backward(ctx, g):
        return None, None, _gather(g, ctx.dim, ctx.mesh, ctx.full)


class _PartialToBroadcast(Function):
    @staticmethod
    def forward(ctx, mesh, x):
        return _sum_over(x, mesh)

    @staticmethod
    def backward(ctx, g):  # d(sum of parts)/d(part) = 1: each rank's part gets the whole gradient.
        return None, g


def np_reduce_scatter(a: np.ndarray, dim: int, comm) -> np.ndarray:
    """This rank's slice along `dim` of the sum of every rank's `a` (MPI Reduce_scatter, uneven slices)."""
    from mpi4py import MPI
    front = np.ascontiguousarray(np.moveaxis(a, dim, 0))
    bounds = _bounds(front.shape[0], comm.Get_size())
    inner = int(np.prod(front.shape[1:], dtype=np.int64))
    counts = [(hi - lo) * inner for lo, hi in bounds]
    lo, hi = bounds[comm.Get_rank()]
    out = np.empty(counts[comm.Get_rank()], front.dtype)
    comm.Reduce_scatter(front.reshape(-1), out, recvcounts=counts, op=MPI.SUM)
    return np.ascontiguousarray(np.moveaxis(out.reshape((hi - lo,) + front.shape[1:]), 0, dim))


def np_all_to_all(a: np.ndarray, src: int, dst: int, full: tuple[int, ...], comm) -> np.ndarray:
    """A ``split(src)`` part `a` re-laid as this rank's ``split(dst)`` part of a tensor of shape `full`
    (all_to_all: each rank sends every other the piece of its slice that lands in theirs)."""
    to = _bounds(full[dst], comm.Get_size())
    pieces = [np.ascontiguousarray(np.take(a, range(lo, hi), axis=dst)) for lo, hi in to]
    got = comm.alltoall(pieces)
    return np.ascontiguousarray(np.concatenate(got, axis=src))


def _from_np(a: np.ndarray, like):
    from loom import _api as loom
    return loom.tensor(a, dtype=like.dtype)


def _reduce_scatter(x, dim: int, mesh):
    """This rank's slice along `dim` of the sum over `mesh`'s ranks of `x` (a reduce_scatter node when traced:
    the slices padded to one shape and stacked)."""
    if not _tracing():
        return _from_np(np_reduce_scatter(x.detach().numpy(), dim, resolve(mesh.group, "sbp")._comm), x)
    bounds = _bounds(x.shape[dim], mesh.size)
    longest = max(h - lo for lo, h in bounds)
    pieces = [_pad(_slice(x, dim, lo, h), dim, longest) for lo, h in bounds]
    out = _Effects.collective(lambda v: _dfn().reduce_scatter(v, [v] + pieces[1:], group=mesh.group), pieces[0])
    lo, hi = bounds[mesh.index()]
    return _slice(out, dim, 0, hi - lo) if hi - lo < longest else out


def _exchange(x, src: int, dst: int, full: tuple[int, ...], mesh):
    """A ``split(src)`` part re-laid as this rank's ``split(dst)`` part (an all_to_all node when traced: each
    piece padded to the longest along both dimensions)."""
    if not _tracing():
        return _from_np(np_all_to_all(x.detach().numpy(), src, dst, full, resolve(mesh.group, "sbp")._comm), x)
    from loom import _api as loom
    to, frm = _bounds(full[dst], mesh.size), _bounds(full[src], mesh.size)
    long_to, long_frm = max(h - lo for lo, h in to), max(h - lo for lo, h in frm)
    pieces = [_pad(_pad(_slice(x, dst, lo, h), dst, long_to), src, long_frm).contiguous() for lo, h in to]
    got = _Effects.collective(lambda v: _dfn().all_to_all(pieces, [v] + pieces[1:], group=mesh.group), pieces[0])
    lo, hi = to[mesh.index()]
    parts = [_slice(_slice(p, src, 0, h - l0), dst, 0, hi - lo) for p, (l0, h) in zip(got, frm)]
    return loom.cat(parts, dim=src)


class _PartialToSplit(Function):
    @staticmethod
    def forward(ctx, mesh, dim, x):
        ctx.mesh, ctx.dim, ctx.full = mesh, dim, x.shape[dim]
        return _reduce_scatter(x, dim, mesh)

    @staticmethod
    def backward(ctx, g):
        return None, None, _gather(g, ctx.dim, ctx.mesh, ctx.full)


class _SplitToSplit(Function):
    @staticmethod
    def forward(ctx, mesh, src, dst, full, x):
        ctx.mesh, ctx.src, ctx.dst, ctx.full = mesh, src, dst, full
        return _exchange(x, src, dst, full, mesh)

    @staticmethod
    def backward(ctx, g):  # The transpose of an all_to_all is the all_to_all back.
        return None, None, None, None, _exchange(g, ctx.dst, ctx.src, ctx.full, ctx.mesh)


class _BroadcastToPartial(Function):
    @staticmethod
    def forward(ctx, mesh, x):
        from loom import _api as loom
        return x.clone() if mesh.index() == 0 else loom.zeros_like(x)

    @staticmethod
    def backward(ctx, g):
        return None, g


class _ReplicatedUse(Function):
    """Identity forward; the gradient is summed over ranks (a broadcast value whose uses differ by rank)."""

    @staticmethod
    def forward(ctx, meshes, x):
        ctx.meshes = meshes
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        for m in ctx.meshes:  # One sum per mesh axis along which the uses differ.
            g = _sum_over(g, m)
        return None, g


NdSBP = tuple[SBP, ...]


def _box_axis(x, mesh: _AxisMesh, src: SBP, to: SBP, shape: tuple[int, ...]):
    """`x` (this rank's part) converted from `src` to `to` along one mesh axis (differentiable)."""
    if mesh.size == 1:  # One rank holds the whole value under every signature.
        return x
    if src.is_split and to == broadcast:
        return _SplitToBroadcast.apply(mesh, src.dim, shape[src.dim], x)
    if src == partial_sum and to == broadcast:
        return _PartialToBroadcast.apply(mesh, x)
    if src == partial_sum and to.is_split:
        return _PartialToSplit.apply(mesh, to.dim, x)
    if src == broadcast and to.is_split:
        return _BroadcastToSplit.apply(mesh, to.dim, x)
    if src == broadcast and to == partial_sum:
        return _BroadcastToPartial.apply(mesh, x)
    if src.is_split and to.is_split:
        return _SplitToSplit.apply(mesh, src.dim, to.dim, shape, x)
    # Split to partial_sum: through the whole value.
    return _box_axis(_box_axis(x, mesh, src, broadcast, shape), mesh, broadcast, to, shape)


def _check_nd(nd: NdSBP, mesh: Placement, shape: tuple[int, ...], op: str) -> None:
    dims = [s.dim for s in nd if s.is_split]
    if len(dims) != len(set(dims)):
        raise LoomError(f"loom.distributed.sbp.{op}: signature {list(nd)} splits one dimension along two mesh "
                        "axes; loom splits each tensor dimension along at most one axis")
    for a, s in enumerate(nd):
        if s.is_split and shape[s.dim] < mesh.shape[a]:
            raise ShapeError(f"loom.distributed.sbp.{op}: cannot split dimension {s.dim} of size {shape[s.dim]} "
                             f"over the {mesh.shape[a]} ranks of mesh axis {a}")


def _box(t: "GlobalTensor", to) -> "GlobalTensor":
    """`t` with signature `to` (one per mesh axis), inserting the collectives the conversion needs, axis by axis."""
    mesh = t.placement
    to = _nd(to, mesh, t.ndim, "to_global")
    if t.nd_sbp == to:
        return t
    _check_nd(to, mesh, t.shape, "to_global")
    if t.local is None:  # Not in the placement: nothing to move here.
        return GlobalTensor(None, mesh, to, t.shape, t.dtype)
    x = t.local
    for a, _before, src, dst in nd_boxing_steps(t.nd_sbp, to):
        x = _box_axis(x, mesh.axis(a), src, dst, t.shape)
    return GlobalTensor(x, mesh, to, t.shape, t.dtype)


def _norm(s: SBP, ndim: int, op: str) -> SBP:
    if not isinstance(s, SBP):
        raise LoomError(f"loom.distributed.sbp.{op}: sbp must be split(d), broadcast or partial_sum, got {s!r}")
    if s.is_split:
        d = s.dim + ndim if s.dim < 0 else s.dim
        if not 0 <= d < max(ndim, 1):
            raise LoomError(f"loom.distributed.sbp.{op}: split({s.dim}) is out of range for a {ndim}-d tensor")
        return split(d)
    return s


def _nd(s, mesh: Placement, ndim: int, op: str) -> NdSBP:
    """A signature per mesh axis: one SBP on a 1-D mesh, a tuple of `mesh.ndim` on a larger one."""
    sigs = tuple(s) if isinstance(s, (tuple, list)) else (s,)
    if len(sigs) != mesh.ndim:
        raise LoomError(f"loom.distributed.sbp.{op}: the placement has {mesh.ndim} mesh axes "
                        f"(shape {list(mesh.shape)}), so it needs {mesh.ndim} signatures, got {s!r}")
    return tuple(_norm(x, ndim, op) for x in sigs)


def _local_shape(shape: tuple[int, ...], nd: NdSBP, mesh: Placement) -> tuple[int, ...]:
    out = list(shape)
    if mesh.coords is None:
        return tuple(out)
    for a, s in enumerate(nd):
        if s.is_split:
            lo, hi = _bounds(shape[s.dim], mesh.shape[a])[mesh.coords[a]]
            out[s.dim] = hi - lo
    return tuple(out)


# ----------------------------------------------------------------------------- choosing an op's signature
class OpChoice:
    """What `_apply` chose for one op: per mesh axis the rule (input signatures, output signature)."""

    def __init__(self, op: str, rules: list, mesh: Placement, out_shape: tuple[int, ...]):
        self.op, self.rules, self.mesh, self.out_shape = op, rules, mesh, out_shape
        self.inputs: list[NdSBP] = [tuple(r[0][k] for r in rules) for k in range(len(rules[0][0]))]
        self.output: NdSBP = tuple(r[1] for r in rules)

    @property
    def local_out_shape(self) -> tuple[int, ...]:
        return _local_shape(self.out_shape, self.output, self.mesh)


def choose(op: str, shapes: list, out_shape: tuple, current: list[NdSBP], mesh: Placement, attrs: dict | None = None,
           itemsize: int = 4) -> OpChoice:
    """The signature `op` runs under for inputs laid out as `current`: per mesh axis the legal rule
    (`sbp_rules.signatures`) that matches them, else the one whose boxing moves the fewest bytes; a rule that
    would split one tensor dimension along two axes is passed over."""
    chosen: list = []
    for a in range(mesh.ndim):
        rules = signatures(op, shapes, out_shape, attrs, parts=mesh.shape[a])
        cur = tuple(s[a] for s in current)

        def cost(rule, a=a, cur=cur):
            moved = sum(_boxing_bytes(c0, r0, itemsize * float(np.prod(sh)), mesh.shape[a])[0]
                        for c0, r0, sh in zip(cur, rule[0], shapes))
            return (0 if rule[0] == cur else 1, moved)
        for rule in sorted(rules, key=cost):  # Stable: ties keep the table's order of preference.
            trial = chosen + [rule]
            outs = [r[1].dim for r in trial if r[1].is_split]
            ins_ok = all(len(d) == len(set(d)) for d in
                         ([r[0][k].dim for r in trial if r[0][k].is_split] for k in range(len(shapes))))
            if len(outs) == len(set(outs)) and ins_ok:
                chosen.append(rule)
                break
    return OpChoice(op, chosen, mesh, tuple(out_shape))


def _apply(op: str, inputs: list["GlobalTensor"], out_shape, local_fn, attrs: dict | None = None) -> "GlobalTensor":
    """Run `op` on global tensors: pick its signature from the rule table, box the inputs into it, compute the
    local part with ``local_fn(choice, *locals)``."""
    mesh = inputs[0].placement
    for t in inputs[1:]:
        _same_mesh(inputs[0], t, op)
    ch = choose(op, [t.shape for t in inputs], tuple(out_shape), [t.nd_sbp for t in inputs], mesh, attrs,
                inputs[0].dtype.itemsize if hasattr(inputs[0].dtype, "itemsize") else 4)
    dtype = inputs[0].dtype
    if not mesh.is_member:
        return GlobalTensor(None, mesh, ch.output, tuple(out_shape), dtype)
    locals_ = []
    for t, want in zip(inputs, ch.inputs):
        x = _box(t, want).local
        differ = [mesh.axis(a) for a in range(mesh.ndim) if want[a] == broadcast and ch.output[a] != broadcast]
        if differ and x.requires_grad:
            x = _ReplicatedUse.apply(tuple(differ), x)
        locals_.append(x)
    y = local_fn(ch, *locals_)
    return GlobalTensor(y, mesh, ch.output, tuple(out_shape), getattr(y, "dtype", dtype))


# ----------------------------------------------------------------------------- the tensor
class GlobalTensor:
    """One logical tensor over a `Placement`; `local` is this rank's part, laid out as `sbp` says.

    Build one with `to_global` (from each rank's part) or `from_full` (from the
    whole value, identical on every rank). Arithmetic, ``@``, ``.T``,
    `reshape`, `transpose`, activations, `sum`/`mean`, `softmax`, `linear`,
    `layer_norm`, `embedding`, `cross_entropy` and `backward` work on the
    global value, each under a signature from `loom.distributed.sbp_rules`;
    `to_global(sbp=...)` converts signatures; `full()` gives the whole value.
    On a rank outside the placement `local` is None and ops only track shapes.
    """

    __array_priority__ = 1000

    def __init__(self, local, placement: Placement, sbp, shape: tuple[int, ...], dtype=None):
        self.local, self.placement, self.shape = local, placement, tuple(int(s) for s in shape)
        self.nd_sbp: NdSBP = tuple(sbp) if isinstance(sbp, (tuple, list)) else (sbp,)
        self._dtype = dtype if dtype is not None else getattr(local, "dtype", None)

    # ------------------------------------------------------------ basics
    @property
    def sbp(self):
        """The signature: one SBP on a 1-D placement, a tuple (one per mesh axis) on a larger mesh."""
        return self.nd_sbp[0] if len(self.nd_sbp) == 1 else self.nd_sbp

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def requires_grad(self) -> bool:
        return self.local is not None and self.local.requires_grad

    @property
    def grad(self):
        """The gradient of the global value, as a global tensor with this tensor's signature (or None)."""
        g = None if self.local is None else self.local.grad
        return None if g is None else GlobalTensor(g, self.placement, self._grad_layout(), self.shape)

    def _grad_layout(self) -> NdSBP:
        # A partial sum's parts each receive the whole gradient: it is laid out as broadcast.
        return tuple(broadcast if s == partial_sum else s for s in self.nd_sbp)

    def to_local(self):
        """This rank's part (a plain loom tensor, still connected to autograd; None outside the placement)."""
        return self.local

    def to_global(self, placement: Placement | None = None, sbp=None) -> "GlobalTensor":
        """The same value with signature `sbp` (boxing: the collective it needs runs now), on `placement`.

        Moving to another placement sends the value from the ranks that hold it
        to the ranks of the new one (send/recv); every rank of either placement
        must call it.
        """
        if placement is not None and placement != self.placement:
            return _move(self, placement, sbp if sbp is not None else self.sbp)
        return _box(self, sbp if sbp is not None else self.sbp)

    def full(self):
        """The whole global value on every rank of the placement (a loom tensor)."""
        if not self.placement.is_member:
            raise DistributedError(f"loom.distributed.sbp.GlobalTensor.full: this process is not in "
                                   f"{self.placement}, so it holds no part of the value")
        return _box(self, tuple(broadcast for _ in self.nd_sbp)).local

    def numpy(self):
        return self.full().detach().numpy()

    def backward(self, gradient=None) -> None:
        """Differentiate the global value (a scalar unless `gradient`, a global tensor of the same layout, is given).

        Every rank of the job calls it: gradients flow back through moves between placements
        (``to_global(placement=...)``) made since the last backward, as send/recv in the other direction.
        """
        roots, grads = [], []
        if self.local is not None:
            if gradient is None:
                if self.shape != ():
                    raise LoomError(f"loom.distributed.sbp.GlobalTensor.backward: the value has shape "
                                    f"{list(self.shape)}; give a gradient or call it on a scalar")
                from loom import _api as loom
                grad = loom.ones_like(self.local)
            else:
                if not isinstance(gradient, GlobalTensor):
                    raise LoomError("loom.distributed.sbp.GlobalTensor.backward: gradient must be a GlobalTensor")
                grad = _box(gradient, self._grad_layout()).local
            roots, grads = [self.local], [grad]
        elif gradient is not None and not isinstance(gradient, GlobalTensor):
            raise LoomError("loom.distributed.sbp.GlobalTensor.backward: gradient must be a GlobalTensor")
        _backward_through_crossings(roots, grads)

    def __repr__(self) -> str:
        local = "None" if self.local is None else list(self.local.shape)
        return f"GlobalTensor(shape={list(self.shape)}, sbp={self.sbp}, {self.placement}, local={local})"

    # ------------------------------------------------------------ ops
    def _wrap(self, local, sbp, shape) -> "GlobalTensor":
        return GlobalTensor(local, self.placement, sbp, tuple(shape), self.dtype)

    def _binary(self, other, fn, name: str) -> "GlobalTensor":
        from loom import _api as loom
        if not isinstance(other, GlobalTensor):  # A Python number or a 0-d tensor: the same on every rank.
            if isinstance(other, loom.Tensor) and other.ndim > 0:
                raise LoomError(f"loom.distributed.sbp: {name} of a global tensor and a local tensor; make it global "
                                "first (from_full / to_global)")
            if name in ("add", "sub") and partial_sum in self.nd_sbp:
                a = _box(self, self._grad_layout())
            else:
                a = self
            return a._wrap(None if a.local is None else fn(a.local, other), a.nd_sbp, self.shape)
        shape = tuple(np.broadcast_shapes(self.shape, other.shape))
        return _apply(name, [self, other], shape, lambda ch, x, y: fn(x, y))

    def __add__(self, other):
        return self._binary(other, lambda x, y: x + y, "add")

    def __radd__(self, other):
        return self + other

    def __sub__(self, other):
        return self._binary(other, lambda x, y: x - y, "sub")

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        return self._binary(other, lambda x, y: x * y, "mul")

    def __rmul__(self, other):
        return self * other

    def __truediv__(self, other):
        return self._binary(other, lambda x, y: x / y, "div")

    def __neg__(self):
        return _apply("neg", [self], self.shape, lambda ch, x: -x)

    def _unary(self, name: str, fn) -> "GlobalTensor":
        return _apply(name, [self], self.shape, lambda ch, x: fn(x))

    def relu(self):
        return self._unary("relu", lambda x: x.relu())

    def tanh(self):
        return self._unary("tanh", lambda x: x.tanh())

    def gelu(self, approximate: str = "none"):
        import loom.nn.functional as F
        return self._unary("gelu", lambda x: F.gelu(x, approximate=approximate))

    def exp(self):
        return self._unary("exp", lambda x: x.exp())

    def pow(self, exponent: float):
        return self._unary("pow_scalar", lambda x: x ** exponent)

    __pow__ = pow

    @property
    def T(self) -> "GlobalTensor":
        if self.ndim != 2:
            raise ShapeError(f"loom.distributed.sbp: .T needs a 2-d tensor, got shape {list(self.shape)}")
        return self.transpose(0, 1)

    def transpose(self, dim0: int, dim1: int) -> "GlobalTensor":
        perm = list(range(self.ndim))
        perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
        return self.permute(*perm)

    def permute(self, *perm: int) -> "GlobalTensor":
        perm_t = tuple(p % self.ndim for p in (perm[0] if len(perm) == 1 and isinstance(perm[0], (tuple, list))
                                              else perm))
        shape = tuple(self.shape[p] for p in perm_t)
        return _apply("permute", [self], shape, lambda ch, x: x.permute(*perm_t), {"perm": perm_t})

    def reshape(self, *shape: int) -> "GlobalTensor":
        want = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if -1 in want:
            known = int(np.prod([s for s in want if s != -1]))
            want = tuple(int(np.prod(self.shape)) // max(known, 1) if s == -1 else s for s in want)
        if int(np.prod(want)) != int(np.prod(self.shape)):
            raise ShapeError(f"loom.distributed.sbp.reshape: cannot reshape {list(self.shape)} to {list(want)}")
        return _apply("reshape", [self], want, lambda ch, x: x.reshape(ch.local_out_shape), {"shape": want})

    def sum(self, dim=None, keepdim: bool = False) -> "GlobalTensor":
        """The sum over `dim` (all dims when None). Summing over the split dimension gives partial_sum."""
        dims = self._dims(dim)
        shape = tuple(1 if k in dims else s for k, s in enumerate(self.shape)) if keepdim else \
            tuple(s for k, s in enumerate(self.shape) if k not in dims)
        return _apply("sum", [self], shape, lambda ch, x: x.sum(dim=dims, keepdim=keepdim) if dims else x,
                      {"axes": dims, "keepdim": keepdim})

    def _dims(self, dim) -> tuple[int, ...]:
        if dim is None:
            return tuple(range(self.ndim))
        return tuple(sorted({d % self.ndim for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}))

    def mean(self, dim=None, keepdim: bool = False) -> "GlobalTensor":
        count = int(np.prod([self.shape[k] for k in self._dims(dim)]))
        return self.sum(dim, keepdim) * (1.0 / count)

    def softmax(self, dim: int = -1) -> "GlobalTensor":
        import loom.nn.functional as F
        return _apply("softmax", [self], self.shape, lambda ch, x: F.softmax(x, dim=dim), {"dim": dim})

    def log_softmax(self, dim: int = -1) -> "GlobalTensor":
        import loom.nn.functional as F
        return _apply("log_softmax", [self], self.shape, lambda ch, x: F.log_softmax(x, dim=dim), {"dim": dim})

    def __matmul__(self, other: "GlobalTensor") -> "GlobalTensor":
        if not isinstance(other, GlobalTensor):
            raise LoomError("loom.distributed.sbp: @ needs two global tensors")
        if self.ndim < 2 or other.ndim < 2 or self.shape[-1] != other.shape[-2]:
            raise ShapeError(f"loom.distributed.sbp.matmul: expected (..., m, k) @ (..., k, n), got "
                             f"{list(self.shape)} @ {list(other.shape)}")
        batch = tuple(np.broadcast_shapes(self.shape[:-2], other.shape[:-2]))
        shape = batch + (self.shape[-2], other.shape[-1])
        return _apply("matmul", [self, other], shape, lambda ch, a, b: a @ b)


def linear(x: GlobalTensor, weight: GlobalTensor, bias: GlobalTensor | None = None) -> GlobalTensor:
    """``x Wᵀ + b`` on global tensors (W of shape (out, in)): data, column or row parallel by the signatures."""
    import loom.nn.functional as F
    if x.shape[-1] != weight.shape[1] or weight.ndim != 2:
        raise ShapeError(f"loom.distributed.sbp.linear: input {list(x.shape)} and weight {list(weight.shape)} "
                         "do not fit (expected weight (out, in) with in = the input's last dimension)")
    ins = [x, weight] + ([bias] if bias is not None else [])
    return _apply("linear", ins, x.shape[:-1] + (weight.shape[0],), lambda ch, *t: F.linear(*t))


def layer_norm(x: GlobalTensor, normalized_shape, weight: GlobalTensor | None = None,
               bias: GlobalTensor | None = None, eps: float = 1e-5) -> GlobalTensor:
    """Layer normalisation over the last dims of a global tensor; leading dims may stay split."""
    import loom.nn.functional as F
    norm = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    ins = [x] + [t for t in (weight, bias) if t is not None]

    def local(ch, xl, *wb):
        w = wb[0] if weight is not None else None
        b = wb[-1] if bias is not None else None
        return F.layer_norm(xl, norm, w, b, eps)
    return _apply("layer_norm", ins, x.shape, local, {"normalized_ndim": len(norm)})


def embedding(idx: GlobalTensor, weight: GlobalTensor) -> GlobalTensor:
    """Rows of `weight` (V, C) at `idx`: batch split, feature split, or vocabulary split (Megatron: each rank
    looks up the rows it holds, zeros elsewhere, and the parts add up)."""
    from loom import _api as loom
    import loom.nn.functional as F
    mesh = idx.placement

    def local(ch, il, wl):
        vocab_axes = [a for a, r in enumerate(ch.rules) if r[0][1] == split(0)]
        if not vocab_axes:
            return F.embedding(il, wl)
        (a,) = vocab_axes
        lo, hi = _bounds(weight.shape[0], mesh.shape[a])[mesh.coords[a]]
        inside = (il >= lo) & (il < hi)
        rows = F.embedding(loom.where(inside, il - lo, loom.zeros_like(il)), wl)
        return rows * inside.unsqueeze(-1).to(rows.dtype)
    return _apply("embedding", [idx, weight], idx.shape + (weight.shape[1],), local)


def cross_entropy(logits: GlobalTensor, target: GlobalTensor) -> GlobalTensor:
    """The mean cross-entropy of logits (N, C) and class targets (N,); split rows give a partial sum."""
    import loom.nn.functional as F
    if logits.ndim != 2 or target.shape != logits.shape[:1]:
        raise ShapeError(f"loom.distributed.sbp.cross_entropy: expected logits (N, C) and targets (N,), got "
                         f"{list(logits.shape)} and {list(target.shape)}")
    n = logits.shape[0]
    return _apply("cross_entropy", [logits, target], (),
                  lambda ch, x, t: F.cross_entropy(x, t, reduction="sum") * (1.0 / n))


def _same_mesh(a: GlobalTensor, b: GlobalTensor, op: str) -> None:
    if a.placement != b.placement:
        raise LoomError(f"loom.distributed.sbp.{op}: the tensors are on different placements ({a.placement} and "
                        f"{b.placement}); move one with to_global(placement=...)")


# ----------------------------------------------------------------------------- crossing placements
def _part(whole, shape: tuple[int, ...], nd: NdSBP, mesh: Placement, rank: int):
    """The part of `whole` that global rank `rank` of `mesh` holds under `nd` (None: zeros of a partial sum)."""
    coords = np.unravel_index(mesh.ranks.index(rank), mesh.shape)
    part = whole
    for a, sig in enumerate(nd):
        if sig.is_split:
            lo, hi = _bounds(shape[sig.dim], mesh.shape[a])[int(coords[a])]
            part = _slice(part, sig.dim, lo, hi)
        elif sig == partial_sum and int(coords[a]) != 0:
            return None
    return part


_CROSSING_TAG = 7011


class _Crossing:
    """A move between placements on this rank's backward tape: the part that left (`source`, on a source rank)
    and the part that arrived (`received`, on a destination rank); backward sends the gradient the other way."""

    __slots__ = ("src", "dst", "src_nd", "dst_nd", "shape", "dtype", "source", "received", "grad")

    def __init__(self, t: "GlobalTensor", dst: Placement, to: NdSBP, received):
        self.src, self.dst, self.src_nd, self.dst_nd = t.placement, dst, t.nd_sbp, to
        self.shape, self.dtype = t.shape, t.dtype
        self.source, self.received = t.local, received
        self.grad = None  # The gradient of the part that arrived, left by `_Arrival`'s backward.


class _Arrival(Function):
    """The part that arrived on a destination rank, in autograd: its backward keeps the gradient on the
    crossing's record for `_backward_through_crossings` to send back (not in a `.grad`, which a traced step
    would have to keep)."""

    @staticmethod
    def forward(ctx, crossing, anchor, x):
        ctx.crossing = crossing
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        cr = ctx.crossing
        cr.grad = g if cr.grad is None else cr.grad + g
        return None, None, None


_ANCHOR: list = []  # One 0-d tensor that requires grad, made outside any trace: what makes `_Arrival` recorded.


def _anchor():
    from loom import _api as loom
    if not _ANCHOR:
        _ANCHOR.append(loom.zeros((), dtype=loom.float32, requires_grad=True))
    return _ANCHOR[0]


# The crossings made since the last backward, in program order (every rank of the job runs the same program,
# so the ranks that take part in one crossing see it at the same place in their tapes).
_TAPE: list[_Crossing] = []
_ON_DESTROY.append(_TAPE.clear)


def _tracing() -> bool:
    from loom.function import tracing
    return tracing()


class _Effects:
    """Inside `loom.function`, the traced sends and receives of moves between placements, in program order.

    Each one takes the token of the one before (so the traced step runs them in
    the order the program made them, as every rank expects), and each send's
    token is added into `sink`, a tensor from outside the trace, so the traced
    step keeps the sends though nothing reads their result.
    """

    sink: Any = None
    token: Any = None
    trace: Any = None  # The trace `token` belongs to: each trace starts its own chain.

    @classmethod
    def start(cls) -> None:
        from loom import _api as loom
        if cls.sink is None:  # Made outside any trace (placements are), so a trace sees it as state it updates.
            cls.sink = loom.zeros((), dtype=loom.float32)

    @classmethod
    def after(cls, t):
        """`t` made to depend on the last traced send/recv (adds a zero)."""
        from loom.runtime import realize
        if cls.trace is not realize.active_trace:
            cls.token, cls.trace = None, realize.active_trace
        if cls.token is None:
            return t
        return t + cls.token.to(t.dtype)

    @classmethod
    def collective(cls, run, x):
        """``run(x)`` (traced collectives), ordered after the last traced send/recv/collective and before the next.

        The ranks' graphs may differ (uneven splits pad on some ranks only), so their topological orders may
        too; the chain makes every rank's step run its collectives in the order the program made them.
        """
        out = run(cls.after(x))
        first = out[0] if isinstance(out, (tuple, list)) else out
        if first.numel():
            cls.token = cls._zero_of(first)
        return out

    @staticmethod
    def _zero_of(t):
        """A float32 -0.0 computed from `t`'s first element (the dependency that orders the chain): `x + -0.0`
        is `x` bit for bit, and a NaN or inf in `t` gives -0.0 too (where `t * 0.0` would spread it into the
        next collective's input)."""
        from loom import _api as loom
        v = t.reshape(-1)[:1].sum().to(loom.float32).abs()
        return loom.where(v < 1.0, v, loom.ones_like(v)) * -0.0

    @classmethod
    def send(cls, part, dst: int) -> None:
        import loom.distributed.nn.functional as dfn
        tok = dfn.send(cls.after(part), dst=dst, tag=_CROSSING_TAG).to(cls.sink.dtype)
        cls.sink.add_(tok)
        cls.token = tok

    @classmethod
    def recv(cls, shape: tuple[int, ...], dtype, src: int):
        from loom import _api as loom
        import loom.distributed.nn.functional as dfn
        cls.after(loom.zeros(()))  # Forgets a token from an earlier trace.
        token = cls.token if cls.token is not None else loom.zeros((), dtype=loom.float32)
        got = dfn.recv(shape, dtype, src=src, tag=_CROSSING_TAG, token=token)
        cls.token = cls._zero_of(got) if got.numel() else token
        return got


def _transfer(t: GlobalTensor, dst: Placement, to: NdSBP, grad: bool):
    """This rank's part of `t`'s value on `dst` laid out as `to` (None outside `dst`), detached; and whether
    the value needs a gradient (`grad` and `t` requires one, agreed between the ranks that take part).

    The source ranks make the whole value; each destination rank outside the
    source receives its own part from one source rank (send/recv); ranks in
    both take their part locally.
    """
    from loom import _api as loom
    src = t.placement
    world = resolve(None, "sbp.to_global")
    if world is None:
        raise DistributedError("loom.distributed.sbp.to_global: this process is not in the job's process group")
    me = world.rank()
    needs = bool(grad and t.requires_grad)
    traced = _tracing()
    with loom.no_grad():
        whole = t.full().detach() if src.is_member else None
        receivers = [r for r in dst.ranks if r not in src.ranks]
        sender_of = {r: src.ranks[k % src.size] for k, r in enumerate(receivers)}
        mine = None
        for r, s in sender_of.items():
            if me == s:
                part = _part(whole, t.shape, to, dst, r)
                meta = (None if part is None else (tuple(part.shape), part.dtype.name), needs)
                world._comm.send(meta, dest=r, tag=_CROSSING_TAG)
                if part is not None and traced:
                    _Effects.send(part.contiguous(), r)
                elif part is not None:
                    c.send(part.contiguous(), dst=r, tag=_CROSSING_TAG)
            elif me == r:
                shape_dtype, needs = world._comm.recv(source=s, tag=_CROSSING_TAG)
                shape = _local_shape(t.shape, to, dst)
                if shape_dtype is not None and traced:
                    mine = _Effects.recv(shape, shape_dtype[1], s)
                else:
                    mine = loom.zeros(shape, dtype=t.dtype if shape_dtype is None else shape_dtype[1])
                    if shape_dtype is not None:
                        c.recv(mine, src=s, tag=_CROSSING_TAG)
        if dst.is_member and mine is None:  # In both placements: sliced locally (a copy, not an alias).
            part = _box(GlobalTensor(whole, dst, tuple(broadcast for _ in to), t.shape, t.dtype), to).local
            mine = part.clone()
    return mine, needs


def _move(t: GlobalTensor, dst: Placement, sbp) -> GlobalTensor:
    """`t` on placement `dst` (send/recv between the placements). When `t` requires grad the move goes on the
    tape that `GlobalTensor.backward` sends gradients back through, and the part that arrives records its
    gradient there (`_Arrival`)."""
    from loom.autograd.grad_mode import is_grad_enabled
    to = _nd(sbp, dst, t.ndim, "to_global")
    _check_nd(to, dst, t.shape, "to_global")
    mine, needs = _transfer(t, dst, to, is_grad_enabled())
    if needs and (t.placement.is_member or dst.is_member):
        cr = _Crossing(t, dst, to, mine)
        if mine is not None:
            mine = cr.received = _Arrival.apply(cr, _anchor(), mine)
        _TAPE.append(cr)
    return GlobalTensor(mine, dst, to, t.shape, t.dtype if mine is None else mine.dtype)


def _backward_through_crossings(roots: list, grads: list) -> None:
    """Backward on this rank from `roots` (with `grads`), and through the crossings on the tape, last first.

    At each crossing the destination ranks first run the backward pass of
    what they hold so far (so the gradient of the part that arrived is
    complete), then the gradient moves back to the source placement, laid out
    as the source's gradient (send/recv in the other direction), where it
    seeds the source ranks' backward pass. Every rank of the job calls it.
    """
    from loom import _api as loom
    from loom.autograd import engine
    tape = list(_TAPE)
    _TAPE.clear()
    pending: dict[int, list] = {}

    def seed(t, g) -> None:
        if id(t) in pending:
            pending[id(t)][1] = pending[id(t)][1] + g
        else:
            pending[id(t)] = [t, g]

    def flush(last: bool) -> None:
        # With moves on the tape, a part that needs no gradient is passed over here (the other ranks go on
        # through the moves); without, the engine says what is wrong, as a plain backward would.
        work = [(t, g) for t, g in pending.values() if t.requires_grad or not tape]
        pending.clear()
        if work:
            ts, gs = zip(*work)
            engine.backward(list(ts), list(gs), retain_graph=not last)
    for t, g in zip(roots, grads):
        seed(t, g)
    for cr in reversed(tape):
        layout_dst = tuple(broadcast if s == partial_sum else s for s in cr.dst_nd)
        layout_src = tuple(broadcast if s == partial_sum else s for s in cr.src_nd)
        g = None
        if cr.received is not None:
            flush(last=False)
            g = loom.zeros_like(cr.received) if cr.grad is None else cr.grad.detach()
        back, _ = _transfer(GlobalTensor(g, cr.dst, layout_dst, cr.shape, cr.dtype), cr.src, layout_src, False)
        if cr.source is not None and cr.source.requires_grad:
            seed(cr.source, back.to(cr.source.dtype))
    flush(last=True)


def _use(t: GlobalTensor) -> GlobalTensor:
    """`t` (broadcast) for a use whose result differs by rank: its gradient will be summed over ranks."""
    meshes = tuple(t.placement.axis(a) for a in range(t.placement.ndim))
    return GlobalTensor(_ReplicatedUse.apply(meshes, t.local), t.placement, t.nd_sbp, t.shape)


def to_global(local, placement: Placement, sbp) -> GlobalTensor:
    """The global tensor whose part on this rank is `local` (collective for a split: the sizes are exchanged).

    For ``split(d)`` the global shape is the locals' concatenation along `d`;
    for ``broadcast`` every rank must pass the same value; for ``partial_sum``
    the global value is the sum of the locals. On a 2-D placement `sbp` is a
    tuple, one signature per mesh axis.
    """
    from loom import _api as loom
    if not isinstance(local, loom.Tensor):
        raise LoomError(f"loom.distributed.sbp.to_global: expected a loom tensor, got {type(local).__name__}")
    if not isinstance(placement, Placement):
        raise LoomError(f"loom.distributed.sbp.to_global: placement must come from sbp.placement(), got {placement!r}")
    nd = _nd(sbp, placement, local.ndim, "to_global")
    shape = list(local.shape)
    for a, s in enumerate(nd):
        if not s.is_split:
            continue
        g = resolve(placement.axis(a).group, "sbp.to_global")
        sizes = g._comm.allgather(int(local.shape[s.dim]))
        full = sum(sizes)
        if sizes != [h - lo for lo, h in _bounds(full, placement.shape[a])]:
            raise ShapeError(f"loom.distributed.sbp.to_global: split({s.dim}) parts have sizes {sizes}; loom lays "
                             f"out {full} as {[h - lo for lo, h in _bounds(full, placement.shape[a])]}")
        shape[s.dim] = full
    return GlobalTensor(local, placement, nd, tuple(shape))


def from_full(value, placement: Placement, sbp) -> GlobalTensor:
    """The global tensor of `value` (the whole value, the same on every rank) laid out as `sbp`.

    A split keeps this rank's slice; partial_sum keeps the value on the
    first rank of that mesh axis and zeros elsewhere. A leaf that requires
    grad gives a leaf part (a parameter's shard stays trainable). On a 2-D
    placement `sbp` is a tuple, one signature per mesh axis.
    """
    from loom import _api as loom
    if not isinstance(value, loom.Tensor):
        raise LoomError(f"loom.distributed.sbp.from_full: expected a loom tensor, got {type(value).__name__}")
    nd = _nd(sbp, placement, value.ndim, "from_full")
    _check_nd(nd, placement, tuple(value.shape), "from_full")
    if not placement.is_member:
        return GlobalTensor(None, placement, nd, tuple(value.shape), value.dtype)
    with loom.no_grad():
        part = value.detach()
        for a, s in enumerate(nd):
            k = placement.coords[a]
            if s.is_split:
                lo, hi = _bounds(value.shape[s.dim], placement.shape[a])[k]
                part = _slice(part, s.dim, lo, hi)
            elif s == partial_sum and k != 0:
                part = loom.zeros_like(part)
        part = part.clone()
    if value.requires_grad:
        part = loom.nn.Parameter(part) if isinstance(value, loom.nn.Parameter) else part.requires_grad_(True)
    return GlobalTensor(part, placement, nd, tuple(value.shape))
