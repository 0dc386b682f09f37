"""Which SBP signatures each op runs under locally, and what converting between signatures costs.

One table, `RULES`, maps an op name to a function that lists the op's legal
signatures for given shapes: ``(input signatures, output signature)`` pairs
under which every rank computes its part of the output from its parts of the
inputs with the op itself, with no communication. Global tensors
(`loom.distributed.sbp`) read it to pick an op's output signature, boxing the
inputs into the cheapest legal signature when theirs fit none; the
auto-parallel pass (`loom.distributed.autoparallel`) reads it to enumerate the
choices per node of a traced graph. Two families of names live here:

- the IR primitives (``add``, ``sum``, ``reshape``, ``matmul``, ``gather``,
  ``scatter_add``, ...), which every traced graph (forward, backward and
  optimizer update) is made of;
- the composite ops a global tensor offers directly (``linear``, ``softmax``,
  ``layer_norm``, ``embedding``, ``cross_entropy``, ``transpose``, ``mean``),
  whose signatures follow from their decomposition but are stated here so a
  reader sees them at once.

Every op also runs with all of its inputs ``broadcast`` (each rank computes
the whole value), so an op missing from the table is still correct, only
not parallel. The rules are for one mesh axis; an nd signature (one per axis
of a 2-D mesh) is legal when each axis's is.

Examples
--------
>>> from loom.distributed import sbp_rules as R
>>> [r for r in R.signatures("matmul", [(8, 4), (4, 6)], (8, 6), {}, parts=2) if r[1] == R.partial_sum]
[((split(1), split(0)), partial_sum), ((partial_sum, broadcast), partial_sum), ((broadcast, partial_sum), partial_sum)]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from loom.errors import LoomError

__all__ = ["SBP", "split", "broadcast", "partial_sum", "Rule", "RULES", "register", "signatures", "boxing_kind",
           "boxing_bytes", "nd_boxing_steps", "Link", "LOOPBACK_MPI"]


# ----------------------------------------------------------------------------- signatures
class SBP:
    """One signature: ``split(dim)``, ``broadcast`` or ``partial_sum``."""

    __slots__ = ("kind", "dim", "_hash")

    def __init__(self, kind: str, dim: int | None = None):
        self.kind, self.dim = kind, dim
        self._hash = hash((kind, dim))

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, SBP) and self.kind == other.kind and self.dim == other.dim)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"split({self.dim})" if self.kind == "S" else {"B": "broadcast", "P": "partial_sum"}[self.kind]

    @property
    def is_split(self) -> bool:
        return self.kind == "S"


def split(dim: int) -> SBP:
    """The signature "each rank holds one slice along `dim`"."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise LoomError(f"loom.distributed.sbp.split: dim must be an int, got {dim!r}")
    s = _SPLITS.get(dim)
    if s is None:
        s = _SPLITS[dim] = SBP("S", dim)
    return s


_SPLITS: dict[int, SBP] = {}


broadcast = SBP("B")
partial_sum = SBP("P")
B, P = broadcast, partial_sum

Rule = tuple[tuple[SBP, ...], SBP]
Shape = tuple[int, ...]
RuleFn = Callable[[list, Shape, dict, int], list]
RULES: dict[str, RuleFn] = {}


def register(*names: str) -> Callable[[RuleFn], RuleFn]:
    """Declare the signature rule of the ops `names` (a function of input shapes, output shape, attrs, parts)."""
    def deco(fn: RuleFn) -> RuleFn:
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def signatures(op: str, in_shapes: Sequence[Shape], out_shape: Shape, attrs: dict | None = None,
               parts: int = 2) -> list[Rule]:
    """The legal ``(input signatures, output signature)`` pairs of `op`, most preferred first.

    All-broadcast is always last: it is legal for every op (every rank computes
    the whole value). A split is only offered on a dimension at least `parts` long.
    """
    shapes = [tuple(int(s) for s in sh) for sh in in_shapes]
    out = tuple(int(s) for s in out_shape)
    fn = RULES.get(op)
    found = fn(shapes, out, dict(attrs or {}, _op=op), parts) if fn is not None else []
    rules: list[Rule] = []
    for ins, o in found:
        if len(ins) != len(shapes):
            raise LoomError(f"loom internal: the SBP rule of {op} gave {len(ins)} input signatures for "
                            f"{len(shapes)} inputs")
        bad = any(s.is_split and not (0 <= s.dim < len(sh) and sh[s.dim] >= parts) for s, sh in zip(ins, shapes)) \
            or (o.is_split and not (0 <= o.dim < len(out) and out[o.dim] >= parts))
        rule = (tuple(ins), o)
        if not bad and rule not in rules:
            rules.append(rule)
    everything_b = (tuple(B for _ in shapes), B)
    if everything_b in rules:
        rules.remove(everything_b)
    return rules + [everything_b]


