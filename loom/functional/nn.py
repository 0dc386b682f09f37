"""Neural-network composites: linear maps, softmax, normalisation, dropout, embeddings, losses, attention.

Every op here follows `torch.nn.functional` (names, signatures, defaults, dtypes,
reductions) and is a decomposition into loom ops, so it stays lazy and
differentiable to any order. Activations live in `loom.functional.math`.
"""
from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from loom import dtypes as dt
from loom import autocast as _autocast
from loom.autocast import keep_op
from loom.autograd.function import Function
from loom.autograd.grad_mode import is_grad_enabled, no_grad
from loom.errors import DTypeError, LoomError, LoomIndexError, ShapeError, fmt_shape
from loom.functional import library_ops as _library_ops
from loom.functional.checks import check, check_index
from loom.runtime import realize as _realize
from loom.functional.linalg import matmul
from loom.functional.math import (
    abs as _abs, clamp_min, exp, hypot, log, log1p, logsigmoid, minimum, rsqrt, sigmoid, where,
)
from loom.functional.reduce import amax, amin, centre, scaled_pnorm
from loom.functional.shape import chunk, repeat_interleave
from loom.tensor import Tensor, _rand_node, apply, arange, broadcast_to, const, normalize_dim, tensor

_REDUCTIONS = ("none", "mean", "sum")


# ---------------------------------------------------------------- helpers

def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _need_float(op: str, x: Tensor, what: str = "input") -> None:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.{op}: expected a floating point {what}, got {x.dtype.name}{fmt_shape(x.shape)}")


def _need_int(op: str, x: Tensor, what: str = "target") -> None:
    if x.dtype.category != 1:
        raise DTypeError(f"loom.{op}: expected an integer {what} (class indices), got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")


def _reduction(op: str, size_average, reduce, reduction: str, extra: tuple[str, ...] = ()) -> str:
    """The reduction string, honouring PyTorch's deprecated size_average/reduce flags."""
    if size_average is not None or reduce is not None:
        sa = True if size_average is None else bool(size_average)
        rd = True if reduce is None else bool(reduce)
        reduction = "mean" if sa and rd else ("sum" if rd else "none")
    if reduction not in _REDUCTIONS + extra:
        raise ValueError(f"loom.{op}: {reduction!r} is not a valid value for reduction; expected one of "
                         + ", ".join(repr(r) for r in _REDUCTIONS + extra))
    return reduction


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _broadcast_pair(op: str, a: Tensor, b: Tensor, warn: bool = True) -> tuple[Tensor, Tensor]:
    from loom.functional.shape import broadcast_tensors
    if warn and tuple(a.shape) != tuple(b.shape):
        warnings.warn(f"loom.{op}: using a target size {fmt_shape(b.shape)} that is different to the input "
                      f"size {fmt_shape(a.shape)}; the two broadcast, which is likely not intended",
                      UserWarning, stacklevel=3)
    try:
        return broadcast_tensors(a, b)
    except ShapeError:
        raise ShapeError(f"loom.{op}: input {fmt_shape(a.shape)} and target {fmt_shape(b.shape)} cannot be "
                         "broadcast together") from None


def _same_shape(op: str, x: Tensor, t: Tensor, what: str = "target") -> None:
    if tuple(x.shape) != tuple(t.shape):
        raise ShapeError(f"loom.{op}: {what} of shape {fmt_shape(t.shape)} must have the input's shape "
                         f"{fmt_shape(x.shape)}")


def _channel_vec(op: str, name: str, v, c: int, x: Tensor) -> Tensor | None:
    """Check a per-channel (C,) tensor against the input's channel count."""
    if v is None:
        return None
    v = _t(v)
    if v.numel() != c:
        raise ShapeError(f"loom.{op}: {name} of shape {fmt_shape(v.shape)} has {v.numel()} elements but the "
                         f"input {fmt_shape(x.shape)} has {c} channels (dim 1)")
    return v


def _channel_view(v: Tensor, ndim: int) -> Tensor:
    """A (C,) tensor shaped to broadcast against (N, C, *)."""
    return v.reshape([1, v.numel()] + [1] * (ndim - 2))


