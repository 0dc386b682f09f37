"""Global tensors: one logical tensor laid out over ranks by a placement and an SBP signature.

A `GlobalTensor` is one value seen from every rank of a `Placement` (a 1-D
mesh of ranks). Its signature says how each rank's local tensor relates to
the global value:

- ``split(d)``: the global value is the ranks' locals concatenated along
  dimension ``d`` (each rank holds one slice);
- ``broadcast``: every rank holds the whole value;
- ``partial_sum``: the global value is the sum of the ranks' locals.

Ops on global tensors pick an output signature from their inputs' (each op
declares which combinations it runs locally: ``split(0) @ broadcast ->
split(0)``, ``broadcast @ split(1) -> split(1)``, ``split(1) @ split(0) ->
partial_sum``, ...). When no rule fits, the inputs are converted first;
converting between signatures (*boxing*) inserts the collective it needs:

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
from loom.distributed.process_group import DistributedError, ProcessGroup, new_group, resolve
from loom.errors import LoomError, ShapeError

__all__ = ["Placement", "placement", "SBP", "split", "broadcast", "partial_sum", "GlobalTensor", "to_global",
           "from_full"]


# ----------------------------------------------------------------------------- signatures
class SBP:
    """One signature: ``split(dim)``, ``broadcast`` or ``partial_sum``."""

    __slots__ = ("kind", "dim")

    def __init__(self, kind: str, dim: int | None = None):
        self.kind, self.dim = kind, dim

    def __eq__(self, other) -> bool:
        return isinstance(other, SBP) and (self.kind, self.dim) == (other.kind, other.dim)

    def __hash__(self) -> int:
        return hash((self.kind, self.dim))

    def __repr__(self) -> str:
        return f"split({self.dim})" if self.kind == "S" else {"B": "broadcast", "P": "partial_sum"}[self.kind]

    @property
    def is_split(self) -> bool:
        return self.kind == "S"


def split(dim: int) -> SBP:
    """The signature "each rank holds one slice along `dim`"."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise LoomError(f"loom.distributed.sbp.split: dim must be an int, got {dim!r}")
    return SBP("S", dim)


broadcast = SBP("B")
partial_sum = SBP("P")


# ----------------------------------------------------------------------------- placement
class Placement:
    """A 1-D mesh of ranks that a global tensor lives on (``ranks``), on ``device`` ('cpu')."""

    def __init__(self, ranks: Sequence[int] | None = None, device: str = "cpu"):
        if device != "cpu":
            raise LoomError(f"loom.distributed.sbp.placement: device {device!r} is not available; loom's distributed "
                            "layer runs on 'cpu' (Open MPI)")
        world = resolve(None, "sbp.placement")
        all_ranks = list(range(world.size()))
        self.ranks = list(all_ranks if ranks is None else ranks)
        if not self.ranks or sorted(set(self.ranks)) != sorted(self.ranks) or not set(self.ranks) <= set(all_ranks):
            raise LoomError(f"loom.distributed.sbp.placement: ranks must be distinct ranks of the job "
                            f"(0..{len(all_ranks) - 1}), got {list(self.ranks)}")
        self.device = device
        self.group: ProcessGroup | Any = world if self.ranks == all_ranks else new_group(self.ranks)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self) -> int:
        """This process's position in the mesh."""
        g = resolve(self.group, "sbp")
        if g is None:
            raise DistributedError(f"loom.distributed.sbp: this process is not in the placement {self}")
        return g.rank()

    def __eq__(self, other) -> bool:
        return isinstance(other, Placement) and self.ranks == other.ranks and self.device == other.device

    def __hash__(self) -> int:
        return hash((tuple(self.ranks), self.device))

    def __repr__(self) -> str:
        return f"placement(device={self.device!r}, ranks={self.ranks})"


def placement(device: str = "cpu", ranks: Sequence[int] | None = None) -> Placement:
    """The mesh of `ranks` (default: every rank of the job). Every rank of the job must call it (collective).

    Examples
    --------
    .. code-block:: python

        mesh = loom.distributed.sbp.placement(ranks=[0, 1])
    """
    return Placement(ranks, device)


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