# ----------------------------------------------------------------------------- the IR primitives
_LINEAR_UNARY = ("neg", "real", "imag", "conj", "cast")
_UNARY = ("neg", "recip", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "abs", "sign",
          "floor", "ceil", "round", "trunc", "not", "cast", "real", "imag", "conj", "check",
          "relu", "gelu", "silu", "sigmoid", "pow_scalar")  # The last five: activations of global tensors.
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "floordiv", "mod", "atan2", "and", "or", "xor",
           "complex", "eq", "ne", "lt", "le", "gt", "ge")


def _splits_of(shape: Shape) -> list[int]:
    return list(range(len(shape)))


@register(*_UNARY)
def _unary_rule(ins, out, attrs, parts):
    """Elementwise: a split stays the same split; a linear op (negation, a float cast) keeps a partial sum."""
    rules = [((split(d),), split(d)) for d in _splits_of(out)]
    op = attrs.get("_op")
    if op in _LINEAR_UNARY and not (op == "cast" and "float" not in str(attrs.get("dtype", "float"))):
        rules.append(((P,), P))
    return rules


def _elementwise(ins, out, linear_in: tuple[bool, ...], sum_like: bool) -> list[Rule]:
    """Elementwise with NumPy broadcasting: split d of the output splits each input that spans d (others B)."""
    n = len(out)
    rules: list[Rule] = []
    for d in range(n):
        sigs = []
        for sh in ins:
            k = d - (n - len(sh))
            sigs.append(split(k) if k >= 0 and sh[k] == out[d] and sh[k] > 1 else B)
        if any(s.is_split for s in sigs):
            rules.append((tuple(sigs), split(d)))
    if sum_like:  # (a1 + a2) + (b1 + b2) = (a1 + b1) + (a2 + b2): partial sums add.
        rules.append((tuple(P for _ in ins), P))
    for k, lin in enumerate(linear_in):  # f(x1 + x2, c) = f(x1, c) + f(x2, c) when f is linear in x.
        if lin:
            rules.append((tuple(P if j == k else B for j in range(len(ins))), P))
    return rules


@register(*_BINARY)
def _binary_rule(ins, out, attrs, parts):
    op = attrs.get("_op")
    linear = {"mul": (True, True), "div": (True, False)}.get(op, (False, False))
    return _elementwise(ins, out, linear, op in ("add", "sub"))


@register("where")
def _where_rule(ins, out, attrs, parts):
    rules = _elementwise(ins, out, (False, False, False), False)
    rules.append(((B, P, P), P))  # where(c, a1 + a2, b1 + b2) = where(c, a1, b1) + where(c, a2, b2)
    return rules


def _reduce(ins, out, attrs, sum_like: bool) -> list[Rule]:
    (shape,) = ins
    axes = tuple(a % max(len(shape), 1) for a in attrs.get("axes", tuple(range(len(shape)))))
    keep = attrs.get("keepdim", False)
    rules: list[Rule] = []
    for d in range(len(shape)):
        if d in axes:
            if sum_like:
                rules.append(((split(d),), P))  # Each rank sums its slice: the parts add up to the total.
            continue
        nd = d if keep else d - sum(1 for a in axes if a < d)
        rules.append(((split(d),), split(nd)))
    if sum_like:
        rules.append(((P,), P))
    return rules


@register("sum", "mean")
def _sum_rule(ins, out, attrs, parts):
    return _reduce(ins, out, attrs, True)


@register("max", "min", "prod", "argsort")
def _extreme_rule(ins, out, attrs, parts):
    if "axis" in attrs:  # argsort
        attrs = dict(attrs, axes=(attrs["axis"],), keepdim=True)
    return _reduce(ins, out, attrs, False)


@register("reshape")
def _reshape_rule(ins, out, attrs, parts):
    """A split survives a reshape when its slices are the same row-major ranges before and after."""
    (shape,) = ins
    rules: list[Rule] = [((P,), P)]
    for d in range(len(shape)):
        pre = math.prod(shape[:d])
        for e in range(len(out)):
            if math.prod(out[:e]) != pre:
                continue
            if shape[d] == out[e] or (shape[d] % parts == 0 and out[e] % parts == 0 and
                                      (shape[d] % out[e] == 0 or out[e] % shape[d] == 0)):
                rules.append(((split(d),), split(e)))
                break
    return rules