def _pnorm(x: Tensor, p, dim, keepdim: bool = False) -> Tensor:
    """Vector p-norm whose gradient at an all-zero slice is zero (as PyTorch's), not NaN."""
    if p in (float("inf"), "inf"):
        return amax(_abs(x), dim, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(_abs(x), dim, keepdim)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    if p == 1:
        return _abs(x).sum(dim, keepdim)
    return scaled_pnorm(x, float(p), dim, keepdim)


def _floor_value(x: Tensor, low: float) -> Tensor:
    """x clamped below at `low` in value only; the gradient is that of x (PyTorch clamps these under no_grad)."""
    xd = x.detach()
    return x + (clamp_min(xd, low) - xd)


def _xlogy0(x: Tensor, y: Tensor) -> Tensor:
    """x * log(y) with 0 where x == 0, and finite gradients there."""
    zero = x == 0
    return where(zero, 0.0, x * log(where(zero, 1.0, y)))


def _realised_values(t: Tensor) -> np.ndarray | None:
    """The values of an already computed tensor, for call-time checks (never forces a run)."""
    return t._node.buffer if t.dtype is not dt.bfloat16 else None


def _update_running(buf: Tensor, new: Tensor, momentum: float) -> None:
    """running = (1 - momentum) * running + momentum * new, written into the buffer in place."""
    with no_grad():
        buf.copy_(buf.detach() * (1.0 - momentum) + new.detach().to(buf.dtype) * momentum)


# ---------------------------------------------------------------- linear maps

_TRANSPOSE = {"perm": (1, 0)}

def linear(input, weight, bias=None) -> Tensor:
    """y = input @ weight.T + bias.

    Parameters
    ----------
    input : Tensor of shape (*, in_features)
    weight : Tensor of shape (out_features, in_features) or (in_features,)
    bias : Tensor of shape (out_features,) or (), optional

    Examples
    --------
    >>> x, w = loom.ones(2, 3), loom.ones(4, 3)
    >>> loom.nn.functional.linear(x, w).shape
    loom.Size([2, 4])
    """
    input, weight, bias = _autocast.lower(input, weight, bias)
    x, w = _t(input), _t(weight)
    if w.ndim not in (1, 2):
        raise ShapeError(f"loom.linear: weight must be 1-d or 2-d (out_features, in_features), got "
                         f"{fmt_shape(w.shape)}")
    if x.ndim == 0 or x.shape[-1] != w.shape[-1]:
        raise ShapeError(f"loom.linear: input {fmt_shape(x.shape)} has {x.shape[-1] if x.ndim else 0} "
                         f"features in its last dim but weight {fmt_shape(w.shape)} expects "
                         f"in_features={w.shape[-1]}")
    xn, wn = x._node, w._node
    if len(xn.shape) == 2 and len(wn.shape) == 2 and xn.dtype is wn.dtype and xn.dtype.is_floating_point:
        # The common layer, built directly (its per-call cost is all of a small model's inference). The
        # transposed weight is a value only this product reads, never a view the user can write through:
        # a plain permute node, without the bookkeeping of `w.t()`'s alias.
        out = apply("matmul", (x, apply("permute", (w,), _TRANSPOSE)), {})
        if bias is None:
            return out
        b = _t(bias)
        bn, shape = b._node, out._node.shape
        if bn.dtype is xn.dtype and bn.device == xn.device and bn.shape == shape[1:]:
            row = apply("reshape", (b,), {"shape": (1, shape[1])})
            return apply("add", (out, row if shape[0] == 1 else apply("expand", (row,), {"shape": shape})), {})
        return out + b
    out = matmul(x, w.t() if w.ndim == 2 else w)
    if bias is not None:
        out = out + _t(bias)
    return out


@keep_op
def bilinear(input1, input2, weight, bias=None) -> Tensor:
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o].

    Examples
    --------
    >>> y = loom.nn.functional.bilinear(loom.ones(5, 2), loom.ones(5, 3), loom.ones(4, 2, 3))
    >>> y.shape
    loom.Size([5, 4])
    """
    a, b, w = _t(input1), _t(input2), _t(weight)
    if w.ndim != 3 or a.ndim == 0 or b.ndim == 0 or a.shape[-1] != w.shape[1] or b.shape[-1] != w.shape[2] \
            or tuple(a.shape[:-1]) != tuple(b.shape[:-1]):
        raise ShapeError(f"loom.bilinear: expected input1 (*, in1), input2 (*, in2) and weight "
                         f"(out, in1, in2), got {fmt_shape(a.shape)}, {fmt_shape(b.shape)} and "
                         f"{fmt_shape(w.shape)}")
    lead = tuple(a.shape[:-1])
    n = math.prod(lead)
    o, i1, i2 = w.shape
    t = matmul(a.reshape(n, i1), w.permute(1, 0, 2).reshape(i1, o * i2)).reshape(n, o, i2)
    y = (t * b.reshape(n, 1, i2)).sum(-1).reshape(lead + (o,))
    return y + _t(bias) if bias is not None else y


# ---------------------------------------------------------------- softmax family

def _softmax_input(op: str, input, dim, stacklevel, dtype) -> tuple[Tensor, int]:
    x = _t(input)
    if dtype is None and stacklevel is not None and not isinstance(stacklevel, int):
        dtype = stacklevel  # torch.softmax(x, dim, dtype) and Tensor.softmax(dim, dtype) pass it third.
    if dtype is not None:
        x = x.to(dtype)
    _need_float(op, x)
    if dim is None:
        warnings.warn(f"loom.{op}: implicit dimension choice is deprecated; pass dim", stacklevel=3)
        dim = 0 if x.ndim in (0, 1, 3) else 1
    return x, normalize_dim(dim, x.ndim, op)


def _shift(x: Tensor, d: int) -> Tensor:
    """x minus its detached max along d, so exp never overflows.

    An infinite max is subtracted too, as PyTorch does: a slice holding +inf, or
    all -inf, becomes NaN (softmax and log_softmax are undefined there), while
    -inf entries beside a finite max (masked logits) give probability 0.
    """
    return x - amax(x.detach(), d, keepdim=True)


def _empty_along(x: Tensor, d: int) -> bool:
    return x.ndim > 0 and x.shape[d] == 0


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed stably.

    Parameters
    ----------
    input : Tensor (floating point, or any dtype with `dtype` given)
    dim : int
    dtype : loom.dtype, optional; the input is cast to it first.

    Examples
    --------
    >>> loom.tensor([1.0, 1.0]).softmax(0).tolist()
    [0.5, 0.5]
    """
    x, d = _softmax_input("softmax", input, dim, _stacklevel, dtype)
    if _empty_along(x, d):
        return x.clone()
    if x.dtype in (dt.float16, dt.bfloat16):  # Sum in float32, as PyTorch: 1e5 terms overflow float16.
        return softmax(x.to(dt.float32), d).to(x.dtype)
    e = exp(_shift(x, d))
    return e / e.sum(d, keepdim=True)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """log(softmax(x)) along `dim`, computed as x - max - log(sum(exp(x - max))).

    Examples
    --------
    >>> loom.tensor([0.0, 0.0]).log_softmax(0).exp().tolist()
    [0.5, 0.5]
    """
    x, d = _softmax_input("log_softmax", input, dim, _stacklevel, dtype)
    if _empty_along(x, d):
        return x.clone()
    if x.dtype in (dt.float16, dt.bfloat16):  # As softmax.
        return log_softmax(x.to(dt.float32), d).to(x.dtype)
    s = _shift(x, d)
    return s - log(exp(s).sum(d, keepdim=True))


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """softmax(-x) along `dim`.

    Examples
    --------
    >>> loom.nn.functional.softmin(loom.tensor([0.0, 0.0]), 0).tolist()
    [0.5, 0.5]
    """
    x, d = _softmax_input("softmin", input, dim, _stacklevel, dtype)
    return softmax(-x, d)


def glu(input, dim: int = -1) -> Tensor:
    """Gated linear unit: a * sigmoid(b) where a, b are the halves of `input` along `dim`.

    Examples
    --------
    >>> loom.nn.functional.glu(loom.zeros(2, 4)).shape
    loom.Size([2, 2])
    """
    x = _t(input)
    _need_float("glu", x)
    if x.ndim == 0:
        raise ShapeError("loom.glu: glu does not support 0-d tensors")
    d = normalize_dim(dim, x.ndim, "glu")
    if x.shape[d] % 2:
        raise ShapeError(f"loom.glu: halving dimension must be even, but dim {d} of {fmt_shape(x.shape)} "
                         f"has size {x.shape[d]}")
    a, b = chunk(x, 2, d)
    return a * sigmoid(b)


# ---------------------------------------------------------------- normalisation


def _scale_shift(y: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
    """Per-channel affine step of batch/instance norm on (N, C, *) values."""
    if w is not None:
        y = y * _channel_view(w, y.ndim)
    if b is not None:
        y = y + _channel_view(b, y.ndim)
    return y

def _bn_train_reference(x: Tensor, w: Tensor, b: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Affine training-mode batch norm in primitives: (y, batch mean, biased batch variance)."""
    axes = (0,) + tuple(range(2, x.ndim))
    centred, mu = centre(x, axes)
    var = (centred * centred).mean(axes, keepdim=True)
    return _scale_shift(centred * rsqrt(var + eps), w, b), mu, var


class _BatchNormTrain(Function):
    """Affine training-mode batch norm with its backward in one reduction pass and one elementwise pass.

    Differentiating the primitives gives four reductions and two stored
    full-size intermediates per layer (the centring and the scaling each
    have their own adjoint); the closed form needs only sum(g) and
    sum(g * xhat), from which dx, dweight and dbias all follow. For
    higher-order gradients (``create_graph=True``) the backward is the
    primitives' own, so it is differentiable to any order.
    """

    @staticmethod
    def forward(ctx, x, w, b, eps):
        y, mu, var = _bn_train_reference(x, w, b, eps)
        invstd = rsqrt(var + eps)
        ctx.save_for_backward(x, w, b, mu, invstd)
        ctx.eps = eps
        ctx.mark_non_differentiable(mu, var)
        return y, mu, var

    @staticmethod
    def backward(ctx, gy, _gmu, _gvar):
        x, w, b, mu, invstd = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: the primitives' backward, itself differentiable.
            from loom.autograd.engine import grad
            y = _bn_train_reference(x, w, b, ctx.eps)[0]
            return (*grad([y], [x, w, b], [gy], create_graph=True, allow_unused=True), None)
        axes = (0,) + tuple(range(2, x.ndim))
        n = x.numel() // x.shape[1]
        xhat = (x - mu) * invstd
        sum_g = gy.sum(axes, keepdim=True)
        sum_gx = (gy * xhat).sum(axes, keepdim=True)
        dx = None
        if ctx.needs_input_grad[0]:
            dx = (_channel_view(w, x.ndim) * invstd) * (gy - sum_g * (1.0 / n) - xhat * (sum_gx * (1.0 / n)))
        return dx, sum_gx.reshape(w.shape), sum_g.reshape(b.shape), None


_LOW_FLOATS = (dt.float16, dt.bfloat16)


def _norm_in_float32(fn):
    """PyTorch's norms on a float16/bfloat16 input: computed in float32 (with float32 or low-precision
    parameters alike), the result in the input's dtype."""
    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):
        x = _t(input)
        if x.dtype not in _LOW_FLOATS:
            return fn(x, *args, **kwargs)
        return fn(x.to(dt.float32), *args, **kwargs).to(x.dtype)
    return wrapper


