"""Row-wise library primitives: layer_norm, log_softmax + NLL and their backwards, one pass per row.

``layer_norm(x, w, b)``          x (*, N), w (N,), b (N,) -> (*, N): (x - mean) / sqrt(var + eps) * w + b
                                 over the last axis (biased variance)
``layer_norm_grad(x, w, gy)``    -> (R + 2, N), R the rows of x: dx in rows :R, dw in row R, db in row R + 1

``cross_entropy_rows(x, t)``     x (R, C), t (R,) int32/int64 class indices in [0, C) -> (R,): the row's
                                 log-sum-exp minus x[r, t[r]] (log_softmax and NLL in one pass)
``cross_entropy_rows_grad(x, t, g)``   g (R,) -> (R, C): (softmax(x) - onehot(t)) * g

Attribute of the layer_norm pair: ``eps`` (a finite float >= 0). Float operands share one float32/float64
dtype. The frontend (`loom.functional.nn.cross_entropy`) checks targets, maps ignored ones to class 0
and applies class weights, ignore masks and the reduction around the row primitive.

The references are the plain formula in NumPy; compiled steps run the row kernels of
`loom.codegen.rows` (mean, variance, normalise and affine in one pass per row; the backward
recomputes the row's statistics and accumulates dw, db per thread). The backward rule emits
``layer_norm_grad`` for a first-order gradient and writes the gradient with primitives when a
graph of it is being built (``create_graph``), so gradients of gradients work to any order.
"""
from __future__ import annotations

import math

import numpy as np

from loom import dtypes as dt
from loom.errors import AutogradError, DTypeError, LoomIndexError, ShapeError
from loom.ir.ops import P, _attr_names, _bad_attr, _desc, _no_attrs, _number_attr, register

OPS = ("layer_norm", "layer_norm_grad", "cross_entropy_rows", "cross_entropy_rows_grad")


def _attrs(op):
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("eps",))
        _number_attr(op, "eps", attrs["eps"], finite=True)
        if isinstance(attrs["eps"], bool) or attrs["eps"] < 0:
            raise _bad_attr(op, "eps", attrs["eps"], "a finite float >= 0")
    return rule


def _check(op, x, w, other, inputs):
    if len(x.shape) < 1 or tuple(w.shape) != (x.shape[-1],):
        raise ShapeError(f"loom.{op}: expects x (*, N) and a weight (N,), got {_desc(inputs)}")
    if not (x.dtype is w.dtype is other.dtype) or x.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.{op}: expects float32 or float64 operands of one dtype, got {_desc(inputs)}")


def _infer_ln(inputs, attrs):
    x, w, b = inputs
    _check("layer_norm", x, w, b, inputs)
    if tuple(b.shape) != tuple(w.shape):
        raise ShapeError(f"loom.layer_norm: the bias must be (N,) like the weight, got {_desc(inputs)}")
    return tuple(x.shape), x.dtype


def _infer_ln_grad(inputs, attrs):
    x, w, gy = inputs
    _check("layer_norm_grad", x, w, gy, inputs)
    if tuple(gy.shape) != tuple(x.shape):
        raise ShapeError(f"loom.layer_norm_grad: the output gradient must be shaped like x, got {_desc(inputs)}")
    return (math.prod(x.shape[:-1]) + 2, x.shape[-1]), x.dtype


# ---------------------------------------------------------------- reference implementations

def _normalised(x, eps, xp):
    # Centred on shifted data (each row less its first element), as `loom.functional.reduce.centre`: far from
    # zero the float mean of the raw row is only known to half an ulp of its size, the shifted one to its spread.
    xs = x - x[..., :1]
    xc = xs - xp.mean(xs, axis=-1, keepdims=True)
    rstd = 1 / xp.sqrt(xp.mean(xc * xc, axis=-1, keepdims=True) + x.dtype.type(eps))
    return xc * rstd, rstd


def _normalised_np(x, eps):
    """`_normalised` in NumPy on one buffer: (xhat, rstd, a scratch buffer shaped like x), the same values."""
    xc = np.subtract(x, x[..., :1])
    np.subtract(xc, np.mean(xc, axis=-1, keepdims=True), out=xc)
    scratch = np.multiply(xc, xc)
    rstd = 1 / np.sqrt(np.mean(scratch, axis=-1, keepdims=True) + x.dtype.type(eps))
    return np.multiply(xc, rstd, out=xc), rstd, scratch