def _gather(local, dim: int, mesh: Placement, full: int):
    """All ranks' slices along `dim`, concatenated (all_gather, padded to equal sizes for the transfer)."""
    import loom
    bounds = _bounds(full, mesh.size)
    longest = max(h - lo for lo, h in bounds)
    shape = list(local.shape)
    pad = longest - shape[dim]
    if pad:
        shape_pad = list(shape)
        shape_pad[dim] = pad
        local = loom.cat([local, loom.zeros(shape_pad, dtype=local.dtype)], dim=dim)
    parts = [loom.zeros(tuple(local.shape), dtype=local.dtype) for _ in range(mesh.size)]
    c.all_gather(parts, local.contiguous(), group=mesh.group)
    pieces = [_slice(p, dim, 0, h - lo) for p, (lo, h) in zip(parts, bounds)]
    return loom.cat(pieces, dim=dim)


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
        out = x.clone()
        c.all_reduce(out, group=mesh.group)
        return out

    @staticmethod
    def backward(ctx, g):  # d(sum of parts)/d(part) = 1: each rank's part gets the whole gradient.
        return None, g


class _PartialToSplit(Function):
    @staticmethod
    def forward(ctx, mesh, dim, x):
        ctx.mesh, ctx.dim, ctx.full = mesh, dim, x.shape[dim]
        total = x.clone()
        c.all_reduce(total, group=mesh.group)  # reduce_scatter, as all_reduce + slice (uneven slices allowed).
        lo, hi = _bounds(x.shape[dim], mesh.size)[mesh.index()]
        return _slice(total, dim, lo, hi)

    @staticmethod
    def backward(ctx, g):
        return None, None, _gather(g, ctx.dim, ctx.mesh, ctx.full)


class _BroadcastToPartial(Function):
    @staticmethod
    def forward(ctx, mesh, x):
        import loom
        return x.clone() if mesh.index() == 0 else loom.zeros_like(x)

    @staticmethod
    def backward(ctx, g):
        return None, g


class _ReplicatedUse(Function):
    """Identity forward; the gradient is summed over ranks (a broadcast value whose uses differ by rank)."""

    @staticmethod
    def forward(ctx, mesh, x):
        ctx.mesh = mesh
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        c.all_reduce(g, group=ctx.mesh.group)
        return None, g


def _box(t: "GlobalTensor", to: SBP) -> "GlobalTensor":
    """`t` with signature `to`, inserting the collective the conversion needs."""
    src, mesh = t.sbp, t.placement
    to = _norm(to, len(t.shape), "to_global")
    if src == to:
        return t
    if to.is_split and t.shape[to.dim] < mesh.size:
        raise ShapeError(f"loom.distributed.sbp: cannot split dimension {to.dim} of size {t.shape[to.dim]} over "
                         f"{mesh.size} ranks")
    x = t.local
    if src.is_split and to == broadcast:
        y = _SplitToBroadcast.apply(mesh, src.dim, t.shape[src.dim], x)
    elif src == partial_sum and to == broadcast:
        y = _PartialToBroadcast.apply(mesh, x)
    elif src == partial_sum and to.is_split:
        y = _PartialToSplit.apply(mesh, to.dim, x)
    elif src == broadcast and to.is_split:
        y = _BroadcastToSplit.apply(mesh, to.dim, x)
    elif src == broadcast and to == partial_sum:
        y = _BroadcastToPartial.apply(mesh, x)
    elif src.is_split and to.is_split:  # Through the whole value: all_gather, then slice.
        return _box(_box(t, broadcast), to)
    elif src.is_split and to == partial_sum:
        return _box(_box(t, broadcast), partial_sum)
    else:  # pragma: no cover - every pair is handled above
        raise LoomError(f"loom.distributed.sbp: no boxing from {src} to {to}")
    return GlobalTensor(y, mesh, to, t.shape)


def _norm(s: SBP, ndim: int, op: str) -> SBP:
    if not isinstance(s, SBP):
        raise LoomError(f"loom.distributed.sbp.{op}: sbp must be split(d), broadcast or partial_sum, got {s!r}")
    if s.is_split:
        d = s.dim + ndim if s.dim < 0 else s.dim
        if not 0 <= d < max(ndim, 1):
            raise LoomError(f"loom.distributed.sbp.{op}: split({s.dim}) is out of range for a {ndim}-d tensor")
        return split(d)
    return s