@_norm_in_float32
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over every dim but the channel dim 1 of (N, C, *).

    In training mode the batch statistics normalise (biased variance) and the
    running buffers are updated in place with the unbiased variance:
    ``running = (1 - momentum) * running + momentum * batch_stat``. In evaluation
    mode the running statistics normalise.

    Examples
    --------
    >>> x = loom.randn(8, 3)
    >>> rm, rv = loom.zeros(3), loom.ones(3)
    >>> y = loom.nn.functional.batch_norm(x, rm, rv, training=True)
    >>> y.shape
    loom.Size([8, 3])
    """
    x = _t(input)
    _need_float("batch_norm", x)
    if x.ndim < 2:
        raise ShapeError(f"loom.batch_norm: expected an input of shape (N, C, *), got {fmt_shape(x.shape)}")
    c = x.shape[1]
    rm = _channel_vec("batch_norm", "running_mean", running_mean, c, x)
    rv = _channel_vec("batch_norm", "running_var", running_var, c, x)
    w = _channel_vec("batch_norm", "weight", weight, c, x)
    b = _channel_vec("batch_norm", "bias", bias, c, x)
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        n = x.numel() // c if c else 0
        if n <= 1:
            raise ShapeError(f"loom.batch_norm: expected more than 1 value per channel when training, got "
                             f"input of shape {fmt_shape(x.shape)}")
        if w is not None and b is not None and w.dtype == b.dtype == x.dtype:
            y, mu, var = _BatchNormTrain.apply(x, w, b, eps)
            if rm is not None:
                _update_running(rm, mu.reshape(c), momentum)
            if rv is not None:
                _update_running(rv, var.reshape(c) * (n / (n - 1)), momentum)
            return y
        centred, mu = centre(x, axes)
        var = (centred * centred).mean(axes, keepdim=True)
        if rm is not None:
            _update_running(rm, mu.reshape(c), momentum)
        if rv is not None:
            _update_running(rv, var.reshape(c) * (n / (n - 1)), momentum)
    else:
        if rm is None or rv is None:
            raise LoomError("loom.batch_norm: running_mean and running_var must be given in evaluation "
                            "mode (training=False)")
        centred = x - _channel_view(rm, x.ndim).to(x.dtype)
        var = _channel_view(rv, x.ndim).to(x.dtype)
    return _scale_shift(centred * rsqrt(var + eps), w, b)


@_norm_in_float32
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) slice of (N, C, *) over its spatial dims.

    With `use_input_stats` and running buffers given, the buffers are updated in
    place with the batch average of the per-instance statistics (unbiased variance).

    Examples
    --------
    >>> loom.nn.functional.instance_norm(loom.randn(2, 3, 5)).shape
    loom.Size([2, 3, 5])
    """
    x = _t(input)
    _need_float("instance_norm", x)
    if x.ndim < 3:
        raise ShapeError(f"loom.instance_norm: expected an input of shape (N, C, *) with spatial dims, got "
                         f"{fmt_shape(x.shape)}")
    c = x.shape[1]
    rm = _channel_vec("instance_norm", "running_mean", running_mean, c, x)
    rv = _channel_vec("instance_norm", "running_var", running_var, c, x)
    w = _channel_vec("instance_norm", "weight", weight, c, x)
    b = _channel_vec("instance_norm", "bias", bias, c, x)
    axes = tuple(range(2, x.ndim))
    if use_input_stats:
        n = math.prod(x.shape[2:])
        if n <= 1:
            raise ShapeError(f"loom.instance_norm: expected more than 1 spatial element when training, got "
                             f"input of shape {fmt_shape(x.shape)}")
        centred, mu = centre(x, axes)
        var = (centred * centred).mean(axes, keepdim=True)
        if rm is not None:
            _update_running(rm, mu.reshape(x.shape[0], c).mean(0), momentum)
        if rv is not None:
            _update_running(rv, var.reshape(x.shape[0], c).mean(0) * (n / (n - 1)), momentum)
    else:
        if rm is None or rv is None:
            raise LoomError("loom.instance_norm: running_mean and running_var must be given when "
                            "use_input_stats=False")
        centred = x - _channel_view(rm, x.ndim).to(x.dtype)
        var = _channel_view(rv, x.ndim).to(x.dtype)
    return _scale_shift(centred * rsqrt(var + eps), w, b)


