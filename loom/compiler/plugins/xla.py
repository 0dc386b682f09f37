"""The JAX/XLA plugin: a loom Graph lowered to `jax.lax` / `jax.numpy` and compiled by one `jax.jit`.

`compile_graph(graph)` walks the graph once, turning every node into the jax
operations that compute what loom's NumPy reference interpreter computes, and
compiles the whole function ahead of time with XLA. Semantics follow the
reference, not jax's defaults:

- half precision (float16, bfloat16) computes in float32 and rounds each
  result back, as the reference (and PyTorch's CPU kernels) do;
- integer floor division and remainder round toward minus infinity, float
  floor division is NumPy's (fmod-based, snapped), remainder takes the
  divisor's sign; float -> int casts truncate; maximum/minimum and max/min
  reductions propagate NaN; round is half to even; integer sums wrap in
  the input's type; sign(NaN) is 0; argsort is stable with NaN largest;
- complex values (complex64, complex128) and the FFT primitives lower to
  jax.numpy's complex arithmetic and ``jnp.fft``, unnormalised as the reference;
- checks the reference makes at run time (gather/scatter_add index bounds,
  integer division by zero, ``check`` nodes) run inside the compiled function
  and raise the same loom errors after the call; a ``check`` also returns its
  first bad value, so the message names it.

64-bit types stay exact: tracing, compiling and every call run inside
``jax.enable_x64(True)``, a thread-local scope, so jax code elsewhere in the
process keeps its own `jax_enable_x64` setting.

Caveats (documented in docs/plugins.md): transcendental functions use XLA's
implementations (within a few ulp of NumPy's, not bitwise equal); XLA
contracts ``a * b + c`` into fused multiply-adds and flushes float denormals
to zero; floating sums and scatter-adds may add in another order; casts of
NaN or out-of-range floats to integers saturate (the reference's result
there is platform-defined).
"""
from __future__ import annotations

import math
import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from loom import dtypes as dt
from loom.errors import GraphError, LoomError, LoomIndexError, LoomZeroDivisionError, fmt_shape
from loom.ir.graph import Graph, _dfs_order
from loom.ir.node import Node
from loom.ir.attention import reference_attention, reference_grad
from loom.ir.conv import pool_index
from loom.ir.ops import PRIMITIVES, check_error, check_failure, mix64, value_text
from loom.ir.rows import reference_ce, reference_ce_grad, reference_ln, reference_ln_grad

_JAX_DTYPE = {dt.bool_: jnp.bool_, dt.uint8: jnp.uint8, dt.int8: jnp.int8, dt.int16: jnp.int16,
              dt.int32: jnp.int32, dt.int64: jnp.int64, dt.float16: jnp.float16,
              dt.bfloat16: jnp.bfloat16, dt.float32: jnp.float32, dt.float64: jnp.float64,
              dt.complex64: jnp.complex64, dt.complex128: jnp.complex128}
_HALF = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def _x64():
    """The scope every trace and call runs in: 64-bit types on, for this thread only."""
    return jax.enable_x64(True)


# ---------------------------------------------------------------- stored form <-> jax

def _stored_to_host(array: np.ndarray, d: dt.DType) -> np.ndarray:
    """A NumPy array jax takes for a value of loom dtype `d` (bfloat16 bits become ml_dtypes.bfloat16)."""
    if d is dt.bfloat16:
        return np.asarray(array).view(jnp.bfloat16)  # Same item size: a view at any layout.
    return array


def _host_to_stored(array: np.ndarray, d: dt.DType) -> np.ndarray:
    return array.view(np.uint16) if d is dt.bfloat16 else array


def _up(x):
    """Half precision computes in float32, as the reference does."""
    return x.astype(jnp.float32) if x.dtype in _HALF else x


def _down(x, d: dt.DType):
    want = _JAX_DTYPE[d]
    return x if x.dtype == want else x.astype(want)


def _full_like(x, value):
    return jnp.full(x.shape, value, x.dtype)


def _is_float(x) -> bool:
    """Floating point or complex: the types that divide exactly (only real ones reach the rounding rules)."""
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _is_bool(x) -> bool:
    return x.dtype == jnp.bool_