@register("permute", "transpose")
def _permute_rule(ins, out, attrs, parts):
    (shape,) = ins
    if "perm" in attrs:
        perm = tuple(attrs["perm"])
    else:  # transpose(dim0, dim1)
        perm_l = list(range(len(shape)))
        a, b = attrs["dim0"] % len(shape), attrs["dim1"] % len(shape)
        perm_l[a], perm_l[b] = perm_l[b], perm_l[a]
        perm = tuple(perm_l)
    return [((split(perm[e]),), split(e)) for e in range(len(perm))] + [((P,), P)]


@register("expand")
def _expand_rule(ins, out, attrs, parts):
    (shape,) = ins
    rules: list[Rule] = [((P,), P)]
    for d in range(len(out)):
        if shape[d] == out[d]:
            rules.append(((split(d),), split(d)))
        else:  # A size-1 dimension grown: each rank grows it to its own slice.
            rules.append(((B,), split(d)))
    return rules


@register("slice", "pad", "flip")
def _movement_rule(ins, out, attrs, parts):
    """Dimensions the op leaves whole may stay split; slicing and flipping are linear (partial sums pass)."""
    (shape,) = ins
    op = attrs.get("_op")
    whole = []
    for d in range(len(shape)):
        if op == "slice":
            ok = attrs["starts"][d] == 0 and attrs["stops"][d] >= shape[d] and attrs["steps"][d] == 1
        elif op == "pad":
            ok = tuple(attrs["pads"][d]) == (0, 0)
        else:
            ok = d not in tuple(a % len(shape) for a in attrs.get("axes", ()))
        if ok:
            whole.append(d)
    rules: list[Rule] = [((split(d),), split(d)) for d in whole]
    if op != "pad":
        rules.append(((P,), P))
    return rules


@register("gather")
def _gather_rule(ins, out, attrs, parts):
    """out = input[index] along `axis`: split both where they agree off the axis; a whole table serves a split
    index along the axis (embedding with the batch split); a partial table gives partial rows."""
    x, idx = ins
    ax = attrs["axis"] % len(x)
    rules: list[Rule] = [((B, split(ax)), split(ax)), ((P, B), P)]
    for d in range(len(x)):
        if d != ax and x[d] == idx[d]:
            rules.append(((split(d), split(d)), split(d)))
    return rules


@register("scatter_add")
def _scatter_add_rule(ins, out, attrs, parts):
    """The gradient of gather: rows scattered from a split index/source add up to partial sums of the table."""
    base, idx, src = ins
    ax = attrs["axis"] % len(base)
    rules: list[Rule] = [((P, split(ax), split(ax)), P), ((P, B, P), P)]
    for d in range(len(base)):
        if d != ax and base[d] == idx[d] == src[d]:
            rules.append(((split(d), split(d), split(d)), split(d)))
    return rules


@register("matmul")
def _matmul_rule(ins, out, attrs, parts):
    """(..., m, k) @ (..., k, n): rows of a, columns of b, matching batch dims; a split k gives a partial sum."""
    a, b = ins
    n = len(out)
    if len(a) < 2 or len(b) < 2:  # Vector operands: whole values only.
        return []
    rules: list[Rule] = [
        ((split(len(a) - 2), B), split(n - 2)),
        ((B, split(len(b) - 1)), split(n - 1)),
        ((split(len(a) - 1), split(len(b) - 2)), P),
        ((P, B), P),
        ((B, P), P),
    ]
    for d in range(n - 2):  # Batch dimensions.
        ka, kb = d - (n - len(a)), d - (n - len(b))
        sa = split(ka) if ka >= 0 and a[ka] == out[d] else B
        sb = split(kb) if kb >= 0 and b[kb] == out[d] else B
        if sa.is_split or sb.is_split:
            rules.append(((sa, sb), split(d)))
    return rules


@register("const")
def _const_rule(ins, out, attrs, parts):
    """A constant is made where it is needed: any rank builds its slice of it."""
    return [((), split(d)) for d in range(len(out))]


# ----------------------------------------------------------------------------- composite ops (global tensors)
@register("linear")
def _linear_rule(ins, out, attrs, parts):
    """x (..., in) @ W(out, in)ᵀ + b: data parallel, column parallel (W split(0)) or row parallel (W split(1))."""
    x = ins[0]
    nx, last = len(x), len(out) - 1
    bias = len(ins) == 3
    rules: list[Rule] = []
    for d in range(nx - 1):
        rules.append(((split(d), B, B)[:len(ins)], split(d)))
    rules.append(((B, split(0), split(0))[:len(ins)], split(last)))
    rules.append(((split(nx - 1), split(1), P)[:len(ins)], P))
    rules.append(((P, B, P)[:len(ins)] if bias else (P, B), P))
    return rules