def _trailing_shape(op: str, x: Tensor, normalized_shape) -> tuple[int, ...]:
    ns = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else \
        tuple(int(s) for s in normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != ns:
        raise ShapeError(f"loom.{op}: normalized_shape {list(ns)} does not match the trailing dims of the "
                         f"input {fmt_shape(x.shape)}; expected an input of shape [*, "
                         + ", ".join(str(s) for s in ns) + "]")
    return ns


def _affine_trailing(op: str, y: Tensor, ns: tuple[int, ...], weight, bias) -> Tensor:
    for name, v in (("weight", weight), ("bias", bias)):
        if v is None:
            continue
        v = _t(v)
        if tuple(v.shape) != ns:
            raise ShapeError(f"loom.{op}: {name} of shape {fmt_shape(v.shape)} must have the normalized "
                             f"shape {fmt_shape(ns)}")
        y = y * v if name == "weight" else y + v
    return y


def _fused_layer_norm(x: Tensor, ns: tuple[int, ...], weight, bias, eps: float) -> Tensor | None:
    """layer_norm through the ``layer_norm`` row primitive, or None where the decomposition serves."""
    n = math.prod(ns)
    params = [None if v is None else _t(v) for v in (weight, bias)]
    if not _library_ops.enabled() or x.dtype not in (dt.float32, dt.float64) or n == 0 or not math.isfinite(eps) or \
            eps < 0 or \
            any(v is not None and (tuple(v.shape) != ns or v.dtype is not x.dtype) for v in params):
        return None
    w, b = (const(float(fill), (n,), x.dtype) if v is None else v.reshape(n) for v, fill in zip(params, (1, 0)))
    y = apply("layer_norm", (x.reshape(tuple(x.shape[:x.ndim - len(ns)]) + (n,)), w, b), {"eps": float(eps)})
    return y.reshape(x.shape)


@_norm_in_float32
def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing `normalized_shape` dims (biased variance), then scale and shift.

    Examples
    --------
    >>> y = loom.nn.functional.layer_norm(loom.randn(2, 5), (5,))
    >>> abs(y.mean(-1)).max().item() < 1e-5
    True
    """
    x = _t(input)
    _need_float("layer_norm", x)
    ns = _trailing_shape("layer_norm", x, normalized_shape)
    fused = _fused_layer_norm(x, ns, weight, bias, eps)
    if fused is not None:
        return fused
    axes = tuple(range(x.ndim - len(ns), x.ndim))
    centred, _ = centre(x, axes)
    var = (centred * centred).mean(axes, keepdim=True)
    return _affine_trailing("layer_norm", centred * rsqrt(var + eps), ns, weight, bias)


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the trailing dims, times `weight`; eps defaults to the dtype's epsilon.

    Examples
    --------
    >>> loom.nn.functional.rms_norm(loom.ones(2, 4), [4]).tolist()[0]
    [1.0, 1.0, 1.0, 1.0]
    """
    x = _t(input)
    _need_float("rms_norm", x)
    ns = _trailing_shape("rms_norm", x, normalized_shape)
    if eps is None:
        eps = 2.0 ** -7 if x.dtype is dt.bfloat16 else float(np.finfo(x.dtype.np).eps)
    if x.dtype in _LOW_FLOATS:  # In float32, the result in the input's dtype, as the other norms.
        return rms_norm(x.to(dt.float32), normalized_shape, weight, eps).to(x.dtype)
    axes = tuple(range(x.ndim - len(ns), x.ndim))
    y = x * rsqrt((x * x).mean(axes, keepdim=True) + eps)
    return _affine_trailing("rms_norm", y, ns, weight, None)


@_norm_in_float32
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise (N, C, *) over groups of C // num_groups channels and the spatial dims.

    Examples
    --------
    >>> loom.nn.functional.group_norm(loom.randn(2, 4, 3), 2).shape
    loom.Size([2, 4, 3])
    """
    x = _t(input)
    _need_float("group_norm", x)
    if x.ndim < 2:
        raise ShapeError(f"loom.group_norm: expected an input of shape (N, C, *), got {fmt_shape(x.shape)}")
    n, c = x.shape[0], x.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise ShapeError(f"loom.group_norm: expected the number of channels {c} of input "
                         f"{fmt_shape(x.shape)} to be divisible by num_groups={num_groups}")
    w = _channel_vec("group_norm", "weight", weight, c, x)
    b = _channel_vec("group_norm", "bias", bias, c, x)
    g = x.reshape(n, num_groups, (c // num_groups) * math.prod(x.shape[2:]))
    centred, _ = centre(g, -1)
    var = (centred * centred).mean(-1, keepdim=True)
    y = (centred * rsqrt(var + eps)).reshape(tuple(x.shape))
    if w is not None:
        y = y * _channel_view(w, x.ndim)
    if b is not None:
        y = y + _channel_view(b, x.ndim)
    return y


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """input / max(||input||_p, eps) along `dim`.

    Examples
    --------
    >>> loom.nn.functional.normalize(loom.tensor([[3.0, 4.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    x = _t(input)
    _need_float("normalize", x)
    d = normalize_dim(dim, x.ndim, "normalize")
    y = x / clamp_min(_pnorm(x, p, d, keepdim=True), eps)
    if out is not None:
        return out.copy_(y)
    return y


# ---------------------------------------------------------------- dropout

def _check_p(op: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"loom.{op}: dropout probability has to be between 0 and 1, but got {p}")


def _masked(op: str, x: Tensor, p: float, mask_shape, alpha: bool) -> Tensor:
    """x times a keep-mask of `mask_shape` (kept with probability 1 - p), rescaled to keep the statistics."""
    _need_float(op, x)
    if p == 1.0:
        return x * 0.0
    keep = (_rand_node(tuple(mask_shape), x.dtype, None) >= p).to(x.dtype)
    if not alpha:
        return x * (keep * (1.0 / (1.0 - p)))
    # SELU-preserving: dropped units take the negative saturation value, then an affine map
    # restores zero mean and unit variance.
    alpha_p = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha_p * alpha_p * p + 1.0) * (1.0 - p))
    return x * (keep * a) + ((keep - 1.0) * (alpha_p * a) + alpha_p * a * p)


def _dropout_impl(op: str, input, p: float, training: bool, inplace: bool, mask_shape_fn, alpha: bool):
    _check_p(op, p)
    x = _t(input)
    if not training or p == 0.0:
        return x
    if inplace:
        return x._inplace(op + "_", lambda s: _masked(op, s, p, mask_shape_fn(s), alpha))
    return _masked(op, x, p, mask_shape_fn(x), alpha)


def _elementwise_mask(x: Tensor):
    return tuple(x.shape)


def _feature_mask(op: str, batched_ndim: int, unbatched_ok: bool):
    """Mask shape for channel dropout: one draw per (sample, channel)."""
    def shape(x: Tensor):
        if x.ndim == batched_ndim:
            return tuple(x.shape[:2]) + (1,) * (x.ndim - 2)
        if unbatched_ok and x.ndim == batched_ndim - 1:
            return tuple(x.shape[:1]) + (1,) * (x.ndim - 1)
        if batched_ndim < 0 and x.ndim >= 2:
            return tuple(x.shape[:2]) + (1,) * (x.ndim - 2)
        want = f"{batched_ndim - 1}-d or {batched_ndim}-d" if unbatched_ok else f"{batched_ndim}-d"
        raise ShapeError(f"loom.{op}: expected a {want} input, got {fmt_shape(x.shape)}")
    return shape


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p).

    Uses loom's counter-based random numbers, so `loom.manual_seed` makes it
    reproducible. Identity when `training` is False or p is 0.

    Examples
    --------
    >>> loom.nn.functional.dropout(loom.ones(4), 0.5, training=False).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    return _dropout_impl("dropout", input, p, training, inplace, _elementwise_mask, False)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, L) or (C, L) with probability p.

    Examples
    --------
    >>> loom.nn.functional.dropout1d(loom.ones(2, 3, 4), training=False).shape
    loom.Size([2, 3, 4])
    """
    return _dropout_impl("dropout1d", input, p, training, inplace, _feature_mask("dropout1d", 3, True), False)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, H, W) with probability p (a 3-d input is read as (N, C, L), as PyTorch).

    Examples
    --------
    >>> loom.nn.functional.dropout2d(loom.ones(2, 3, 4, 4), training=False).shape
    loom.Size([2, 3, 4, 4])
    """
    return _dropout_impl("dropout2d", input, p, training, inplace, _feature_mask("dropout2d", -1, False), False)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) with probability p.

    Examples
    --------
    >>> loom.nn.functional.dropout3d(loom.ones(1, 2, 2, 2, 2), training=False).shape
    loom.Size([1, 2, 2, 2, 2])
    """
    return _dropout_impl("dropout3d", input, p, training, inplace, _feature_mask("dropout3d", 5, True), False)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Dropout that keeps the zero mean and unit variance of SELU activations.

    Examples
    --------
    >>> loom.nn.functional.alpha_dropout(loom.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """
    return _dropout_impl("alpha_dropout", input, p, training, inplace, _elementwise_mask, True)


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels of (N, C, *).

    Examples
    --------
    >>> loom.nn.functional.feature_alpha_dropout(loom.ones(2, 3, 4)).shape
    loom.Size([2, 3, 4])
    """
    return _dropout_impl("feature_alpha_dropout", input, p, training, inplace,
                         _feature_mask("feature_alpha_dropout", -1, False), True)


# ---------------------------------------------------------------- embeddings

def embedding(input, weight, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of `weight` selected by the integer tensor `input`: output shape input.shape + (dim,).

    The row at `padding_idx` gets no gradient. With `max_norm`, the referenced
    rows of `weight` whose `norm_type`-norm exceeds it are rescaled in place
    first (as PyTorch). `sparse` is accepted; the gradient is always dense.

    Examples
    --------
    >>> w = loom.arange(6, dtype=loom.float32).reshape(3, 2)
    >>> loom.nn.functional.embedding(loom.tensor([2, 0]), w).tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    idx, w = _t(input), _t(weight)
    if idx.dtype.category != 1:
        raise DTypeError(f"loom.embedding: expected an integer index tensor, got "
                         f"{idx.dtype.name}{fmt_shape(idx.shape)}")
    if w.ndim != 2:
        raise ShapeError(f"loom.embedding: weight must be 2-d (num_embeddings, embedding_dim), got "
                         f"{fmt_shape(w.shape)}")
    v, d = w.shape
    if padding_idx is not None:
        if not -v <= padding_idx < v:
            raise LoomIndexError(f"loom.embedding: padding_idx {padding_idx} must be within num_embeddings {v}")
        padding_idx %= v
    idx = check_index(idx, "embedding", v, f"weight {fmt_shape(w.shape)} with {v} rows", out_of="range")
    flat = idx.reshape(-1).to(dt.int64)
    n = flat.shape[0]
    if max_norm is not None:
        _embedding_renorm(w, flat, max_norm, norm_type)
    rows = apply("gather", (w, flat.reshape(n, 1).expand(n, d)), {"axis": 0})
    if padding_idx is not None:
        rows = where((flat != padding_idx).reshape(n, 1), rows, rows.detach())
    if scale_grad_by_freq and n:
        ones = const(1.0, (n,), w.dtype)
        counts = apply("scatter_add", (const(0.0, (v,), w.dtype), flat, ones), {"axis": 0})
        inv = 1.0 / apply("gather", (counts, flat), {"axis": 0})
        rows = rows.detach() + (rows - rows.detach()) * inv.reshape(n, 1)
    return rows.reshape(tuple(idx.shape) + (d,))


def _embedding_renorm(w: Tensor, flat: Tensor, max_norm: float, norm_type: float) -> None:
    """Rescale, in place, the rows referenced by `flat` whose norm exceeds max_norm."""
    v = w.shape[0]
    with no_grad():
        wd = w.detach()
        n = flat.shape[0]
        hits = apply("scatter_add", (const(0.0, (v,), wd.dtype), flat, const(1.0, (n,), wd.dtype)), {"axis": 0})
        norms = _pnorm(wd, norm_type, 1, keepdim=True)
        scale = where((hits.reshape(v, 1) > 0) & (norms > max_norm), max_norm / (norms + 1e-7), 1.0)
        w.copy_(wd * scale)


# ---------------------------------------------------------------- classification losses

class _Targets:
    """Class-index targets checked against an (N, C, *) or (C,) input, with ignored entries made safe."""

    def __init__(self, op: str, x: Tensor, target: Tensor, weight, ignore_index: int) -> None:
        if x.ndim == 0:
            raise ShapeError(f"loom.{op}: input must have at least 1 dim (C,) or (N, C, *), got a 0-d tensor")
        _need_int(op, target)
        self.unbatched = x.ndim == 1
        self.class_dim = 0 if self.unbatched else 1
        c = x.shape[self.class_dim]
        want = () if self.unbatched else (x.shape[0],) + tuple(x.shape[2:])
        if tuple(target.shape) != want:
            if not self.unbatched and target.ndim >= 1 and target.shape[0] != x.shape[0]:
                raise ShapeError(f"loom.{op}: expected input batch size ({x.shape[0]}) to match target batch "
                                 f"size ({target.shape[0]}); input {fmt_shape(x.shape)}, target "
                                 f"{fmt_shape(target.shape)}")
            raise ShapeError(f"loom.{op}: expected a class-index target of shape {fmt_shape(want)} for input "
                             f"{fmt_shape(x.shape)} (classes in dim {self.class_dim}), got "
                             f"{fmt_shape(target.shape)}")
        if weight is not None:
            weight = _t(weight)
            if tuple(weight.shape) != (c,):
                raise ShapeError(f"loom.{op}: weight of shape {fmt_shape(weight.shape)} must have one entry "
                                 f"per class, shape ({c},)")
        if target._node.buffer is None and _realize.active_trace is None and target._ctx is None:
            # An eager target still pending (a reshape of the labels): its value now, as PyTorch would have it,
            # so the check runs once here and the loss can skip the mask below.
            _realize.realize_barrier([target._node])
        target = check(target, op, f"loom.{op}: target {{value}} is out of bounds for {c} classes (input "
                       f"{fmt_shape(x.shape)}); expected 0 <= target < {c} or target == ignore_index "
                       f"({ignore_index})", low=0, high=c, ignore=ignore_index)
        self.c = c
        self.weight = weight
        self._target, self._ignore = target, ignore_index
        buf = target._node.buffer
        # An eager target with no ignored entry (the usual case): no mask is needed, every weight is one.
        self.all_valid = (buf is not None and _realize.active_trace is None and target.numel() < 1 << 24
                          and not np.any(np.asarray(buf) == ignore_index))
        self._valid = None
        if self.all_valid:
            self.safe = target.to(dt.int64)
        else:
            v = target != ignore_index
            self.safe = where(v, target, 0).to(dt.int64)
            self._valid = v.reshape(1) if self.unbatched else v
        if self.unbatched:
            self.safe = self.safe.reshape(1)

    @property
    def valid(self) -> Tensor:
        """Where the target is not ignored (made when first asked for)."""
        if self._valid is None:
            v = self._target != self._ignore
            self._valid = v.reshape(1) if self.unbatched else v
        return self._valid

    def weights(self, dtype) -> Tensor:
        """The weight of each target (0 where ignored)."""
        if self.weight is None:
            return self.valid.to(dtype)
        w = apply("gather", (self.weight.to(dtype), self.safe.reshape(-1)), {"axis": 0})
        return where(self.valid, w.reshape(tuple(self.safe.shape)), 0.0)

    def finish(self, loss: Tensor) -> Tensor:
        return loss.reshape(()) if self.unbatched else loss


def _nll(tg: _Targets, logp: Tensor, reduction: str, logits: bool = False) -> tuple[Tensor, Tensor]:
    """Reduced negative log likelihood of the targets, and the per-target weights.

    With `logits`, `logp` holds logits (N, C) and log_softmax + NLL run as one row primitive."""
    x = logp.reshape((1,) + tuple(logp.shape)) if tg.unbatched else logp
    if logits:
        nll = apply("cross_entropy_rows", (x, tg.safe), {})
    else:
        nll = -apply("gather", (x, tg.safe.unsqueeze(1)), {"axis": 1}).squeeze(1)
    if tg.all_valid and tg.weight is None and x.dtype in (dt.float32, dt.float64):
        # Every weight is one: nll * 1 is nll, and the weights sum to the count (exact below 2**24).
        if reduction == "none":
            return tg.finish(nll), None
        if reduction == "sum":
            return nll.sum(), None
        return nll.sum() / float(math.prod(nll.shape)), None
    wt = tg.weights(x.dtype)
    loss = where(tg.valid, nll * wt, 0.0)
    if reduction == "none":
        return tg.finish(loss), wt
    if reduction == "sum":
        return loss.sum(), wt
    return loss.sum() / wt.sum(), wt


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean") -> Tensor:
    """Negative log likelihood of class-index targets given log-probabilities (N, C, *) or (C,).

    `mean` divides by the total weight of the non-ignored targets (NaN when every
    target is ignored, as PyTorch).

    Examples
    --------
    >>> logp = loom.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    >>> loom.nn.functional.nll_loss(logp, loom.tensor([0, 1])).item()
    2.5
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    _need_float("nll_loss", x)
    return _nll(_Targets("nll_loss", x, t, weight, ignore_index), x, reduction)[0]


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy between logits (N, C, *) or (C,) and class indices or class probabilities.

    Integer targets of shape (N, *) are class indices (with `weight`,
    `ignore_index` and NLL's mean); a float target of the input's shape holds
    class probabilities (mean over the N * prod(*) positions). `label_smoothing`
    mixes the target with the uniform distribution, as PyTorch.

    Examples
    --------
    >>> logits = loom.zeros(2, 4)
    >>> round(loom.nn.functional.cross_entropy(logits, loom.tensor([1, 3])).item(), 4)
    1.3863
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    _need_float("cross_entropy", x)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"loom.cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if x.ndim == 0:
        raise ShapeError("loom.cross_entropy: input must have at least 1 dim (C,) or (N, C, *), got a 0-d tensor")
    cd = 0 if x.ndim == 1 else 1
    c = x.shape[cd]
    if (_library_ops.enabled() and x.ndim == 2 and c > 0 and not t.dtype.is_floating_point and label_smoothing <= 0
            and x.dtype in (dt.float32, dt.float64)):
        tg = _Targets("cross_entropy", x, t, weight, ignore_index)
        return _nll(tg, x, reduction, logits=True)[0]
    logp = log_softmax(x, cd)
    w_view = None
    if weight is not None:
        weight = _t(weight)
        if tuple(weight.shape) != (c,):
            raise ShapeError(f"loom.cross_entropy: weight of shape {fmt_shape(weight.shape)} must have one entry "
                             f"per class, shape ({c},)")
        w_view = weight.reshape((c,) + (1,) * (x.ndim - 1 - cd)).to(x.dtype)
    if t.dtype.is_floating_point:
        if tuple(t.shape) != tuple(x.shape):
            raise ShapeError(f"loom.cross_entropy: a class-probability (float) target must have the input's "
                             f"shape {fmt_shape(x.shape)}, got {fmt_shape(t.shape)}; pass integer class "
                             "indices for a target without the class dim")
        if label_smoothing > 0:
            t = t * (1.0 - label_smoothing) + label_smoothing / c
        terms = logp * t if w_view is None else logp * t * w_view
        per = -terms.sum(cd)
        if reduction == "none":
            return per
        if reduction == "sum":
            return per.sum()
        return per.sum() / (x.numel() // c) if x.numel() else per.sum() * float("nan")
    tg = _Targets("cross_entropy", x, t, weight, ignore_index)
    nll, wt = _nll(tg, logp, reduction)
    if label_smoothing <= 0:
        return nll
    per_class = logp if w_view is None else logp * w_view
    smooth = -per_class.sum(cd)
    valid = tg.valid.reshape(()) if tg.unbatched else tg.valid
    smooth = where(valid, smooth, 0.0)
    if reduction == "mean":
        smooth = smooth.sum() / (wt if wt is not None else tg.weights(logp.dtype)).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return nll * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _bce_log(q: Tensor, value: Tensor) -> Tensor:
    """A log term of binary_cross_entropy: `value` (log q, computed accurately by the caller) clamped at
    -100, with gradient 1 / max(q, 1e-12) as PyTorch's (which clamps p(1 - p) at 1e-12), so p = 0 or 1
    (a saturated sigmoid) gives a finite gradient, not the NaN of the clamped log's unused branch."""
    eps = 1e-12
    qs = where(q < eps, q - q.detach() + eps, q)  # max(q, eps) in value, slope 1 everywhere.
    lq = log(qs)
    return lq + (clamp_min(value.detach(), -100.0) - lq.detach())


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """-(t log(x) + (1 - t) log(1 - x)) for probabilities x, each log clamped to >= -100 (as PyTorch).

    Examples
    --------
    >>> p = loom.tensor([0.5, 0.5])
    >>> round(loom.nn.functional.binary_cross_entropy(p, loom.tensor([1.0, 0.0])).item(), 4)
    0.6931
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("binary_cross_entropy", size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    _need_float("binary_cross_entropy", x)
    _same_shape("binary_cross_entropy", x, t)
    x = check(x, "binary_cross_entropy", "loom.binary_cross_entropy: all elements of input should be between "
              "0 and 1, got {value}", low=0.0, high=1.0, closed=True, error="value")
    xd = x.detach()
    loss = -(t * _bce_log(x, log(xd)) + (1.0 - t) * _bce_log(1.0 - x, log1p(-xd)))
    if weight is not None:
        loss = loss * _t(weight)
    return _reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """Binary cross entropy of sigmoid(input), in the stable form (1 - t) x - w_pos log(sigmoid(x)).

    `pos_weight` multiplies the positive term and broadcasts along the last dim.

    Examples
    --------
    >>> z = loom.zeros(2)
    >>> round(loom.nn.functional.binary_cross_entropy_with_logits(z, loom.tensor([1.0, 0.0])).item(), 4)
    0.6931
    """
    input, target, weight, pos_weight = _autocast.full(input, target, weight, pos_weight)
    reduction = _reduction("binary_cross_entropy_with_logits", size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    _need_float("binary_cross_entropy_with_logits", x)
    _same_shape("binary_cross_entropy_with_logits", x, t)
    ls = logsigmoid(x)
    if pos_weight is not None:
        loss = (1.0 - t) * x - ((_t(pos_weight) - 1.0) * t + 1.0) * ls
    else:
        loss = (1.0 - t) * x - ls
    if weight is not None:
        loss = loss * _t(weight)
    return _reduce_loss(loss, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Pointwise KL divergence t (log t - input) for log-probabilities `input`.

    `reduction='batchmean'` divides the sum by the batch size (the true KL
    divergence); `log_target` says the target is given as log-probabilities.

    Examples
    --------
    >>> logq = loom.tensor([0.5, 0.5]).log()
    >>> loom.nn.functional.kl_div(logq, loom.tensor([0.5, 0.5]), reduction="sum").item()
    0.0
    """
    input, target = _autocast.full(input, target)
    reduction = _reduction("kl_div", size_average, reduce, reduction, extra=("batchmean",))
    x, t = _t(input), _t(target)
    _need_float("kl_div", x)
    loss = exp(t) * (t - x) if log_target else _xlogy0(t, t) - t * x
    if reduction == "batchmean":
        return loss.sum() / x.shape[0] if x.ndim else loss.sum()
    return _reduce_loss(loss, reduction)


# ---------------------------------------------------------------- regression losses

def _weighted(op: str, loss: Tensor, x: Tensor, weight, reduction: str, mean_by_weight: bool) -> Tensor:
    if weight is None:
        return _reduce_loss(loss, reduction)
    w = _t(weight)
    if tuple(w.shape) != tuple(x.shape):
        raise ShapeError(f"loom.{op}: weight of shape {fmt_shape(w.shape)} must have the input's shape "
                         f"{fmt_shape(x.shape)}")
    loss = loss * w
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / w.sum()
    return _reduce_loss(loss, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None) -> Tensor:
    """(input - target)^2, reduced; with `weight`, `mean` divides by the sum of the weights.

    Examples
    --------
    >>> loom.nn.functional.mse_loss(loom.tensor([1.0, 3.0]), loom.tensor([0.0, 0.0])).item()
    5.0
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    x, t = _broadcast_pair("mse_loss", _t(input), _t(target))
    diff = x - t
    return _weighted("mse_loss", diff * diff, _t(input), weight, reduction, True)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None) -> Tensor:
    """|input - target|, reduced; with `weight`, `mean` divides by the sum of the weights.

    Examples
    --------
    >>> loom.nn.functional.l1_loss(loom.tensor([1.0, -3.0]), loom.tensor([0.0, 0.0])).item()
    2.0
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("l1_loss", size_average, reduce, reduction)
    x, t = _broadcast_pair("l1_loss", _t(input), _t(target))
    return _weighted("l1_loss", _abs(x - t), _t(input), weight, reduction, True)


def _huber(d: Tensor, delta: float) -> Tensor:
    a = _abs(d)
    return where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta=0 is the L1 loss.

    Examples
    --------
    >>> loom.nn.functional.smooth_l1_loss(loom.tensor([0.5, 3.0]), loom.zeros(2), reduction="sum").item()
    2.625
    """
    input, target = _autocast.full(input, target)
    reduction = _reduction("smooth_l1_loss", size_average, reduce, reduction)
    if beta < 0:
        raise ValueError(f"loom.smooth_l1_loss: beta must be non-negative, got {beta}")
    x, t = _broadcast_pair("smooth_l1_loss", _t(input), _t(target))
    d = x - t
    loss = _abs(d) if beta == 0 else _huber(d, beta) / beta
    return _reduce_loss(loss, reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); `weight` scales each element.

    Examples
    --------
    >>> loom.nn.functional.huber_loss(loom.tensor([0.5, 3.0]), loom.zeros(2), reduction="sum").item()
    2.625
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("huber_loss", None, None, reduction)
    if delta <= 0:
        raise ValueError(f"loom.huber_loss: delta must be positive, got {delta}")
    x, t = _broadcast_pair("huber_loss", _t(input), _t(target))
    return _weighted("huber_loss", _huber(x - t, delta), _t(input), weight, reduction, False)


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """Poisson negative log likelihood: exp(x) - t x (log_input) or x - t log(x + eps).

    Examples
    --------
    >>> loom.nn.functional.poisson_nll_loss(loom.zeros(2), loom.ones(2)).item()
    1.0
    """
    input, target = _autocast.full(input, target)
    reduction = _reduction("poisson_nll_loss", size_average, reduce, reduction)
    x, t = _t(input), _t(target)
    loss = exp(x) - t * x if log_input else x - t * log(x + eps)
    if full:
        tt = where(t > 1, t, 1.0)
        stirling = tt * log(tt) - tt + 0.5 * log(tt * (2.0 * math.pi))
        loss = loss + where(t > 1, stirling, 0.0)
    return _reduce_loss(loss, reduction)


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """0.5 (log(var) + (input - target)^2 / var), with var clamped to >= eps in value.

    `var` has the input's shape, or it with the last dim dropped or set to 1
    (one variance per sample), or is a float.

    Examples
    --------
    >>> loom.nn.functional.gaussian_nll_loss(loom.zeros(2), loom.zeros(2), loom.ones(2)).item()
    0.0
    """
    input, target, var = _autocast.full(input, target, var)
    reduction = _reduction("gaussian_nll_loss", None, None, reduction)
    x, t = _t(input), _t(target)
    v = var if isinstance(var, Tensor) else const(float(var), tuple(x.shape), x.dtype)
    if tuple(v.shape) != tuple(x.shape):
        if x.ndim and tuple(x.shape[:-1]) == tuple(v.shape):
            v = v.unsqueeze(-1)
        elif not (x.ndim and v.ndim == x.ndim and tuple(x.shape[:-1]) == tuple(v.shape[:-1])
                  and v.shape[-1] == 1):
            raise ShapeError(f"loom.gaussian_nll_loss: var of shape {fmt_shape(v.shape)} does not fit input "
                             f"{fmt_shape(x.shape)}")
    vals = _realised_values(v)
    if vals is not None and (vals < 0).any():
        raise ValueError("loom.gaussian_nll_loss: var has negative entries")
    v = _floor_value(v, eps)
    d = x - t
    loss = (log(v) + d * d / v) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce_loss(loss, reduction)


# ---------------------------------------------------------------- similarity and margin losses

def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between x1 and x2 along `dim` (inputs broadcast); norms floored at eps.

    Examples
    --------
    >>> loom.nn.functional.cosine_similarity(loom.tensor([[1.0, 0.0]]), loom.tensor([[1.0, 1.0]])).tolist()
    [0.7071067690849304]
    """
    a, b = _broadcast_pair("cosine_similarity", _t(x1), _t(x2), warn=False)
    d = dt.result_type(a, b)
    if not d.is_floating_point:
        d = dt.get_default_dtype()
    a, b = a.to(d), b.to(d)
    k = normalize_dim(dim, a.ndim, "cosine_similarity")
    na = _floor_value(_pnorm(a, 2, k, keepdim=True), eps)
    nb = _floor_value(_pnorm(b, 2, k, keepdim=True), eps)
    return ((a / na) * (b / nb)).sum(k)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim.

    Examples
    --------
    >>> round(loom.nn.functional.pairwise_distance(loom.tensor([[3.0, 0.0]]), loom.tensor([[0.0, 4.0]])).item(), 3)
    5.0
    """
    a, b = _t(x1), _t(x2)
    diff = a - b + eps
    if diff.ndim == 0:
        return _pnorm(diff, p, None, keepdim)
    return _pnorm(diff, p, diff.ndim - 1, keepdim)


def _same_rank(op: str, *ts: Tensor) -> None:
    if len({t.ndim for t in ts}) != 1:
        raise ShapeError(f"loom.{op}: all inputs must have the same number of dims, got "
                         + ", ".join(fmt_shape(t.shape) for t in ts))


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(0, -target * (input1 - input2) + margin).

    Examples
    --------
    >>> f = loom.nn.functional.margin_ranking_loss
    >>> f(loom.tensor([1.0]), loom.tensor([2.0]), loom.tensor([1.0])).item()
    1.0
    """
    input1, input2, target = _autocast.full(input1, input2, target)
    reduction = _reduction("margin_ranking_loss", size_average, reduce, reduction)
    a, b, y = _t(input1), _t(input2), _t(target)
    _same_rank("margin_ranking_loss", a, b, y)
    return _reduce_loss(clamp_min(-y * (a - b) + margin, 0.0), reduction)


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """x where target is 1, max(0, margin - x) where target is -1.

    Examples
    --------
    >>> f = loom.nn.functional.hinge_embedding_loss
    >>> f(loom.tensor([0.3, 0.3]), loom.tensor([1.0, -1.0]), reduction="sum").item()
    1.0
    """
    input, target = _autocast.full(input, target)
    reduction = _reduction("hinge_embedding_loss", size_average, reduce, reduction)
    x, y = _t(input), _t(target)
    loss = where(y != 1, clamp_min(margin - x, 0.0), 0.0) + where(y != -1, x, 0.0)
    return _reduce_loss(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where target is -1.

    Examples
    --------
    >>> f = loom.nn.functional.cosine_embedding_loss
    >>> round(f(loom.tensor([[1.0, 0.0]]), loom.tensor([[1.0, 0.0]]), loom.tensor([1.0])).item(), 5)
    0.0
    """
    input1, input2, target = _autocast.full(input1, input2, target)
    reduction = _reduction("cosine_embedding_loss", size_average, reduce, reduction)
    a, b, y = _t(input1), _t(input2), _t(target)
    if a.ndim not in (1, 2) or tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"loom.cosine_embedding_loss: expected two inputs of one shape (N, D) or (D,), got "
                         f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    k = a.ndim - 1
    # cos = a.b / sqrt((|a|^2 + 1e-12)(|b|^2 + 1e-12)) (PyTorch's), each factor as hypot(|a|, 1e-6) of a
    # scaled norm and divided in before the sum, so no square or product overflows (|a| = 1e20 is fine).
    na = hypot(scaled_pnorm(a, 2.0, k, True), const(1e-6, (), a.dtype))
    nb = hypot(scaled_pnorm(b, 2.0, k, True), const(1e-6, (), b.dtype))
    cos = ((a / na) * (b / nb)).sum(k)
    loss = where(y == 1, 1.0 - cos, 0.0) + where(y == -1, clamp_min(cos - margin, 0.0), 0.0)
    return _reduce_loss(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target * input)).

    Examples
    --------
    >>> round(loom.nn.functional.soft_margin_loss(loom.zeros(2), loom.ones(2)).item(), 4)
    0.6931
    """
    input, target = _autocast.full(input, target)
    reduction = _reduction("soft_margin_loss", size_average, reduce, reduction)
    x, y = _t(input), _t(target)
    return _reduce_loss(-logsigmoid(y * x), reduction)  # log1p(exp(-yx)) without overflow at yx = -100.


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean") -> Tensor:
    """Mean over classes of the per-class logistic loss of (N, C) logits against 0/1 targets.

    Examples
    --------
    >>> round(loom.nn.functional.multilabel_soft_margin_loss(loom.zeros(1, 2), loom.ones(1, 2)).item(), 4)
    0.6931
    """
    input, target, weight = _autocast.full(input, target, weight)
    reduction = _reduction("multilabel_soft_margin_loss", size_average, reduce, reduction)
    x, y = _t(input), _t(target)
    loss = -(y * logsigmoid(x) + (1.0 - y) * logsigmoid(-x))
    if weight is not None:
        loss = loss * _t(weight)
    k = x.ndim - 1 if x.ndim else 0
    loss = loss.sum(k) / (x.shape[k] if x.ndim else 1)
    return _reduce_loss(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, d(a, p) - d(a, n) + margin) with d the pairwise p-distance.

    Examples
    --------
    >>> a = loom.zeros(1, 2)
    >>> loom.nn.functional.triplet_margin_loss(a, a, a + 5.0).item()
    0.0
    """
    anchor, positive, negative = _autocast.full(anchor, positive, negative)
    reduction = _reduction("triplet_margin_loss", size_average, reduce, reduction)
    a, pos, neg = _t(anchor), _t(positive), _t(negative)
    _same_rank("triplet_margin_loss", a, pos, neg)
    d_pos = pairwise_distance(a, pos, p, eps)
    d_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = minimum(d_neg, pairwise_distance(pos, neg, p, eps))
    return _reduce_loss(clamp_min(d_pos - d_neg + margin, 0.0), reduction)


# ---------------------------------------------------------------- attention

def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries and (..., S, E) keys.

    A bool `attn_mask` says where to attend (True); a float mask is added to the
    scores. `is_causal` applies the top-left aligned lower-triangular (L, S) mask
    (giving both is an error, as in PyTorch). Batch and head dims broadcast.
    Rows with nothing to attend to give zeros, as PyTorch.
    `enable_gqa` repeats key/value heads (dim -3) to match the query heads.

    Examples
    --------
    >>> q = k = v = loom.ones(2, 4, 3, 8)
    >>> loom.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).shape
    loom.Size([2, 4, 3, 8])
    """
    query, key, value, attn_mask = _autocast.lower(query, key, value, attn_mask)
    op = "scaled_dot_product_attention"
    q, k, v = _t(query), _t(key), _t(value)
    _need_float(op, q, "query")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError(f"loom.{op}: query, key and value need at least 2 dims (..., L, E), got "
                         f"{fmt_shape(q.shape)}, {fmt_shape(k.shape)} and {fmt_shape(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"loom.{op}: query {fmt_shape(q.shape)} and key {fmt_shape(k.shape)} must have the "
                         f"same head dim (last), got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"loom.{op}: key {fmt_shape(k.shape)} and value {fmt_shape(v.shape)} must have the "
                         f"same sequence length (dim -2), got {k.shape[-2]} and {v.shape[-2]}")
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.shape[-3] != hk:
            raise ShapeError(f"loom.{op}: with enable_gqa the query heads ({hq}) must be a multiple of the "
                             f"key/value heads ({hk}, {v.shape[-3] if v.ndim >= 3 else '-'})")
        k = repeat_interleave(k, hq // hk, k.ndim - 3)
        v = repeat_interleave(v, hq // hk, v.ndim - 3)
    L, S = q.shape[-2], k.shape[-2]
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if attn_mask is None and dropout_p == 0.0 and _fused_attention_fits(q, k, v, s):
        return _fused_attention(q, k, v, is_causal, s)
    scores = matmul(q, k.transpose(-2, -1)) * s
    mask = None if attn_mask is None else _t(attn_mask)
    if is_causal:
        if mask is not None:
            raise LoomError(f"loom.{op}: an explicit attn_mask must not be given with is_causal=True")
        mask = arange(S).reshape(1, S) <= arange(L).reshape(L, 1)
    if mask is None:
        attn = softmax(scores, -1)
    else:
        if mask.dtype is dt.bool_:
            scores = where(mask, scores, float("-inf"))
        else:
            scores = scores + mask
        if is_causal:  # Row i keeps key 0: the mask empties no row, so no dead-row guard (3 fewer passes).
            attn = softmax(scores, -1)
        else:
            dead = (scores.detach() == float("-inf")).all(-1, keepdim=True)
            attn = where(dead, 0.0, softmax(where(dead, 0.0, scores), -1))
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p)
    return matmul(attn, v)


def _fused_attention_fits(q, k, v, scale: float) -> bool:
    """Whether sdpa can be the ``attention`` library primitive (one blocked kernel in compiled steps)."""
    if not (_library_ops.enabled() and q.dtype in (dt.float32, dt.float64) and q.dtype is k.dtype is v.dtype
            and math.isfinite(scale) and q.shape[-1] == v.shape[-1] and min(q.shape[-2], k.shape[-2], q.shape[-1]) > 0):
        return False
    try:
        np.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]), tuple(v.shape[:-2]))
    except ValueError:
        return False  # The decomposition's matmul reports the mismatch.
    return True


def _fused_attention(q, k, v, is_causal: bool, scale: float) -> Tensor:
    """sdpa through the ``attention`` primitive: batch dims broadcast, then the packed output sliced."""
    batch = tuple(np.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]), tuple(v.shape[:-2])))
    q, k, v = (broadcast_to(t, batch + tuple(t.shape[-2:])) for t in (q, k, v))
    packed = apply("attention", (q, k, v), {"causal": bool(is_causal), "scale": scale})
    return packed[..., :q.shape[-1]]


