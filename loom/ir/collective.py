"""The collective primitives: communication between ranks as graph nodes, library ops like matmul.

``all_reduce(x)``      every rank: the sum (``reduction="sum"``) or mean (``"avg"``) of every rank's x
``all_gather(x)``      every rank: (n, *x.shape), row r is group rank r's x
``reduce_scatter(x)``  x (n, *s) -> s: row r of the sum (or mean) over ranks, on group rank r
``broadcast(x)``       every rank: global rank ``src``'s x
``reduce(x)``          global rank ``dst``: the sum over ranks of x; the other ranks: zeros
``all_to_all(x)``      x (n, *s) -> (n, *s): row r goes to group rank r, row r of the result came from it
``send(x)``            sends x to global rank ``dst``; the value is a 0-d zero of x's dtype (a token)
``recv(token)``        receives ``shape``/``dtype`` from global rank ``src``; the token orders it after
                       whatever computed the token

Every one carries its group as ``ranks``, the tuple of the group's global
ranks (``src``/``dst`` are global ranks too), so a node is plain data that
serialises. The reference implementation calls the communication layer,
`loom.distributed.comm` (MPI through mpi4py, imported when a node runs); a
group of one rank needs no MPI. The compiler treats them as opaque library
steps: never fused, folded, merged by CSE, or recomputed.

Each backward rule is another collective, so gradients of any order stay
within this set: all_reduce's is all_reduce; all_gather and reduce_scatter
are each other's; broadcast's is reduce to the source and reduce's is
broadcast from the destination; all_to_all's is all_to_all; send's is a recv
of the gradient from the destination and recv's a send of the gradient back
to the source. Every rank must run the backward pass too, in the same order.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomTypeError, ShapeError, fmt_shape
from loom.ir.ops import P, _attr_names, _bad_attr, _desc, _dtype_attr, _int_attr, _shape_attr, register

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send", "recv")
KIND = "collective"


def _comm():
    from loom.distributed import comm  # The communication layer; loads mpi4py only when a group needs it.
    return comm


# ---------------------------------------------------------------- attributes and shapes

def _ranks_attr(op, v) -> tuple:
    if type(v) is not tuple and type(v) is not list or not v:
        raise _bad_attr(op, "ranks", v, "a non-empty tuple of global ranks", LoomTypeError)
    for r in v:
        if type(r) is not int and not isinstance(r, np.integer) or r < 0:
            raise _bad_attr(op, "ranks", v, "a tuple of global ranks (ints >= 0)", LoomTypeError)
    if len(set(v)) != len(v):
        raise _bad_attr(op, "ranks", v, "distinct global ranks")
    return tuple(v)


def _member_attr(op, name, v, ranks) -> None:
    _int_attr(op, name, v, 0, 1 << 31, " (a global rank)")
    if v not in ranks:
        raise _bad_attr(op, name, v, f"one of the group's global ranks {list(ranks)}")


def _rule(op, extra=()):
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("ranks",) + extra)
        ranks = _ranks_attr(op, attrs["ranks"])
        if "reduction" in attrs and attrs["reduction"] not in ("sum", "avg"):
            raise _bad_attr(op, "reduction", attrs["reduction"], "'sum' or 'avg' (the differentiable reductions)")
        for name in ("src", "dst"):
            if name in attrs:
                _member_attr(op, name, attrs[name], ranks)
        if "tag" in attrs:
            _int_attr(op, "tag", attrs["tag"], 0, 1 << 30, " (a message tag)")
        if "shape" in attrs:
            _shape_attr(op, "shape", attrs["shape"])
        if "dtype" in attrs:
            _dtype_attr(op, "dtype", attrs["dtype"])
    return rule


def _numeric(op, inputs):
    d = inputs[0].dtype
    if d is dt.bool_:
        raise DTypeError(f"loom.{op}: cannot reduce a bool tensor ({_desc(inputs)}); cast it to an integer dtype")
    return d


def _same(inputs, attrs):
    return tuple(inputs[0].shape), inputs[0].dtype


def _infer_all_reduce(inputs, attrs):
    return tuple(inputs[0].shape), _numeric("all_reduce", inputs)


def _infer_all_gather(inputs, attrs):
    return (len(attrs["ranks"]),) + tuple(inputs[0].shape), inputs[0].dtype


def _rows(op, inputs, attrs):
    x, n = inputs[0], len(attrs["ranks"])
    if len(x.shape) < 1 or x.shape[0] != n:
        raise ShapeError(f"loom.{op}: the input must have one row per rank of the group ({n} ranks), shape "
                         f"({n}, ...); got {x.dtype.name}{fmt_shape(x.shape)}")


def _infer_reduce_scatter(inputs, attrs):
    _rows("reduce_scatter", inputs, attrs)
    return tuple(inputs[0].shape[1:]), _numeric("reduce_scatter", inputs)


def _infer_reduce(inputs, attrs):
    return tuple(inputs[0].shape), _numeric("reduce", inputs)


def _infer_all_to_all(inputs, attrs):
    _rows("all_to_all", inputs, attrs)
    return tuple(inputs[0].shape), inputs[0].dtype


def _infer_send(inputs, attrs):
    return (), inputs[0].dtype


def _infer_recv(inputs, attrs):
    if len(inputs[0].shape) != 0:
        raise ShapeError(f"loom.recv: the token must be a 0-d tensor, got {_desc(inputs)}")
    return tuple(attrs["shape"]), dt.check_computable(dt.as_dtype(attrs["dtype"]), "recv")


# ---------------------------------------------------------------- reference implementations

def _wire(d: dt.DType) -> np.dtype:
    """The dtype an array of `d` has when an implementation sees it (half precision computes in float32)."""
    return np.dtype(np.float32) if d in (dt.float16, dt.bfloat16) else d.np


def _all_reduce(x, attrs):
    return _comm().all_reduce(x, attrs["reduction"], attrs["ranks"])


def _all_gather(x, attrs):
    return _comm().all_gather(x, attrs["ranks"])


def _reduce_scatter(x, attrs):
    return _comm().reduce_scatter(x, attrs["reduction"], attrs["ranks"])


def _broadcast(x, attrs):
    return _comm().broadcast(x, attrs["src"], attrs["ranks"])


def _reduce(x, attrs):
    return _comm().reduce(x, attrs["dst"], attrs["ranks"])


def _all_to_all(x, attrs):
    return _comm().all_to_all(x, attrs["ranks"])


def _send(x, attrs):
    _comm().send(x, attrs["dst"], attrs["tag"], attrs["ranks"])
    return np.zeros((), x.dtype)


def _recv(token, attrs):
    return _comm().recv(tuple(attrs["shape"]), _wire(dt.as_dtype(attrs["dtype"])), attrs["src"], attrs["tag"],
                        attrs["ranks"])


# ---------------------------------------------------------------- backward rules

def _all_reduce_vjp(g, x, out, attrs):
    return (P("all_reduce", g, reduction=attrs["reduction"], ranks=attrs["ranks"]),)


def _all_gather_vjp(g, x, out, attrs):
    return (P("reduce_scatter", g, reduction="sum", ranks=attrs["ranks"]),)


def _reduce_scatter_vjp(g, x, out, attrs):
    gathered = P("all_gather", g, ranks=attrs["ranks"])
    if attrs["reduction"] == "avg":
        n = len(attrs["ranks"])
        gathered = P("mul", gathered, P("const", value=1.0 / n, shape=tuple(gathered.shape), dtype=gathered.dtype))
    return (gathered,)


def _broadcast_vjp(g, x, out, attrs):
    return (P("reduce", g, dst=attrs["src"], ranks=attrs["ranks"]),)


def _reduce_vjp(g, x, out, attrs):
    return (P("broadcast", g, src=attrs["dst"], ranks=attrs["ranks"]),)


def _all_to_all_vjp(g, x, out, attrs):
    return (P("all_to_all", g, ranks=attrs["ranks"]),)


def _send_vjp(g, x, out, attrs):
    return (P("recv", g, src=attrs["dst"], tag=attrs["tag"], shape=tuple(x.shape), dtype=x.dtype,
              ranks=attrs["ranks"]),)


def _recv_vjp(g, token, out, attrs):
    sent = P("send", g, dst=attrs["src"], tag=attrs["tag"], ranks=attrs["ranks"])
    if sent.dtype is not token.dtype:
        sent = P("cast", sent, dtype=token.dtype)
    return (sent,)


register("all_reduce", KIND, 1, _infer_all_reduce, _all_reduce, _all_reduce_vjp,
         check_attrs=_rule("all_reduce", ("reduction",)))
register("all_gather", KIND, 1, _infer_all_gather, _all_gather, _all_gather_vjp, check_attrs=_rule("all_gather"))
register("reduce_scatter", KIND, 1, _infer_reduce_scatter, _reduce_scatter, _reduce_scatter_vjp,
         check_attrs=_rule("reduce_scatter", ("reduction",)))
register("broadcast", KIND, 1, _same, _broadcast, _broadcast_vjp, check_attrs=_rule("broadcast", ("src",)))
register("reduce", KIND, 1, _infer_reduce, _reduce, _reduce_vjp, check_attrs=_rule("reduce", ("dst",)))
register("all_to_all", KIND, 1, _infer_all_to_all, _all_to_all, _all_to_all_vjp, check_attrs=_rule("all_to_all"))
register("send", KIND, 1, _infer_send, _send, _send_vjp, check_attrs=_rule("send", ("dst", "tag")))
register("recv", KIND, 1, _infer_recv, _recv, _recv_vjp, check_attrs=_rule("recv", ("src", "tag", "shape", "dtype")))