def _is_unsigned(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.unsignedinteger)


# ---------------------------------------------------------------- the lowering

class _Lowering:
    """One trace of a graph: host constants, the run-time error code and its messages."""

    def __init__(self, consts: dict[Node, Any]) -> None:
        self.consts = consts
        self.err = jnp.int32(0)  # 0: fine; k: errors[k - 1] happened (the first one wins).
        self.val = jnp.int64(0)  # The first error's bad value (its bits), for messages that show it.
        # (cls, message), or (None, f) where f(value bits) builds the error.
        self.errors: list[tuple[type | None, Any]] = []

    def check(self, bad, cls: type | None, msg: Any, value=None) -> None:
        """Record that `bad` (a traced bool array) means the reference raises cls(msg).

        With `value` (the values `bad` marks), the first bad one travels out too and
        `msg` is a function of its bits returning the error.
        """
        self.errors.append((cls, msg))
        code = jnp.int32(len(self.errors))
        hit = (self.err == 0) & jnp.any(bad)
        if value is not None:
            first = value.reshape(-1)[jnp.argmax(bad.reshape(-1))]
            bits = (lax.bitcast_convert_type(first.astype(jnp.float64), jnp.int64) if _is_float(first)
                    else first.astype(jnp.int64))
            self.val = jnp.where(hit, bits, self.val)
        self.err = jnp.where(hit, code, self.err)

    def graph(self, g: Graph, args: list) -> list:
        """Lower `g` applied to the traced values `args`; returns its outputs."""
        env: dict[Node, Any] = dict(zip(g.inputs, args))
        loops: dict[tuple, list] = {}
        for node in _order(g):
            if node not in env:
                env[node] = self.node(node, [env[i] for i in node.inputs], loops)
        return [env[o] for o in g.outputs]

    def node(self, node: Node, ins: list, loops: dict):
        op = node.op
        if op in ("buffer", "arange"):
            return self.consts[node]
        if op == "input":
            raise GraphError(f"loom.xla: placeholder %{node.id} is not listed in graph.inputs")
        if op == "const":
            attrs = dict(node.attrs, shape=())
            value = _stored_to_host(PRIMITIVES["const"].impl(attrs), node.dtype)
            return jnp.broadcast_to(jnp.asarray(value), tuple(node.shape))
        if op == "rand":
            return _rand(node.attrs, node.dtype)
        if op == "cast":
            return _cast(ins[0], node.inputs[0].dtype, node.dtype)
        if op == "fused":
            return self.graph(node.attrs["body"], ins)[0]
        if op == "while_loop":
            key = (id(node.attrs["body"]), id(node.attrs["cond"]), tuple(i.id for i in node.inputs))
            if key not in loops:
                loops[key] = self.while_loop(node.attrs["cond"], node.attrs["body"], ins)
            return loops[key][node.attrs["index"]]
        rule = _RULES[op]
        if op in _XLA_REWRITES and any(i.op in _XLA_REWRITES[op] for i in node.inputs):
            # XLA's simplifier folds these pairs by identities that change NaN and inf results
            # (log(pow(a, b)) becomes b * log(|a|), log(exp(x)) becomes x): keep them apart.
            ins = [lax.optimization_barrier(x) for x in ins]
        return _down(rule(self, node.attrs, *[_up(x) for x in ins]), node.dtype)

    def while_loop(self, cond: Graph, body: Graph, init: list) -> list:
        """lax.while_loop over the lowered subgraphs; an error inside stops the loop and is reported."""
        outer = self.err

        def truth(vals):
            c = self.graph(cond, list(vals))[0].reshape(())
            return c if _is_bool(c) else _up(c) != 0  # bool(x): nonzero (NaN included) is true.

        outer_val = self.val

        def step(state):
            vals, err, val, _ = state
            self.err, self.val = err, val
            vals = tuple(self.graph(body, list(vals)))
            go = truth(vals)
            return vals, self.err, self.val, go

        self.err = jnp.int32(0)
        go = truth(init)
        state = (tuple(init), self.err, self.val, go)
        vals, err, val, _ = lax.while_loop(lambda s: s[3] & (s[1] == 0), step, state)
        self.val = jnp.where(outer != 0, outer_val, val)
        self.err = jnp.where(outer != 0, outer, err)
        return list(vals)


_ORDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _order(g: Graph) -> list[Node]:
    """The nodes the outputs need, inputs first (nodes nobody reads are not lowered, as Graph.run skips them)."""
    order = _ORDERS.get(g)
    if order is None:
        given = set(g.inputs)
        order = _ORDERS[g] = _dfs_order(g.outputs, lambda n: () if n in given else n.inputs)
    return order


# ---------------------------------------------------------------- sources and casts

_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z):
    """loom.ir.ops.mix64 in jax uint64 arithmetic (wrapping, logical shifts): the same bits."""
    m1, m2 = jnp.uint64(0xBF58476D1CE4E5B9), jnp.uint64(0x94D049BB133111EB)
    z = z + jnp.uint64(_GOLD)
    z = (z ^ (z >> jnp.uint64(30))) * m1
    z = (z ^ (z >> jnp.uint64(27))) * m2
    return z ^ (z >> jnp.uint64(31))


def _rand(attrs: dict, d: dt.DType):
    """The counter-based uniform draw of loom.ir.ops `rand`, bit for bit."""
    shape = tuple(attrs["shape"])
    with np.errstate(over="ignore"):
        key = mix64(np.array(np.uint64(attrs["seed"]), np.uint64))
    counter = lax.iota(jnp.uint64, math.prod(shape)) * jnp.uint64(_GOLD)
    bits = _mix64(counter ^ jnp.uint64(key))
    if d is dt.float64:
        out = (bits >> jnp.uint64(11)).astype(jnp.float64) * (1.0 / (1 << 53))
    elif d is dt.float32:
        out = (bits >> jnp.uint64(40)).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))
    elif d is dt.float16:
        out = (bits >> jnp.uint64(53)).astype(jnp.float32) * jnp.float32(1.0 / (1 << 11))
    else:
        out = (bits >> jnp.uint64(56)).astype(jnp.float32) * jnp.float32(1.0 / (1 << 8))
    return _down(out, d).reshape(shape)  # Every value is exact in its type: the rounding is exact.


def _cast(x, src: dt.DType, dst: dt.DType):
    """loom.runtime.reference.cast: via float32 for half types, truncating float -> int."""
    x = _up(x)
    if src.category == 3 and dst.category < 3:  # The real part; to bool, whether either part is nonzero.
        x = x != 0 if dst is dt.bool_ else jnp.real(x)
    if dst is dt.bfloat16:
        return x.astype(jnp.float32).astype(jnp.bfloat16)
    if dst.category == 1 and src.category >= 2:
        x = jnp.trunc(x)
    return x.astype(_JAX_DTYPE[dst])


# ---------------------------------------------------------------- elementwise rules

def _check_divisor(lw: _Lowering, name: str, y) -> None:
    lw.check(y == 0, LoomZeroDivisionError,
             f"loom.{name}: integer division by zero (the {np.dtype(y.dtype)} divisor holds 0)")


def _int_floordiv(lw, name, x, y):
    _check_divisor(lw, name, y)
    if _is_bool(x):
        return jnp.floor_divide(x.astype(jnp.int8), y.astype(jnp.int8))
    return jnp.floor_divide(x, y)  # Rounds toward minus infinity, as Python and NumPy.


def _float_floordiv(x, y):
    """NumPy's float floor division: (x - fmod(x, y)) / y moved to the floor side and snapped."""
    mod = lax.rem(x, y)
    div = (x - mod) / y
    div = jnp.where((mod != 0) & ((y < 0) != (mod < 0)), div - 1, div)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, floor + 1, floor)
    zero = jnp.zeros_like(x)
    floor = jnp.where(div != 0, floor, jnp.copysign(zero, x / y))
    return jnp.where(y == 0, x / y, floor)


def _div(lw, a, x, y):
    return x / y if _is_float(x) else _int_floordiv(lw, "div", x, y)