# ----------------------------------------------------------------------------- the tensor
class GlobalTensor:
    """One logical tensor over a `Placement`; `local` is this rank's part, laid out as `sbp` says.

    Build one with `to_global` (from each rank's part) or `from_full` (from the
    whole value, identical on every rank). Arithmetic, ``@``, ``.T``,
    activations, `sum`/`mean` and `backward` work on the global value;
    `to_global(sbp=...)` converts signatures; `full()` gives the whole value.
    """

    __array_priority__ = 1000

    def __init__(self, local, placement: Placement, sbp: SBP, shape: tuple[int, ...]):
        self.local, self.placement, self.sbp, self.shape = local, placement, sbp, tuple(int(s) for s in shape)

    # ------------------------------------------------------------ basics
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def requires_grad(self) -> bool:
        return self.local.requires_grad

    @property
    def grad(self):
        """The gradient of the global value, as a global tensor with this tensor's signature (or None)."""
        g = self.local.grad
        return None if g is None else GlobalTensor(g, self.placement, self.sbp, self.shape)

    def to_local(self):
        """This rank's part (a plain loom tensor, still connected to autograd)."""
        return self.local

    def to_global(self, placement: Placement | None = None, sbp: SBP | None = None) -> "GlobalTensor":
        """The same value with signature `sbp` (boxing: the collective it needs runs now)."""
        if placement is not None and placement != self.placement:
            raise LoomError("loom.distributed.sbp.to_global: moving a tensor to another placement is not supported "
                            f"yet ({self.placement} -> {placement})")
        return _box(self, sbp if sbp is not None else self.sbp)

    def full(self):
        """The whole global value on every rank (a loom tensor)."""
        return _box(self, broadcast).local

    def numpy(self):
        return self.full().detach().numpy()

    def backward(self, gradient=None) -> None:
        """Differentiate the global value (a scalar unless `gradient`, a global tensor of the same layout, is given)."""
        if gradient is None:
            if self.shape != ():
                raise LoomError(f"loom.distributed.sbp.GlobalTensor.backward: the value has shape {list(self.shape)}; "
                                "give a gradient or call it on a scalar")
            self.local.backward()
        else:
            if not isinstance(gradient, GlobalTensor):
                raise LoomError("loom.distributed.sbp.GlobalTensor.backward: gradient must be a GlobalTensor")
            self.local.backward(_box(gradient, self.sbp).local)

    def __repr__(self) -> str:
        return (f"GlobalTensor(shape={list(self.shape)}, sbp={self.sbp}, {self.placement}, "
                f"local={list(self.local.shape)})")

    # ------------------------------------------------------------ ops
    def _wrap(self, local, sbp: SBP, shape) -> "GlobalTensor":
        return GlobalTensor(local, self.placement, sbp, tuple(shape))

    def _binary(self, other, fn, name: str, linear_in: tuple[bool, bool]) -> "GlobalTensor":
        import loom
        if not isinstance(other, GlobalTensor):  # A Python number or a 0-d tensor: the same on every rank.
            if isinstance(other, loom.Tensor) and other.ndim > 0:
                raise LoomError(f"loom.distributed.sbp: {name} of a global tensor and a local tensor; make it global "
                                "first (from_full / to_global)")
            a = _box(self, broadcast) if self.sbp == partial_sum and name in ("add", "sub") else self
            return a._wrap(fn(a.local, other), a.sbp, self.shape)
        _same_mesh(self, other, name)
        shape = tuple(np.broadcast_shapes(self.shape, other.shape))
        n = len(shape)

        def aligned(t: GlobalTensor) -> SBP:  # The signature in the output's dimensions (trailing alignment).
            return split(t.sbp.dim + (n - t.ndim)) if t.sbp.is_split else t.sbp
        sa, sb = aligned(self), aligned(other)
        a, b = self, other
        if sa.is_split and sb.is_split and sa == sb:
            out = sa
        elif sa == broadcast and sb == broadcast:
            out = broadcast
        elif sa.is_split and sb == broadcast:
            out, b = sa, _fit(other, sa.dim - (n - other.ndim), shape[sa.dim], self.placement)
        elif sb.is_split and sa == broadcast:
            out, a = sb, _fit(self, sb.dim - (n - self.ndim), shape[sb.dim], self.placement)
        elif sa == partial_sum and sb == partial_sum and name in ("add", "sub"):
            out = partial_sum
        elif sa == partial_sum and sb == broadcast and linear_in[0]:
            out, b = partial_sum, _use(other)
        elif sb == partial_sum and sa == broadcast and linear_in[1]:
            out, a = partial_sum, _use(self)
        else:  # No local rule: compute on whole values.
            a, b, out = _box(self, broadcast), _box(other, broadcast), broadcast
        y = fn(a.local, b.local)
        return self._wrap(y, out, shape)

    def __add__(self, other):
        return self._binary(other, lambda x, y: x + y, "add", (False, False))

    def __radd__(self, other):
        return self + other

    def __sub__(self, other):
        return self._binary(other, lambda x, y: x - y, "sub", (False, False))

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        return self._binary(other, lambda x, y: x * y, "mul", (True, True))

    def __rmul__(self, other):
        return self * other

    def __truediv__(self, other):
        return self._binary(other, lambda x, y: x / y, "div", (True, False))

    def __neg__(self):
        return self._wrap(-self.local, self.sbp, self.shape)

    def _unary(self, fn) -> "GlobalTensor":
        t = _box(self, broadcast) if self.sbp == partial_sum else self
        return t._wrap(fn(t.local), t.sbp, t.shape)

    def relu(self):
        return self._unary(lambda x: x.relu())

    def tanh(self):
        return self._unary(lambda x: x.tanh())

    def gelu(self, approximate: str = "none"):
        import loom.nn.functional as F
        return self._unary(lambda x: F.gelu(x, approximate=approximate))

    def exp(self):
        return self._unary(lambda x: x.exp())

    def pow(self, exponent: float):
        return self._unary(lambda x: x ** exponent)

    __pow__ = pow

    @property
    def T(self) -> "GlobalTensor":
        if self.ndim != 2:
            raise ShapeError(f"loom.distributed.sbp: .T needs a 2-d tensor, got shape {list(self.shape)}")
        s = split(1 - self.sbp.dim) if self.sbp.is_split else self.sbp
        return self._wrap(self.local.T, s, self.shape[::-1])

    def sum(self, dim: int | None = None, keepdim: bool = False) -> "GlobalTensor":
        """The sum over `dim` (all dims when None). Summing over the split dimension gives partial_sum."""
        dims = tuple(range(self.ndim)) if dim is None else ((dim + self.ndim) % self.ndim,)
        y = self.local.sum(dim=dims, keepdim=keepdim) if dims else self.local
        shape = tuple(1 if k in dims else s for k, s in enumerate(self.shape)) if keepdim else \
            tuple(s for k, s in enumerate(self.shape) if k not in dims)
        if self.sbp.is_split:
            d = self.sbp.dim
            if d in dims:
                return self._wrap(y, partial_sum, shape)
            nd = d if keepdim else d - sum(1 for k in dims if k < d)
            return self._wrap(y, split(nd), shape)
        return self._wrap(y, self.sbp, shape)

    def mean(self, dim: int | None = None, keepdim: bool = False) -> "GlobalTensor":
        dims = tuple(range(self.ndim)) if dim is None else ((dim + self.ndim) % self.ndim,)
        count = 1
        for k in dims:
            count *= self.shape[k]
        return self.sum(dim, keepdim) * (1.0 / count)

    def __matmul__(self, other: "GlobalTensor") -> "GlobalTensor":
        if not isinstance(other, GlobalTensor):
            raise LoomError("loom.distributed.sbp: @ needs two global tensors")
        _same_mesh(self, other, "matmul")
        if self.ndim != 2 or other.ndim != 2 or self.shape[1] != other.shape[0]:
            raise ShapeError(f"loom.distributed.sbp.matmul: expected (m, k) @ (k, n), got {list(self.shape)} @ "
                             f"{list(other.shape)}")
        sa, sb = self.sbp, other.sbp
        a, b = self, other
        shape = (self.shape[0], other.shape[1])
        if sa == split(0) and sb == broadcast:
            out, b = split(0), _use(other)
        elif sa == broadcast and sb == split(1):
            out, a = split(1), _use(self)
        elif sa == split(1) and sb == split(0):
            out = partial_sum
        elif sa == broadcast and sb == broadcast:
            out = broadcast
        elif sa == partial_sum and sb == broadcast:
            out, b = partial_sum, _use(other)
        elif sa == broadcast and sb == partial_sum:
            out, a = partial_sum, _use(self)
        elif sa == split(0) and sb.is_split:  # Keep the row split; the weight is gathered.
            out, b = split(0), _use(_box(other, broadcast))
        elif sa.is_split and sb == split(1):
            out, a = split(1), _use(_box(self, broadcast))
        else:
            a, b, out = _box(self, broadcast), _box(other, broadcast), broadcast
        return self._wrap(a.local @ b.local, out, shape)