@register("softmax", "log_softmax")
def _softmax_rule(ins, out, attrs, parts):
    (x,) = ins
    dim = attrs.get("dim", -1) % len(x)
    return [((split(d),), split(d)) for d in range(len(x)) if d != dim]


@register("layer_norm")
def _layer_norm_rule(ins, out, attrs, parts):
    """Normalised over the last `normalized_ndim` dims: the leading ones may be split; weight and bias whole."""
    x = ins[0]
    k = attrs.get("normalized_ndim", 1)
    extra = tuple(B for _ in ins[1:])
    return [((split(d),) + extra, split(d)) for d in range(len(x) - k)]


@register("embedding")
def _embedding_rule(ins, out, attrs, parts):
    """idx (...) into table (V, C): split idx -> split rows; table split(1) -> split features;
    table split(0) (vocabulary parallel, Megatron) -> partial sums (each rank looks up the rows it holds)."""
    idx, _table = ins
    rules: list[Rule] = [((split(d), B), split(d)) for d in range(len(idx))]
    rules.append(((B, split(1)), split(len(idx))))
    rules.append(((B, split(0)), P))
    return rules


@register("cross_entropy")
def _cross_entropy_rule(ins, out, attrs, parts):
    """Mean cross-entropy of logits (N, C) and targets (N,): split rows give partial sums of the mean."""
    return [((split(0), split(0)), P)]


# ----------------------------------------------------------------------------- costs
@dataclass(frozen=True)
class Link:
    """The data plane between ranks: `latency` seconds per message hop, `bandwidth` bytes per second."""

    latency: float
    bandwidth: float

    def seconds(self, nbytes: float, hops: int) -> float:
        return hops * self.latency + nbytes / self.bandwidth


# Open MPI over shared memory on one machine, as measured by simulator.measure_allreduce on this machine's
# kind of host (a few microseconds per hop, a few GB/s); autoparallel.calibrate() measures the live job instead.
LOOPBACK_MPI = Link(latency=5e-6, bandwidth=3e9)


def boxing_kind(src: SBP, dst: SBP) -> str:
    """The collective that converts `src` into `dst` ("" when none is needed)."""
    if src == dst:
        return ""
    if src == B:
        return "slice" if dst.is_split else "zero_others"
    if src == P:
        return "all_reduce" if dst == B else "reduce_scatter"
    if dst.is_split:
        return "all_to_all"
    return "all_gather"  # split -> broadcast, split -> partial_sum (through broadcast)


def boxing_bytes(src: SBP, dst: SBP, nbytes: float, parts: int) -> tuple[float, int]:
    """Bytes one rank sends to convert a tensor of `nbytes` (whole) from `src` to `dst`, and message hops."""
    kind = boxing_kind(src, dst)
    if parts <= 1 or kind in ("", "slice", "zero_others"):
        return 0.0, 0
    share = (parts - 1) / parts * nbytes
    if kind == "all_reduce":
        return 2 * share, 2 * (parts - 1)
    if kind == "all_to_all":
        return share / parts, parts - 1
    return share, parts - 1


def nd_boxing_steps(have: Sequence[SBP], want: Sequence[SBP]) -> list[tuple[int, tuple[SBP, ...], SBP, SBP]]:
    """The one-axis conversions that box the nd signature `have` into `want`, in order, as
    ``(axis, signature before the step, from, to)``: first the axes whose split goes away or changes, then the
    new splits, so no tensor dimension is ever split along two axes on the way. Global tensors box by these
    steps, and the auto-parallel pass prices and runs them."""
    cur = list(have)
    steps = []
    for ax in range(len(cur)):
        if cur[ax] == want[ax] or (want[ax].is_split and not cur[ax].is_split):
            continue
        step = want[ax]
        if step.is_split and step.dim in {cur[b].dim for b in range(len(cur)) if b != ax and cur[b].is_split}:
            step = B  # Split to split while another axis splits the target dimension: through broadcast.
        steps.append((ax, tuple(cur), cur[ax], step))
        cur[ax] = step
    for ax in range(len(cur)):
        if cur[ax] != want[ax]:
            steps.append((ax, tuple(cur), cur[ax], want[ax]))
            cur[ax] = want[ax]
    return steps
