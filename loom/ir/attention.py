"""Attention as library primitives: one blocked kernel forward, one backward, no T x T value in the plan.

``attention(q, k, v)``          q (*B, L, E), k (*B, S, E), v (*B, S, E) -> (*B, L, E + 1): the output
                                softmax(q k^T * scale [+ causal mask]) v in columns :E, the row's
                                log-sum-exp of the (masked, scaled) scores in column E
``attention_grad(q, k, v, y, gy)``   y and gy (*B, L, E + 1) (the packed output and its cotangent)
                                -> (*B, L + 2 S, E): dq in rows :L, dk in rows L:L+S, dv in rows L+S:

Attributes: ``causal`` (bool: key j attends to query i when j <= i, PyTorch's top-left aligned mask)
and ``scale`` (a finite float). Batch dims match exactly (the frontend expands them); q, k, v share
one float32/float64 dtype and one head dim.

The log-sum-exp column lets the backward kernel recompute each block of probabilities
exp(s - lse) from q and k instead of keeping them; its cotangent is honoured too (d lse/d s = p),
so the packed output is differentiable as a whole. The references below are the plain formula in
NumPy (the value every mode is held to); compiled steps run the blocked C kernels of
`loom.codegen.attention`. The backward rule emits ``attention_grad`` for a first-order gradient; when
a graph of the gradient is being built (``create_graph``), it writes the gradient with primitives
instead, so gradients of gradients work to any order.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.errors import AutogradError, DTypeError, ShapeError
from loom.ir.ops import P, _attr_names, _bad_attr, _bool_attr, _desc, _number_attr, register

OPS = ("attention", "attention_grad")


def _attrs(op):
    def rule(inputs, attrs):
        _attr_names(op, attrs, ("causal", "scale"))
        _bool_attr(op, "causal", attrs["causal"])
        _number_attr(op, "scale", attrs["scale"], finite=True)
        if isinstance(attrs["scale"], bool):
            raise _bad_attr(op, "scale", attrs["scale"], "a finite float")
    return rule


def _check_qkv(op, q, k, v, inputs):
    for t in (q, k, v):
        if len(t.shape) < 2:
            raise ShapeError(f"loom.{op}: expects (*B, L, E) query and (*B, S, E) key and value, got {_desc(inputs)}")
    if not (tuple(q.shape[:-2]) == tuple(k.shape[:-2]) == tuple(v.shape[:-2])):
        raise ShapeError(f"loom.{op}: query, key and value need equal batch dims, got {_desc(inputs)}")
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]) or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"loom.{op}: query, key and value need one head dim E and key/value one length S, "
                         f"got {_desc(inputs)}")
    if not (q.dtype is k.dtype is v.dtype) or q.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.{op}: expects float32 or float64 query, key and value of one dtype, "
                         f"got {_desc(inputs)}")


def _infer_attention(inputs, attrs):
    q, k, v = inputs
    _check_qkv("attention", q, k, v, inputs)
    return tuple(q.shape[:-1]) + (q.shape[-1] + 1,), q.dtype


def _infer_grad(inputs, attrs):
    q, k, v, y, gy = inputs
    _check_qkv("attention_grad", q, k, v, inputs)
    packed = tuple(q.shape[:-1]) + (q.shape[-1] + 1,)
    for name, t in (("output", y), ("output gradient", gy)):
        if tuple(t.shape) != packed or t.dtype is not q.dtype:
            raise ShapeError(f"loom.attention_grad: the packed {name} must be {q.dtype.name}{packed}, "
                             f"got {_desc(inputs)}")
    return tuple(q.shape[:-2]) + (q.shape[-2] + 2 * k.shape[-2], q.shape[-1]), q.dtype


# ---------------------------------------------------------------- reference implementations

def _scores(q, k, attrs, xp=np):
    """The scaled scores, masked with -inf where causal (NumPy: scaled and masked in place, same values)."""
    s = xp.matmul(q, xp.swapaxes(k, -1, -2))
    L, S = q.shape[-2], k.shape[-2]
    if xp is np:
        s *= q.dtype.type(attrs["scale"])
        if attrs["causal"]:
            np.copyto(s, -np.inf, where=np.arange(S)[None, :] > np.arange(L)[:, None])
        return s
    s = s * q.dtype.type(attrs["scale"])
    if not attrs["causal"]:
        return s
    keep = np.arange(S)[None, :] <= np.arange(L)[:, None]
    return xp.where(keep, s, -np.inf)


def reference_attention(q, k, v, attrs, xp=np):
    """The packed output by the plain formula, in NumPy or jax.numpy (`xp`)."""
    s = _scores(q, k, attrs, xp)
    m = xp.max(s, axis=-1, keepdims=True)
    if xp is np:  # The same steps, reusing the score buffer (a T x T value per head is the largest here).
        e = s - m
        lse = m + np.log(np.sum(np.exp(e, out=e), axis=-1, keepdims=True))
        p = np.exp(np.subtract(s, lse, out=s), out=s)
        E = q.shape[-1]
        out = np.empty(tuple(q.shape[:-1]) + (E + 1,), dtype=q.dtype)
        out[..., :E] = np.matmul(p, v)
        out[..., E:] = lse
        return out
    lse = m + xp.log(xp.sum(xp.exp(s - m), axis=-1, keepdims=True))  # Causal rows keep key 0: m is finite.
    p = xp.exp(s - lse)
    return xp.concatenate([xp.matmul(p, v), lse], axis=-1)


def reference_grad(q, k, v, y, gy, attrs, xp=np):
    """dq, dk, dv packed, by the plain formula, in NumPy or jax.numpy (`xp`)."""
    s = _scores(q, k, attrs, xp)
    go, glse = gy[..., :-1], gy[..., -1:]
    d = xp.sum(go * y[..., :-1], axis=-1, keepdims=True) - glse
    if xp is np:  # The same steps in place: p over the scores, ds over dp, the three blocks written once.
        p = np.exp(np.subtract(s, y[..., -1:], out=s), out=s)
        L, S = q.shape[-2], k.shape[-2]
        out = np.empty(tuple(q.shape[:-2]) + (L + 2 * S, q.shape[-1]), dtype=q.dtype)
        out[..., L + S:, :] = np.matmul(np.swapaxes(p, -1, -2), go)
        dp = np.matmul(go, np.swapaxes(v, -1, -2))
        ds = np.multiply(np.multiply(p, np.subtract(dp, d, out=dp), out=dp), q.dtype.type(attrs["scale"]), out=dp)
        out[..., :L, :] = np.matmul(ds, k)
        out[..., L:L + S, :] = np.matmul(np.swapaxes(ds, -1, -2), q)
        return out
    p = xp.exp(s - y[..., -1:])
    dv = xp.matmul(xp.swapaxes(p, -1, -2), go)
    dp = xp.matmul(go, xp.swapaxes(v, -1, -2))
    ds = p * (dp - d) * q.dtype.type(attrs["scale"])
    dq = xp.matmul(ds, k)
    dk = xp.matmul(xp.swapaxes(ds, -1, -2), q)
    return xp.concatenate([dq, dk, dv], axis=-2)


# ---------------------------------------------------------------- backward rules

def _t(x):
    n = x.ndim
    return P("permute", x, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def _cols(x, lo, hi):
    n = x.ndim
    return P("slice", x, starts=(0,) * (n - 1) + (lo,), stops=tuple(x.shape[:-1]) + (hi,), steps=(1,) * n)


def _primitive_grad(q, k, v, y, gy, attrs):
    """The gradient of `attention` written with primitives (differentiable again)."""
    E = q.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    s = P("matmul", q, _t(k)) * attrs["scale"]
    lse = _cols(y, E, E + 1)
    p = (s - lse.expand(s.shape)).exp()
    if attrs["causal"]:
        rows = P("arange", start=0, step=1, shape=(L,), dtype=dt.int64).reshape((L, 1)).expand((L, S))
        cols = P("arange", start=0, step=1, shape=(S,), dtype=dt.int64).reshape((1, S)).expand((L, S))
        keep = (cols <= rows).reshape((1,) * (s.ndim - 2) + (L, S)).expand(tuple(s.shape))
        p = P("where", keep, p, P("const", value=0.0, shape=tuple(s.shape), dtype=s.dtype))
    go, glse = _cols(gy, 0, E), _cols(gy, E, E + 1)
    dv = P("matmul", _t(p), go)
    dp = P("matmul", go, _t(v))
    d = (go * _cols(y, 0, E)).sum((go.ndim - 1,), keepdim=True) - glse
    ds = p * (dp - d.expand(dp.shape)) * attrs["scale"]
    return P("matmul", ds, k), P("matmul", _t(ds), q), dv


def _attention_vjp(g, q, k, v, out, attrs):
    from loom.autograd.grad_mode import is_grad_enabled
    if is_grad_enabled():  # A graph of the gradient is being built: write it with primitives.
        return _primitive_grad(q, k, v, out, g, attrs)
    packed = P("attention_grad", q, k, v, out, g, **attrs)
    L, S = q.shape[-2], k.shape[-2]
    n = packed.ndim
    parts = []
    for lo, hi in ((0, L), (L, L + S), (L + S, L + 2 * S)):
        parts.append(P("slice", packed, starts=(0,) * (n - 2) + (lo, 0),
                       stops=tuple(packed.shape[:-2]) + (hi, packed.shape[-1]), steps=(1,) * n))
    return tuple(parts)


def _grad_vjp(g, q, k, v, y, gy, out, attrs):
    raise AutogradError("loom.attention_grad: the fused attention gradient is not differentiable; its gradient "
                        "is built with primitives when the first gradient is taken with create_graph=True")


register("attention", "contraction", 3, _infer_attention, reference_attention, _attention_vjp,
         check_attrs=_attrs("attention"))
register("attention_grad", "contraction", 5, _infer_grad, reference_grad, _grad_vjp,
         check_attrs=_attrs("attention_grad"))