def _same_mesh(a: GlobalTensor, b: GlobalTensor, op: str) -> None:
    if a.placement != b.placement:
        raise LoomError(f"loom.distributed.sbp.{op}: the tensors are on different placements ({a.placement} and "
                        f"{b.placement})")


def _use(t: GlobalTensor) -> GlobalTensor:
    """`t` (broadcast) for a use whose result differs by rank: its gradient will be summed over ranks."""
    return GlobalTensor(_ReplicatedUse.apply(t.placement, t.local), t.placement, t.sbp, t.shape)


def _fit(t: GlobalTensor, dim: int, full: int, mesh: Placement) -> GlobalTensor:
    """A broadcast operand beside a split one: sliced the same way where it spans that dimension, else used whole."""
    if dim >= 0 and t.shape[dim] == full and full > 1:
        return _box(t, split(dim))
    return _use(t)


def to_global(local, placement: Placement, sbp: SBP) -> GlobalTensor:
    """The global tensor whose part on this rank is `local` (collective for a split: the sizes are exchanged).

    For ``split(d)`` the global shape is the locals' concatenation along `d`;
    for ``broadcast`` every rank must pass the same value; for ``partial_sum``
    the global value is the sum of the locals.
    """
    import loom
    if not isinstance(local, loom.Tensor):
        raise LoomError(f"loom.distributed.sbp.to_global: expected a loom tensor, got {type(local).__name__}")
    if not isinstance(placement, Placement):
        raise LoomError(f"loom.distributed.sbp.to_global: placement must come from sbp.placement(), got {placement!r}")
    s = _norm(sbp, local.ndim, "to_global")
    shape = list(local.shape)
    if s.is_split:
        g = resolve(placement.group, "sbp.to_global")
        sizes = g._comm.allgather(int(local.shape[s.dim]))
        full = sum(sizes)
        if sizes != [h - lo for lo, h in _bounds(full, placement.size)]:
            raise ShapeError(f"loom.distributed.sbp.to_global: split({s.dim}) parts have sizes {sizes}; loom lays "
                             f"out {full} as {[h - lo for lo, h in _bounds(full, placement.size)]}")
        shape[s.dim] = full
    return GlobalTensor(local, placement, s, tuple(shape))