def _rows(a):
    """`a` in C order: NumPy's row sums and means follow the memory layout, so one layout gives one set of bits."""
    return np.ascontiguousarray(a)


def reference_ln(x, w, b, attrs, xp=np):
    """layer_norm by the plain formula, in NumPy or jax.numpy (`xp`)."""
    if xp is np:
        y = _normalised_np(_rows(x), attrs["eps"])[0]
        return np.add(np.multiply(y, w, out=y), b, out=y)
    return _normalised(x, attrs["eps"], xp)[0] * w + b


def _ln_grad_np(x, w, gy, eps):
    """`reference_ln_grad`'s steps in NumPy, in place, with dx written straight into the packed result."""
    n = x.shape[-1]
    xhat, rstd, scratch = _normalised_np(x.reshape(-1, n), eps)
    gy = gy.reshape(-1, n)
    r = gy.shape[0]
    g = gy * w
    c1 = np.mean(g, axis=-1, keepdims=True)
    c2 = np.mean(np.multiply(g, xhat, out=scratch), axis=-1, keepdims=True)
    out = np.empty((r + 2, n), dtype=x.dtype)
    dx = np.subtract(np.subtract(g, c1, out=g), np.multiply(xhat, c2, out=scratch), out=g)
    np.multiply(rstd, dx, out=out[:r])
    np.sum(np.multiply(gy, xhat, out=scratch), axis=0, keepdims=True, out=out[r:r + 1])
    np.sum(gy, axis=0, keepdims=True, out=out[r + 1:])
    return out


def reference_ln_grad(x, w, gy, attrs, xp=np):
    """dx, dw, db packed, by the plain formula, in NumPy or jax.numpy (`xp`)."""
    if xp is np:
        return _ln_grad_np(_rows(x), w, _rows(gy), attrs["eps"])
    n = x.shape[-1]
    xhat, rstd = _normalised(x.reshape(-1, n), attrs["eps"], xp)
    gy = gy.reshape(-1, n)
    g = gy * w
    c1 = xp.mean(g, axis=-1, keepdims=True)
    c2 = xp.mean(g * xhat, axis=-1, keepdims=True)
    dx = rstd * (g - c1 - xhat * c2)
    return xp.concatenate([dx, xp.sum(gy * xhat, axis=0, keepdims=True), xp.sum(gy, axis=0, keepdims=True)])


# ---------------------------------------------------------------- backward rules

def _primitive_ln_grad(g, x, w, attrs):
    """dx, dw, db of layer_norm written with primitives (differentiable again)."""
    last = (x.ndim - 1,)
    n = x.shape[-1]
    first = tuple(0 for _ in x.shape)
    shift = P("slice", x.detach(), starts=first, stops=tuple(x.shape[:-1]) + (1,), steps=(1,) * x.ndim)
    xs = x - shift.expand(x.shape)  # Shifted data, centred accurately far from zero (see `_normalised`).
    xc = xs - (xs.sum(last, keepdim=True) * (1.0 / n)).expand(x.shape)
    rstd = P("recip", P("sqrt", (xc * xc).sum(last, keepdim=True) * (1.0 / n) + attrs["eps"]))
    xhat = xc * rstd.expand(x.shape)
    gw = g * w.expand(x.shape)
    c1 = gw.sum(last, keepdim=True) * (1.0 / n)
    c2 = (gw * xhat).sum(last, keepdim=True) * (1.0 / n)
    dx = rstd.expand(x.shape) * (gw - c1.expand(x.shape) - xhat * c2.expand(x.shape))
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(lead), g.sum(lead)


def _ln_vjp(g, x, w, b, out, attrs):
    from loom.autograd.grad_mode import is_grad_enabled
    if is_grad_enabled():  # A graph of the gradient is being built: write it with primitives.
        return _primitive_ln_grad(g, x, w, attrs)
    packed = P("layer_norm_grad", x, w, g, **attrs)
    r, n = packed.shape

    def rows(lo, hi):
        return P("slice", packed, starts=(lo, 0), stops=(hi, n), steps=(1, 1))
    return P("reshape", rows(0, r - 2), shape=tuple(x.shape)), rows(r - 2, r - 1).reshape((n,)), \
        rows(r - 1, r).reshape((n,))


def _ln_grad_vjp(g, x, w, gy, out, attrs):
    raise AutogradError("loom.layer_norm_grad: the fused layer_norm gradient is not differentiable; its gradient "
                        "is built with primitives when the first gradient is taken with create_graph=True")


