"""vmap's batching interpreter: one trace of the per-sample function, replayed once on the whole batch.

`vmap` traces its function on placeholders shaped like one sample (loom's
tracer, as `loom.function` uses), which gives the graph of primitives that one
sample computes. Each primitive is then applied once with a batching rule: its
batched inputs carry the mapped dim first, and the rule adjusts the attributes
(reduction axes, reshape targets, permutations, slices, ...) or broadcasts the
unbatched inputs so the primitive computes every sample at once. Primitives
are few (loom.ir.ops), so the rules are too.

`batched_call` returns None where the trace cannot stand for every sample and
vmap falls back to calling the function per sample: a value read from data
(`.item()`, data-dependent shapes), an op without a rule (custom C ops), an
in-place write to a caller's tensor, a `.grad` set, or inputs that require
grad (a trace does not record `detach()`, so autograd through the replay could
differ from the per-sample calls).
"""
from __future__ import annotations

from typing import Any, Callable

from loom.autograd.grad_mode import is_grad_enabled
from loom.errors import LoomError
from loom.ir.node import Node
from loom.runtime import realize as _realize
from loom.tensor import Tensor, apply, default_generator


class _NoRule(Exception):
    """The trace holds something the batched replay cannot run; vmap calls the function per sample instead."""


def _front(t: Tensor, b: int) -> Tensor:
    """An unbatched value with the mapped dim added in front (a broadcast, no copy)."""
    shape = tuple(t.shape)
    return apply("expand", (apply("reshape", (t,), {"shape": (1,) + shape}),), {"shape": (b,) + shape})