def from_full(value, placement: Placement, sbp: SBP) -> GlobalTensor:
    """The global tensor of `value` (the whole value, the same on every rank) laid out as `sbp`.

    A split keeps this rank's slice; partial_sum keeps the value on the
    mesh's first rank and zeros elsewhere. A leaf that requires grad gives a
    leaf part (a parameter's shard stays trainable).
    """
    import loom
    if not isinstance(value, loom.Tensor):
        raise LoomError(f"loom.distributed.sbp.from_full: expected a loom tensor, got {type(value).__name__}")
    s = _norm(sbp, value.ndim, "from_full")
    me = placement.index()
    with loom.no_grad():
        if s.is_split:
            if value.shape[s.dim] < placement.size:
                raise ShapeError(f"loom.distributed.sbp.from_full: cannot split dimension {s.dim} of size "
                                 f"{value.shape[s.dim]} over {placement.size} ranks")
            lo, hi = _bounds(value.shape[s.dim], placement.size)[me]
            part = _slice(value.detach(), s.dim, lo, hi)
        elif s == partial_sum:
            part = value.detach().clone() if me == 0 else loom.zeros_like(value)
        else:
            part = value.detach().clone()
    if value.requires_grad:
        part = loom.nn.Parameter(part) if isinstance(value, loom.nn.Parameter) else part.requires_grad_(True)
    return GlobalTensor(part, placement, s, tuple(value.shape))