def _floordiv(lw, a, x, y):
    return _float_floordiv(x, y) if _is_float(x) else _int_floordiv(lw, "floor_divide", x, y)


def _mod(lw, a, x, y):
    if not _is_float(x):
        _check_divisor(lw, "remainder", y)
    r = lax.rem(x, y)  # C fmod / truncated remainder.
    if _is_unsigned(x):
        return r
    return jnp.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)  # Take the divisor's sign.


def _pow(lw, a, x, y):
    if _is_float(x):
        return lax.pow(x, y)
    out = jnp.power(x, jnp.maximum(y, jnp.zeros_like(y)))  # Wraps like C.
    if _is_unsigned(x):
        return out
    # A negative exponent gives 1/x truncated: 0 unless x is +-1.
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    odd = (y % 2) != 0
    inv = jnp.where(x == 1, one, jnp.where(x == -1, jnp.where(odd, -one, one), zero))
    return jnp.where(y < 0, inv, out)


def _sign(lw, a, x):
    if _is_float(x):
        return jnp.where(jnp.isnan(x), jnp.zeros_like(x), jnp.sign(x))
    return jnp.sign(x)


def _rounding(fn):
    return lambda lw, a, x: fn(x) if _is_float(x) else x  # Integers are already whole.


def _logical_or_arith(logical, arith):
    return lambda lw, a, x, y: logical(x, y) if _is_bool(x) else arith(x, y)


# Consumer op -> producer ops that XLA's algebraic simplifier rewrites the pair of.
_XLA_REWRITES = {"log": ("pow", "exp"), "exp": ("log",), "pow": ("exp", "sqrt", "pow")}


def _unary(fn):
    return lambda lw, a, x: fn(x)


def _binary(fn):
    return lambda lw, a, x, y: fn(x, y)


# ---------------------------------------------------------------- reductions

def _reduce(kind: str):
    def rule(lw, a, x):
        axes = tuple(a["axes"])
        if x.ndim == 0 or not axes:
            return x
        keep = bool(a.get("keepdim", False))
        if kind in ("sum", "prod") and _is_bool(x):
            x = x.astype(jnp.int64)  # As NumPy: bool sums count, then the result casts back.
        if kind == "sum":
            return jnp.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)  # Integers wrap in their type.
        if kind == "prod":
            return jnp.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)
        fn = jnp.max if kind == "max" else jnp.min  # XLA's max/min propagate NaN.
        return fn(x, axis=axes, keepdims=keep)
    return rule


# ---------------------------------------------------------------- movement

def _pad(lw, a, x):
    # The fill value exactly as np.pad converts it into x's type.
    fill = np.pad(np.zeros(1, np.dtype(x.dtype)), (1, 0), constant_values=a.get("value", 0))[0]
    return lax.pad(x, jnp.asarray(fill, x.dtype), [(int(lo), int(hi), 0) for lo, hi in a["pads"]])