def _rule(node: Node, args: list[tuple[Tensor, bool]], b: int) -> tuple[Tensor, bool]:
    """Apply `node`'s primitive to batched inputs (mapped dim first); returns (value, batched)."""
    op, attrs = node.op, dict(node.attrs)
    kind = _kind(op)
    ts = [t for t, _ in args]
    if not any(bt for _, bt in args):
        return apply(op, ts, attrs), False
    full = [t if bt else _front(t, b) for t, bt in args]
    if kind in ("unary", "binary", "compare", "ternary", "check") or op in ("cast", "not", "where"):
        return apply(op, full, attrs), True
    x = full[0]
    logical = tuple(node.inputs[0].shape)
    if op in ("sum", "prod", "max", "min"):
        if not logical:  # A 0-d value reduced over its only "axis" is itself.
            return x, True
        attrs["axes"] = tuple(a + 1 for a in attrs["axes"])
        return apply(op, [x], attrs), True
    if op in ("reshape", "expand"):
        attrs["shape"] = (b,) + tuple(attrs["shape"])
        return apply(op, [x], attrs), True
    if op == "permute":
        attrs["perm"] = (0,) + tuple(p + 1 for p in attrs["perm"])
        return apply(op, [x], attrs), True
    if op == "pad":
        attrs["pads"] = [(0, 0)] + [tuple(p) for p in attrs["pads"]]
        return apply(op, [x], attrs), True
    if op == "slice":
        attrs["starts"] = [0] + list(attrs["starts"])
        attrs["stops"] = [b] + list(attrs["stops"])
        attrs["steps"] = [1] + list(attrs["steps"])
        return apply(op, [x], attrs), True
    if op == "flip":
        attrs["axes"] = tuple(a + 1 for a in attrs["axes"])
        return apply(op, [x], attrs), True
    if op in ("gather", "scatter_add", "argsort"):
        if not logical and op != "scatter_add":
            raise _NoRule(op)
        attrs["axis"] = attrs["axis"] + 1
        return apply(op, full, attrs), True
    if op == "matmul":
        return apply(op, full, attrs), True
    if op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):
        return _conv_rule(op, args, full, attrs, b), True
    if op in ("attention", "attention_grad"):  # Batch dims lead every operand and the result.
        return apply(op, full, attrs), True
    if op in ("layer_norm", "layer_norm_grad"):
        return _layer_norm_rule(op, args, full, attrs, b), True
    if op in ("cross_entropy_rows", "cross_entropy_rows_grad"):  # Samples' rows are more rows.
        y = apply(op, [_flat(t, 2) for t in full], attrs)
        return apply("reshape", (y,), {"shape": (b, y.shape[0] // b) + tuple(y.shape[1:])}), True
    if op == "max_pool2d_index":  # Window positions within each (sample, channel) plane: fold into the batch.
        y = apply(op, (_flat(x, 2),), attrs)
        return apply("reshape", (y,), {"shape": (b, x.shape[1]) + tuple(y.shape[1:])}), True
    raise _NoRule(op)


def _merge(t: Tensor, b: int) -> Tensor:
    """(B, N, C, ...) -> (N, B*C, ...): the mapped dim folded into the channels."""
    shape = tuple(t.shape)
    t = apply("permute", (t,), {"perm": (1, 0) + tuple(range(2, len(shape)))})
    return apply("reshape", (t,), {"shape": (shape[1], b * shape[2]) + shape[3:]})


def _split(t: Tensor, b: int) -> Tensor:
    """(N, B*C, ...) -> (B, N, C, ...)."""
    shape = tuple(t.shape)
    t = apply("reshape", (t,), {"shape": (shape[0], b, shape[1] // b) + shape[2:]})
    return apply("permute", (t,), {"perm": (1, 0) + tuple(range(2, len(shape) + 1))})


def _flat(t: Tensor, n: int) -> Tensor:
    """Merge the first `n` dims."""
    shape = tuple(t.shape)
    size = 1
    for k in shape[:n]:
        size *= k
    return apply("reshape", (t,), {"shape": (size,) + shape[n:]})


def _conv_rule(op: str, args, full: list[Tensor], attrs: dict, b: int) -> Tensor:
    """The convolutions batched: the mapped dim folds into the batch when only the data is mapped, else into
    the channels with `groups` times B (one group per sample and original group)."""
    (_, a_b), (_, w_b) = args
    if op in ("conv2d", "conv2d_input_grad") and not w_b:  # Data mapped, weight shared: B*N samples.
        x, w = full[0], args[1][0]
        y = apply(op, (_flat(x, 2), w), attrs)
        return apply("reshape", (y,), {"shape": (b, x.shape[1]) + tuple(y.shape[1:])})
    attrs = dict(attrs, groups=attrs["groups"] * b)
    if op == "conv2d_weight_grad":
        x, gy = full
        y = apply(op, (_merge(x, b), _merge(gy, b)), attrs)
        return apply("reshape", (y,), {"shape": (b, y.shape[0] // b) + tuple(y.shape[1:])})
    x, w = full
    return _split(apply(op, (_merge(x, b), _flat(w, 2)), attrs), b)


def _layer_norm_rule(op: str, args, full: list[Tensor], attrs: dict, b: int) -> Tensor:
    """layer_norm and its gradient batched: the samples' rows are more rows of one call. A mapped weight
    (or bias) leaves the primitive's affine at 1 (0) and is applied per sample around it; the gradient's
    dw and db, sums over one sample's rows, are taken per sample from the normalised rows."""
    x, w_mapped, b_mapped = full[0], args[1][1], args[2][1]
    shape, n, dtype = tuple(x.shape), x.shape[-1], x.dtype
    r = 1
    for k in shape[1:-1]:
        r *= k

    def rows(t: Tensor) -> Tensor:  # (B, ..., N) -> (B * R, N)
        return apply("reshape", (t,), {"shape": (b * r, n)})

    def per_row(v: Tensor) -> Tensor:  # A mapped (B, N) vector -> (B * R, N), each sample's over its rows.
        v = apply("expand", (apply("reshape", (v,), {"shape": (b, 1, n)}),), {"shape": (b, r, n)})
        return rows(v)

    one, zero = (apply("const", (), {"value": v, "shape": (n,), "dtype": dtype}) for v in (1.0, 0.0))
    if op == "layer_norm":
        if not w_mapped and not b_mapped:  # Affine shared: one call.
            y = apply(op, (rows(x), args[1][0], args[2][0]), attrs)
            return apply("reshape", (y,), {"shape": shape})
        if w_mapped:  # The bias, shared or not, is added after the mapped weight scales.
            y = apply("mul", (apply(op, (rows(x), one, zero), attrs), per_row(full[1])), {})
            bias = per_row(full[2] if b_mapped else _front(args[2][0], b))
            y = apply("add", (y, bias), {})
        else:
            y = apply("add", (apply(op, (rows(x), args[1][0], zero), attrs), per_row(full[2])), {})
        return apply("reshape", (y,), {"shape": shape})
    gy = rows(full[2])
    if w_mapped:  # dx depends on gy and w only through gy * w.
        packed = apply(op, (rows(x), one, apply("mul", (gy, per_row(full[1])), {})), attrs)
    else:
        packed = apply(op, (rows(x), args[1][0], gy), attrs)
    dx = apply("slice", (packed,), {"starts": (0, 0), "stops": (b * r, n), "steps": (1, 1)})
    xhat = apply("layer_norm", (rows(x), one, zero), attrs)
    gy3 = apply("reshape", (gy,), {"shape": (b, r, n)})
    dw = apply("sum", (apply("reshape", (apply("mul", (gy, xhat), {}),), {"shape": (b, r, n)}),),
               {"axes": (1,), "keepdim": True})
    db = apply("sum", (gy3,), {"axes": (1,), "keepdim": True})
    def rows_at(part: Tensor, lo: int, hi: int) -> Tensor:  # Zero rows around `part` along the rows axis.
        return apply("pad", (part,), {"pads": [(0, 0), (lo, hi), (0, 0)], "value": 0})
    # (B, R + 2, N): each sample's dx rows, then its dw and db rows.
    out = apply("add", (rows_at(apply("reshape", (dx,), {"shape": (b, r, n)}), 0, 2), rows_at(dw, r, 1)), {})
    return apply("add", (out, rows_at(db, r + 1, 0)), {})


def _kind(op: str) -> str:
    from loom.ir.ops import PRIMITIVES
    prim = PRIMITIVES.get(op)
    return getattr(prim, "kind", "") if prim is not None else ""


def _order(roots: list[Node]) -> list[Node]:
    order, seen = [], set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if n.id in seen:
                continue
            seen.add(n.id)
            stack.append((n, True))
            stack.extend((i, False) for i in n.inputs)
    return order


def _trace():
    """loom's tracer, also keeping the tensors (not their owners) each outside value was read through."""
    from loom.function import _Trace

    class _VmapTrace(_Trace):
        def __init__(self) -> None:
            super().__init__()
            self.read: dict[int, list[Tensor]] = {}

        def on_read(self, inputs) -> None:
            super().on_read(inputs)
            for t in inputs:
                if t._node.id < self.start_id:
                    self.read.setdefault(t._node.id, []).append(t)
    return _VmapTrace()


def batched_call(func: Callable, kwargs: dict, leaves: list, dims: list, spec, size: int, randomness: str,
                 unflatten: Callable, flatten: Callable) -> tuple[Any, list] | None:
    """Run `func` on every sample at once; (output pytree spec, batched output leaves) or None to fall back."""
    from loom.functional.shape import movedim
    if _realize.active_trace is not None:
        return None  # Inside a trace (an outer vmap or loom.function): the per-sample calls are traced instead.
    mapped = [leaf for leaf, d in zip(leaves, dims) if d is not None]
    if is_grad_enabled() and any(t.requires_grad for t in mapped):
        return None
    tr = _trace()
    holders, batched_in = [], {}
    for leaf, d in zip(leaves, dims):
        if d is None:
            holders.append(leaf)
            continue
        shape = tuple(leaf.shape[:d]) + tuple(leaf.shape[d + 1:])
        node = Node("input", (), {"shape": shape, "dtype": leaf.dtype}, shape, leaf.dtype)
        holders.append(Tensor._wrap(node))
        batched_in[node.id] = movedim(leaf, d, 0) if d else leaf
    rng = (default_generator._seed, default_generator._counter)
    _realize.active_trace = tr
    try:
        out = func(*unflatten(holders, spec), **kwargs)
    except Exception:  # A value read from data, or anything else: the per-sample calls decide.
        default_generator._seed, default_generator._counter = rng
        return None
    finally:
        _realize.active_trace = None
    if tr.mutated or tr.grads:
        default_generator._seed, default_generator._counter = rng
        return None
    out_leaves, out_spec = flatten(out)
    if not all(isinstance(o, Tensor) for o in out_leaves):
        default_generator._seed, default_generator._counter = rng
        return None
    # Leaves a func transform made inside the function (marked by loom.func) have their gradients computed
    # in the trace; any other outside tensor that requires grad would need autograd through the replay.
    if is_grad_enabled() and any(t.requires_grad and not t.__dict__.get("_func_leaf")
                                 for ts in tr.read.values() for t in ts):
        default_generator._seed, default_generator._counter = rng
        return None
    externals = {nid: Tensor._wrap(ts[0]._node) for nid, ts in tr.read.items()}
    roots = [o._node for o in out_leaves]
    order = _order(roots)
    if randomness == "error" and any(n.op == "rand" and n.id >= tr.start_id for n in order):
        default_generator._seed, default_generator._counter = rng
        raise LoomError("loom.func.vmap: the mapped function called a random op; pass randomness='different' "
                        "(independent values per sample) or 'same' (one draw shared by all samples)")
    env: dict[int, tuple[Tensor, bool]] = {}
    try:
        for n in order:
            if n.id in batched_in:
                env[n.id] = (batched_in[n.id], True)
            elif n.id in externals:
                env[n.id] = (externals[n.id], False)
            elif n.id < tr.start_id or n.op == "input":
                raise _NoRule("an outside value the trace did not bind")
            elif not n.inputs:
                if n.op == "rand" and randomness == "different":
                    attrs = dict(n.attrs, shape=(size,) + tuple(n.attrs["shape"]), seed=default_generator.next_key())
                    env[n.id] = (apply("rand", (), attrs), True)
                else:
                    env[n.id] = (Tensor._wrap(n), False)
            else:
                env[n.id] = _rule(n, [env[i.id] for i in n.inputs], size)
    except _NoRule:
        default_generator._seed, default_generator._counter = rng
        return None
    results = []
    for o in out_leaves:
        t, bt = env[o._node.id]
        results.append(t if bt else _front(t, size))
    return out_spec, results