# ---------------------------------------------------------------- rearrangements

def pixel_shuffle(input, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r).

    Examples
    --------
    >>> loom.nn.functional.pixel_shuffle(loom.zeros(1, 8, 2, 3), 2).shape
    loom.Size([1, 2, 4, 6])
    """
    x, r = _t(input), int(upscale_factor)
    if x.ndim < 3 or r <= 0 or x.shape[-3] % (r * r):
        raise ShapeError(f"loom.pixel_shuffle: expected an input (*, C * {r}^2, H, W) with at least 3 dims "
                         f"and channels divisible by {r * r}, got {fmt_shape(x.shape)}")
    lead = tuple(x.shape[:-3])
    c, h, w = x.shape[-3] // (r * r), x.shape[-2], x.shape[-1]
    n = len(lead)
    y = x.reshape(lead + (c, r, r, h, w))
    y = y.permute(list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
    return y.reshape(lead + (c, h * r, w * r))


def pixel_unshuffle(input, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of pixel_shuffle.

    Examples
    --------
    >>> loom.nn.functional.pixel_unshuffle(loom.zeros(1, 2, 4, 6), 2).shape
    loom.Size([1, 8, 2, 3])
    """
    x, r = _t(input), int(downscale_factor)
    if x.ndim < 3 or r <= 0 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError(f"loom.pixel_unshuffle: expected an input (*, C, H * {r}, W * {r}) with at least 3 "
                         f"dims, got {fmt_shape(x.shape)}")
    lead = tuple(x.shape[:-3])
    c, h, w = x.shape[-3], x.shape[-2] // r, x.shape[-1] // r
    n = len(lead)
    y = x.reshape(lead + (c, h, r, w, r))
    y = y.permute(list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
    return y.reshape(lead + (c * r * r, h, w))


METHODS = ["softmax", "log_softmax"]
INPLACE: list[str] = []
NN_FUNCTIONAL = [
    "linear", "bilinear", "softmax", "log_softmax", "softmin", "glu", "batch_norm", "instance_norm",
    "layer_norm", "rms_norm", "group_norm", "normalize", "dropout", "dropout1d", "dropout2d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "embedding", "nll_loss", "cross_entropy",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "poisson_nll_loss", "gaussian_nll_loss", "cosine_similarity",
    "pairwise_distance", "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
    "soft_margin_loss", "multilabel_soft_margin_loss", "triplet_margin_loss", "scaled_dot_product_attention",
    "pixel_shuffle", "pixel_unshuffle",
]
__all__ = NN_FUNCTIONAL