register("layer_norm", "contraction", 3, _infer_ln, reference_ln, _ln_vjp, check_attrs=_attrs("layer_norm"))
register("layer_norm_grad", "contraction", 3, _infer_ln_grad, reference_ln_grad, _ln_grad_vjp,
         check_attrs=_attrs("layer_norm_grad"))


# ---------------------------------------------------------------- log_softmax + NLL

def _check_ce(op, x, t, inputs):
    if len(x.shape) != 2 or tuple(t.shape) != (x.shape[0],) or x.shape[1] < 1:
        raise ShapeError(f"loom.{op}: expects logits (R, C) with C >= 1 and targets (R,), got {_desc(inputs)}")
    if x.dtype not in (dt.float32, dt.float64) or t.dtype not in (dt.int32, dt.int64):
        raise DTypeError(f"loom.{op}: expects float32/float64 logits and int32/int64 targets, got {_desc(inputs)}")


def _infer_ce(inputs, attrs):
    x, t = inputs
    _check_ce("cross_entropy_rows", x, t, inputs)
    return (x.shape[0],), x.dtype


def _infer_ce_grad(inputs, attrs):
    x, t, g = inputs
    _check_ce("cross_entropy_rows_grad", x, t, inputs)
    if tuple(g.shape) != (x.shape[0],) or g.dtype is not x.dtype:
        raise ShapeError(f"loom.cross_entropy_rows_grad: the output gradient must be {x.dtype.name}({x.shape[0]},), "
                         f"got {_desc(inputs)}")
    return tuple(x.shape), x.dtype


def _targets_ok(op, x, t, xp):
    if xp is np and t.size and (t.min() < 0 or t.max() >= x.shape[1]):
        bad = t[(t < 0) | (t >= x.shape[1])][0]
        raise LoomIndexError(f"loom.{op}: target {bad} is out of bounds for {x.shape[1]} classes")
    return t.astype(np.int64)[:, None]


def _row_lse(x, xp):
    m = xp.max(x, axis=1, keepdims=True)
    return m + xp.log(xp.sum(xp.exp(x - m), axis=1, keepdims=True))


def reference_ce(x, t, attrs, xp=np):
    """Per-row log_softmax + NLL by the plain formula, in NumPy or jax.numpy (`xp`)."""
    t = _targets_ok("cross_entropy_rows", x, t, xp)
    x = _rows(x) if xp is np else x
    return (_row_lse(x, xp) - xp.take_along_axis(x, t, axis=1))[:, 0]


def reference_ce_grad(x, t, g, attrs, xp=np):
    """(softmax(x) - onehot(t)) * g by the plain formula, in NumPy or jax.numpy (`xp`)."""
    t = _targets_ok("cross_entropy_rows_grad", x, t, xp)
    x = _rows(x) if xp is np else x
    onehot = (np.arange(x.shape[1])[None, :] == t).astype(x.dtype)
    return (xp.exp(x - _row_lse(x, xp)) - onehot) * g[:, None]


def _ce_vjp(g, x, t, out, attrs):
    from loom.autograd.grad_mode import is_grad_enabled
    if not is_grad_enabled():
        return P("cross_entropy_rows_grad", x, t, g), None
    # A graph of the gradient is being built: write it with primitives.
    r, c = x.shape
    m = P("max", x, axes=(1,), keepdim=True).expand((r, c))
    e = (x - m).exp()
    p = e / e.sum((1,), keepdim=True).expand((r, c))
    cls = P("arange", start=0, step=1, shape=(c,), dtype=t.dtype).reshape((1, c)).expand((r, c))
    onehot = P("cast", cls == t.reshape((r, 1)).expand((r, c)), dtype=x.dtype)
    return (p - onehot) * g.reshape((r, 1)).expand((r, c)), None


def _ce_grad_vjp(g, x, t, gl, out, attrs):
    raise AutogradError("loom.cross_entropy_rows_grad: the fused cross_entropy gradient is not differentiable; its "
                        "gradient is built with primitives when the first gradient is taken with create_graph=True")


register("cross_entropy_rows", "contraction", 2, _infer_ce, reference_ce, _ce_vjp,
         check_attrs=_no_attrs("cross_entropy_rows"))
register("cross_entropy_rows_grad", "contraction", 3, _infer_ce_grad, reference_ce_grad, _ce_grad_vjp,
         check_attrs=_no_attrs("cross_entropy_rows_grad"))