def _slice(lw, a, x):
    starts, stops, steps = a["starts"], a["stops"], a["steps"]
    sizes = [max(0, (b - s + c - 1) // c) for s, b, c in zip(starts, stops, steps)]
    if 0 in sizes:
        return jnp.zeros(tuple(sizes), x.dtype)
    limits = [s + (n - 1) * c + 1 for s, n, c in zip(starts, sizes, steps)]
    return lax.slice(x, tuple(starts), tuple(limits), tuple(steps))


def _flip(lw, a, x):
    axes = tuple(a["axes"])
    return lax.rev(x, axes) if axes else x


def _index_grids(lw: _Lowering, op: str, idx, axis: int, size: int) -> tuple:
    """Index arrays addressing x[..., idx[i...], ...] along `axis`, after a bounds check (negatives wrap)."""
    idx = idx.astype(jnp.int64)
    lw.check((idx < -size) | (idx >= size), LoomIndexError,
             f"loom.{op}: an index is out of bounds for a dimension of size {size} "
             f"(valid indices are {-size} to {size - 1})")
    idx = jnp.where(idx < 0, idx + size, idx)
    return tuple(idx if d == axis else lax.broadcasted_iota(jnp.int64, idx.shape, d) for d in range(idx.ndim))


def _gather(lw, a, x, idx):
    ax = a["axis"]
    if x.ndim == 0:
        _index_grids(lw, "gather", idx, 0, 1)  # Only the bounds check: the result is x.
        return x
    return x[_index_grids(lw, "gather", idx, ax, x.shape[ax])]


def _scatter_add(lw, a, base, idx, src):
    ax = a["axis"]
    if base.ndim == 0:
        return jnp.logical_or(base, src) if _is_bool(base) else base + src
    grids = _index_grids(lw, "scatter_add", idx, ax, base.shape[ax])
    src = src[tuple(slice(0, s) for s in idx.shape)]
    if _is_bool(base):  # NumPy's add on bools is "or".
        return base.astype(jnp.int32).at[grids].add(src.astype(jnp.int32)) != 0
    return base.at[grids].add(src)


def _check(lw, a, x):
    """The `check` primitive: the reference's test (shared), its error raised after the call with the bad value."""
    if x.size == 0:
        return x
    bad, rows = check_failure(x, a, jnp)
    npd = np.dtype(x.dtype)

    def error(row: bool):
        def build(bits: int) -> Exception:
            value = np.int64(bits).view(np.float64) if npd.kind == "f" else bits
            return check_error(a, value_text(value, npd), row=row)
        return build
    lw.check(bad, None, error(False), x)
    if rows is not None:
        lw.check(rows, None, error(True), jnp.sum(x, axis=-1))
    return x


# ---------------------------------------------------------------- contraction and sorting

def _matmul(lw, a, x, y):
    return jnp.matmul(x, y, precision=lax.Precision.HIGHEST)


# ---------------------------------------------------------------- complex parts and FFTs (loom.ir.complex, .fft)

def _fft_c2c(lw, a, x):
    axes = tuple(a["axes"])
    return jnp.fft.fftn(x, axes=axes) if a["forward"] else jnp.fft.ifftn(x, axes=axes, norm="forward")


def _fft_c2r(lw, a, x):
    axes = tuple(a["axes"])
    sizes = [x.shape[k] for k in axes[:-1]] + [a["n"]]
    return jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")


def _conv2d_fn(a):
    """x, w -> conv2d(x, w) with the primitive's attrs (NCHW, OIHW)."""
    p = a["padding"]

    def conv(x, w):
        return lax.conv_general_dilated(x, w, tuple(a["stride"]), ((p[0], p[1]), (p[2], p[3])),
                                        rhs_dilation=tuple(a["dilation"]), feature_group_count=a["groups"],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=lax.Precision.HIGHEST)
    return conv


def _conv2d(lw, a, x, w):
    return _conv2d_fn(a)(x, w)


def _conv2d_input_grad(lw, a, gy, w):
    """The transpose of conv2d in x: XLA derives the dilated convolution."""
    x_shape = (gy.shape[0], w.shape[1] * a["groups"]) + tuple(a["input_size"])
    conv = _conv2d_fn(a)
    return jax.linear_transpose(lambda x: conv(x, w), jax.ShapeDtypeStruct(x_shape, gy.dtype))(gy)[0]


def _conv2d_weight_grad(lw, a, x, gy):
    w_shape = (gy.shape[1], x.shape[1] // a["groups"]) + tuple(a["kernel_size"])
    conv = _conv2d_fn(a)
    return jax.linear_transpose(lambda w: conv(x, w), jax.ShapeDtypeStruct(w_shape, gy.dtype))(gy)[0]


def _argsort(lw, a, x):
    """Stable; ascending puts NaN last, descending puts NaN first (as the reference and PyTorch)."""
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    ax, desc = a["axis"], bool(a.get("descending", False))
    if _is_float(x):
        nan = jnp.isnan(x)
        # One zero and no NaN in the value key: XLA sorts floats in total order (-0 < +0, NaN signs).
        value = jnp.where(nan | (x == 0), jnp.zeros_like(x), x)
        keys = ((~nan).astype(jnp.int8), -value) if desc else (nan.astype(jnp.int8), value)
    elif _is_bool(x):
        keys = ((~x if desc else x).astype(jnp.int8),)
    elif _is_unsigned(x):
        keys = (jnp.iinfo(x.dtype).max - x if desc else x,)
    else:
        keys = (~x if desc else x,)  # Bitwise not reverses a signed order without overflow.
    iota = lax.broadcasted_iota(jnp.int64, x.shape, ax)
    return lax.sort((*keys, iota), dimension=ax, is_stable=True, num_keys=len(keys))[-1]


# ---------------------------------------------------------------- matrix factorisations (loom.ir.decomp's packing)

def _qr(lw, a, x):
    q, r = jnp.linalg.qr(x, mode="complete" if a["complete"] else "reduced")
    return jnp.concatenate([q, jnp.swapaxes(r, -1, -2)], axis=-2)


def _svd(lw, a, x):
    m, n = x.shape[-2:]
    k, full = min(m, n), a["full_matrices"]
    w = max(m, n) if full else k
    u, s, vh = jnp.linalg.svd(x, full_matrices=full)
    pad = lambda t: jnp.pad(t, [(0, 0)] * (t.ndim - 1) + [(0, w - t.shape[-1])])  # noqa: E731
    return jnp.concatenate([pad(u), pad(s)[..., None, :], pad(jnp.swapaxes(vh, -1, -2))], axis=-2)


def _eigh(lw, a, x):
    w, v = jnp.linalg.eigh(x, UPLO="U" if a["upper"] else "L", symmetrize_input=False)
    return jnp.concatenate([w[..., None, :], v], axis=-2)


def _triangular_solve(lw, a, x, b):
    return lax.linalg.triangular_solve(x, b, left_side=True, lower=not a["upper"],
                                       unit_diagonal=a["unitriangular"])


def _matrix_exp(lw, a, x):
    import jax.scipy.linalg as jsl
    return jsl.expm(x.astype(jnp.float64)).astype(x.dtype)


def _geqrf(lw, a, x):
    h, tau = jnp.linalg.qr(x, mode="raw")  # NumPy's raw form: h is the factored matrix transposed.
    tau = jnp.pad(tau, [(0, 0)] * (tau.ndim - 1) + [(0, x.shape[-1] - tau.shape[-1])])
    return jnp.concatenate([jnp.swapaxes(h, -1, -2), tau[..., None, :]], axis=-2)


# ---------------------------------------------------------------- the rule table

_RULES: dict[str, Callable] = {
    "neg": _unary(jnp.negative),
    "recip": _unary(lambda x: lax.div(jnp.ones_like(x), x)),
    "sqrt": _unary(lax.sqrt),
    "exp": _unary(lax.exp),
    "log": _unary(lax.log),
    "log1p": _unary(lax.log1p),
    "expm1": _unary(lax.expm1),
    "sin": _unary(lax.sin),
    "cos": _unary(lax.cos),
    "tan": _unary(lax.tan),
    "tanh": _unary(lax.tanh),
    "erf": _unary(lax.erf),
    "abs": _unary(jnp.abs),
    "sign": _sign,
    "floor": _rounding(jnp.floor),
    "ceil": _rounding(jnp.ceil),
    "round": _rounding(jnp.round),  # Half to even.
    "trunc": _rounding(jnp.trunc),
    "not": _unary(lambda x: jnp.logical_not(x) if _is_bool(x) else jnp.invert(x)),
    "add": _logical_or_arith(jnp.logical_or, lax.add),
    "sub": _binary(lax.sub),
    "mul": _logical_or_arith(jnp.logical_and, lax.mul),
    "div": _div,
    "pow": _pow,
    "maximum": _logical_or_arith(jnp.logical_or, lax.max),
    "minimum": _logical_or_arith(jnp.logical_and, lax.min),
    "floordiv": _floordiv,
    "mod": _mod,
    "atan2": _binary(lax.atan2),
    "eq": _binary(jnp.equal),
    "ne": _binary(jnp.not_equal),
    "lt": _binary(jnp.less),
    "le": _binary(jnp.less_equal),
    "gt": _binary(jnp.greater),
    "ge": _binary(jnp.greater_equal),
    "and": _binary(jnp.bitwise_and),  # Logical on bools.
    "or": _binary(jnp.bitwise_or),
    "xor": _binary(jnp.bitwise_xor),
    "where": lambda lw, a, c, x, y: lax.select(c, x, y),
    "sum": _reduce("sum"),
    "prod": _reduce("prod"),
    "max": _reduce("max"),
    "min": _reduce("min"),
    "reshape": lambda lw, a, x: jnp.reshape(x, tuple(a["shape"])),
    "permute": lambda lw, a, x: jnp.transpose(x, tuple(a["perm"])),
    "expand": lambda lw, a, x: jnp.broadcast_to(x, tuple(a["shape"])),
    "pad": _pad,
    "slice": _slice,
    "flip": _flip,
    "gather": _gather,
    "scatter_add": _scatter_add,
    "matmul": _matmul,
    "conv2d": _conv2d,
    "conv2d_input_grad": _conv2d_input_grad,
    "conv2d_weight_grad": _conv2d_weight_grad,
    "max_pool2d_index": lambda lw, a, x: pool_index(x, a, jnp),  # The reference's own rule, on jax.numpy.
    "argsort": _argsort,
    "check": _check,
    "qr": _qr,
    "svd": _svd,
    "svdvals": lambda lw, a, x: jnp.linalg.svd(x, compute_uv=False),
    "eigh": _eigh,
    "eigvalsh": lambda lw, a, x: _eigh(lw, a, x)[..., 0, :],
    "triangular_solve": _triangular_solve,
    "matrix_exp": _matrix_exp,
    "geqrf": _geqrf,
    "real": _unary(jnp.real),
    "imag": _unary(jnp.imag),
    "conj": _unary(jnp.conj),
    "complex": _binary(lax.complex),
    "fft_c2c": _fft_c2c,
    "fft_r2c": lambda lw, a, x: jnp.fft.rfftn(x, axes=tuple(a["axes"])),
    "fft_c2r": _fft_c2r,
    # Library primitives whose NumPy references are written for either array module.
    "attention": lambda lw, a, q, k, v: reference_attention(q, k, v, a, jnp),
    "attention_grad": lambda lw, a, q, k, v, y, gy: reference_grad(q, k, v, y, gy, a, jnp),
    "layer_norm": lambda lw, a, x, w, b: reference_ln(x, w, b, a, jnp),
    "layer_norm_grad": lambda lw, a, x, w, gy: reference_ln_grad(x, w, gy, a, jnp),
    "cross_entropy_rows": lambda lw, a, x, t: reference_ce(x, t, a, jnp),
    "cross_entropy_rows_grad": lambda lw, a, x, t, g: reference_ce_grad(x, t, g, a, jnp),
}

# Primitives handled in _Lowering.node itself.
_SPECIAL = frozenset({"input", "buffer", "const", "arange", "rand", "cast", "fused", "while_loop"})

SUPPORTED = frozenset(_RULES) | _SPECIAL


# ---------------------------------------------------------------- the executable

def _walk(g: Graph):
    """Every node the outputs of `g` need, subgraphs (fused bodies, loop condition and body) included."""
    for node in _order(g):
        yield node
        for key in ("body", "cond"):
            sub = node.attrs.get(key) if node.op in ("fused", "while_loop") else None
            if isinstance(sub, Graph):
                yield from _walk(sub)


class XlaExecutable:
    """A graph compiled by XLA: call it with one NumPy array per placeholder, get a tuple of arrays.

    Inputs are checked against the placeholders' shapes and dtypes before
    anything runs; outputs have exactly the graph outputs' shapes and storage
    dtypes (bfloat16 as uint16 bits). Run-time errors of the reference
    (index out of bounds, integer division by zero) are raised after the
    call, before any result is returned.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        nodes = list(_walk(graph))
        bad = sorted({n.op for n in nodes if n.op not in SUPPORTED})
        if bad:
            raise LoomError(f"loom.xla: the XLA plugin cannot lower the primitive(s) {bad}; it lowers "
                            f"{sorted(SUPPORTED)} (use backend='c' or 'reference' for this function)")
        self._specs = [(tuple(n.shape), n.dtype) for n in graph.inputs]
        self._out_dtypes = [o.dtype for o in graph.outputs]
        self._copied = [k for k, o in enumerate(graph.outputs) if o in set(graph.inputs)]
        # Constant arrays travel as arguments, placed once, rather than as literals in the program.
        self._const_nodes = list({n: None for n in nodes if n.op in ("buffer", "arange")})
        self._errors: list[tuple[type, str]] = []
        with _x64():
            self._consts = [jax.device_put(_stored_to_host(self._const_value(n), n.dtype))
                            for n in self._const_nodes]
            specs = [jax.ShapeDtypeStruct(shape, _JAX_DTYPE[d]) for shape, d in self._specs]
            self._compiled = jax.jit(self._trace).lower(*specs, *self._consts).compile()

    @staticmethod
    def _const_value(node: Node) -> np.ndarray:
        if node.op == "buffer":
            return node.buffer
        return PRIMITIVES["arange"].impl(node.attrs)

    def _trace(self, *args):
        n = len(self._specs)
        lw = _Lowering(dict(zip(self._const_nodes, args[n:])))
        outs = lw.graph(self.graph, list(args[:n]))
        outs = [_down(o, d) for o, d in zip(outs, self._out_dtypes)]
        self._errors = lw.errors
        return tuple(outs), lw.err, lw.val

    def _feed(self, k: int, array, shape: tuple, d: dt.DType) -> np.ndarray:
        array = np.asarray(array)
        if d is dt.bfloat16 and array.dtype.kind == "f":
            array = dt.f32_to_bf16(array.astype(np.float32))  # Runtime scalars arrive as float32.
        if array.dtype != d.np or array.shape != shape:
            want = f"{d.name}{fmt_shape(shape)}"
            got = (f"an array of {array.dtype}{fmt_shape(array.shape)}" if array.dtype != d.np
                   else f"shape {fmt_shape(array.shape)}")
            raise GraphError(f"loom.xla: input {k} expects {want}, got {got}")
        return array.view(jnp.bfloat16) if d is dt.bfloat16 else array

    def __call__(self, *arrays) -> tuple:
        if len(arrays) != len(self._specs):
            raise GraphError(f"loom.xla: the compiled graph takes {len(self._specs)} inputs, got {len(arrays)}")
        feed = [self._feed(k, a, shape, d) for k, (a, (shape, d)) in enumerate(zip(arrays, self._specs))]
        with _x64():
            outs, err, val = self._compiled(*feed, *self._consts)
        if self._errors:
            code = int(err)
            if code:
                cls, msg = self._errors[code - 1]
                raise cls(msg) if cls is not None else msg(int(val))
        result = [_host_to_stored(np.asarray(o), d) for o, d in zip(outs, self._out_dtypes)]
        for k in self._copied:
            result[k] = np.array(result[k])  # Never hand back the caller's own memory.
        return tuple(result)


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_graph(graph: Graph) -> XlaExecutable:
    """Compile `graph` with XLA (the "xla" plugin's factory); one executable per graph, cached.

    The graph must not be edited afterwards (compile a copy to keep editing).

    Parameters
    ----------
    graph : loom.ir.Graph
        Placeholders give the input specs; every primitive of loom.ir.ops,
        ``fused`` and ``while_loop`` nodes included, is lowered.

    Returns
    -------
    XlaExecutable
        ``run(*arrays) -> tuple of np.ndarray``, one per graph output.

    Examples
    --------
    >>> import numpy as np, loom
    >>> from loom.compiler.plugins import get_plugin
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), loom.float64)
    >>> g.outputs = [g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": (0,), "keepdim": False})]
    >>> run = get_plugin("xla")(g)
    >>> run(np.array([1.0, 2.0, 3.0]))
    (array(14.),)
    """
    exe = _CACHE.get(graph)
    if exe is None:
        exe = _CACHE[graph] = XlaExecutable(graph)
    return exe


__all__ = ["compile_graph", "XlaExecutable", "SUPPORTED"]
