"""`tf.nn`: activations, NHWC convolution and pooling, dropout and losses over loom's composite ops."""
from __future__ import annotations

import math

import loom
import loom.nn.functional as F
from loom.errors import LoomValueError, ShapeError
from loom.tensor import Tensor as _Tensor
from loom.tf import random as _random
from loom.tf._core import _ints, convert_to_tensor as _t, gather, reduce_mean
from loom.tf.math import l2_normalize, log_sigmoid, sigmoid, softplus, tanh, top_k  # noqa: F401


def relu(features, name=None) -> _Tensor:
    """max(features, 0)."""
    return F.relu(_t(features))


def relu6(features, name=None) -> _Tensor:
    """min(max(features, 0), 6)."""
    return F.relu6(_t(features))


def elu(features, name=None) -> _Tensor:
    """x if x > 0 else exp(x) - 1."""
    return F.elu(_t(features))


def selu(features, name=None) -> _Tensor:
    """Scaled ELU."""
    return F.selu(_t(features))


def gelu(features, approximate=False, name=None) -> _Tensor:
    """Gaussian error linear unit (tanh approximation if `approximate`)."""
    return F.gelu(_t(features), approximate="tanh" if approximate else "none")


def leaky_relu(features, alpha=0.2, name=None) -> _Tensor:
    """x if x > 0 else alpha * x (alpha 0.2 by default, as TensorFlow)."""
    return F.leaky_relu(_t(features), alpha)


def silu(features, beta=1.0) -> _Tensor:
    """x * sigmoid(beta * x)."""
    x = _t(features)
    return x * loom.sigmoid(beta * x)


swish = silu


def softsign(features, name=None) -> _Tensor:
    """x / (1 + |x|)."""
    return F.softsign(_t(features))


def softmax(logits, axis=None, name=None) -> _Tensor:
    """exp(x) / sum(exp(x)) along `axis` (the last by default)."""
    return F.softmax(_t(logits), dim=-1 if axis is None else int(axis))


def log_softmax(logits, axis=None, name=None) -> _Tensor:
    """log(softmax(x)) along `axis`, computed stably."""
    return F.log_softmax(_t(logits), dim=-1 if axis is None else int(axis))


def bias_add(value, bias, data_format=None, name=None) -> _Tensor:
    """`value` plus the 1-D `bias` along the channel (last, or for NC.. the second) dimension."""
    v, b = _t(value), _t(bias)
    if data_format is not None and data_format.startswith("NC"):
        return v + b.reshape([-1] + [1] * (v.ndim - 2))
    return v + b


def _pair(v, n: int, what: str) -> list[int]:
    """Per-spatial-dim values from an int, a list of n, or TF's full list of n + 2 (batch, channel)."""
    vals = _ints(v)
    if len(vals) == 1:
        return vals * n
    if len(vals) == n:
        return vals
    if len(vals) == n + 2:
        return vals[1:-1]
    raise LoomValueError(f"loom.tf.nn: {what} must have 1, {n} or {n + 2} values, got {vals}")


def _same_pads(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: output ceil(size / s), extra padding goes after."""
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


def _spatial_pads(x: _Tensor, ks, strides, dilations, padding, op: str) -> list[tuple[int, int]]:
    n = len(ks)
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return [(0, 0)] * n
        if p == "SAME":
            return [_same_pads(x.shape[1 + i], ks[i], strides[i], dilations[i]) for i in range(n)]
        raise LoomValueError(f"loom.tf.nn.{op}: padding must be 'SAME' or 'VALID', got {padding!r}")
    pads = [list(map(int, p)) for p in padding]
    if len(pads) == n + 2:
        pads = pads[1:-1]
    return [(a, b) for a, b in pads]


def _pad_nhwc(x: _Tensor, pads, value: float) -> _Tensor:
    flat: list[int] = [0, 0]
    for before, after in reversed(pads):
        flat += [before, after]
    if not any(flat):
        return x
    return loom.pad(x, flat, mode="constant", value=value)


def _check_format(data_format, op):
    if data_format not in (None, "NHWC", "NWC", "NDHWC"):
        raise LoomValueError(f"loom.tf.nn.{op}: only channels-last data formats are supported, got {data_format!r}")


def convolution(input, filters, strides=None, padding="VALID", data_format=None, dilations=None,
                name=None) -> _Tensor:
    """N-D convolution (1-D or 2-D) of a channels-last `input` with filters [*k, in, out]."""
    x, w = _t(input), _t(filters)
    n = x.ndim - 2
    if n not in (1, 2):
        raise ShapeError(f"loom.tf.nn.convolution: expected a 3-D or 4-D channels-last input, got shape "
                         f"{list(x.shape)}")
    if w.ndim != n + 2:
        raise ShapeError(f"loom.tf.nn.conv: filters must be {n + 2}-D [*kernel, in, out], got shape {list(w.shape)}")
    if w.shape[-2] and x.shape[-1] % w.shape[-2]:
        raise ShapeError(f"loom.tf.nn.conv: input has {x.shape[-1]} channels, filters expect {w.shape[-2]}")
    st = _pair(1 if strides is None else strides, n, "strides")
    dl = _pair(1 if dilations is None else dilations, n, "dilations")
    ks = list(w.shape[:n])
    xp = _pad_nhwc(x, _spatial_pads(x, ks, st, dl, padding, "conv"), 0.0)
    groups = x.shape[-1] // w.shape[-2]
    if n == 2:
        y = F.conv2d(xp.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=st, dilation=dl, groups=groups)
        return y.permute(0, 2, 3, 1)
    y = F.conv1d(xp.permute(0, 2, 1), w.permute(2, 1, 0), stride=st, dilation=dl, groups=groups)
    return y.permute(0, 2, 1)


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None) -> _Tensor:
    """2-D convolution of NHWC `input` with HWIO `filters`; padding 'SAME', 'VALID' or explicit."""
    _check_format(data_format, "conv2d")
    return convolution(input, filters, strides, padding, None, dilations)


def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None, name=None) -> _Tensor:
    """1-D convolution of NWC `input` with WIO `filters`."""
    _check_format(data_format, "conv1d")
    return convolution(input, filters, stride, padding, None, dilations)


def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None) -> _Tensor:
    """Depthwise 2-D convolution: filter [kh, kw, in, multiplier], one group per input channel."""
    x, w = _t(input), _t(filter)
    kh, kw, cin, mult = w.shape
    return convolution(x, w.reshape(kh, kw, 1, cin * mult), strides, padding, None, dilations)


def _pool(input, ksize, strides, padding, op):
    x = _t(input)
    n = x.ndim - 2
    ks = _pair(ksize, n, "ksize")
    st = _pair(strides, n, "strides")
    pads = _spatial_pads(x, ks, st, [1] * n, padding, op)
    return x, n, ks, st, pads


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> _Tensor:
    """Max pooling over NHWC windows; SAME padding never picks a padded value."""
    _check_format(data_format, "max_pool2d")
    x, n, ks, st, pads = _pool(input, ksize, strides, padding, "max_pool2d")
    xp = _pad_nhwc(x, pads, -math.inf)
    return F.max_pool2d(xp.permute(0, 3, 1, 2), ks, st).permute(0, 2, 3, 1)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> _Tensor:
    """Average pooling over NHWC windows; with SAME padding only real values are averaged."""
    _check_format(data_format, "avg_pool2d")
    x, n, ks, st, pads = _pool(input, ksize, strides, padding, "avg_pool2d")
    xp = _pad_nhwc(x, pads, 0.0).permute(0, 3, 1, 2)
    total = F.avg_pool2d(xp, ks, st)
    if not any(a or b for a, b in pads):
        return total.permute(0, 2, 3, 1)
    ones = _pad_nhwc(loom.ones(1, *x.shape[1:3], 1, dtype=x.dtype), pads, 0.0).permute(0, 3, 1, 2)
    return (total / F.avg_pool2d(ones, ks, st)).permute(0, 2, 3, 1)


def max_pool(input, ksize, strides, padding, data_format=None, name=None) -> _Tensor:
    """Max pooling (2-D NHWC, or 1-D NWC through a unit height)."""
    x = _t(input)
    if x.ndim == 3:
        return max_pool2d(x.unsqueeze(1), [1] + _ints(ksize)[:1], [1] + _ints(strides)[:1], padding)[:, 0]
    return max_pool2d(x, ksize, strides, padding)


def avg_pool(input, ksize, strides, padding, data_format=None, name=None) -> _Tensor:
    """Average pooling (2-D NHWC, or 1-D NWC through a unit height)."""
    x = _t(input)
    if x.ndim == 3:
        return avg_pool2d(x.unsqueeze(1), [1] + _ints(ksize)[:1], [1] + _ints(strides)[:1], padding)[:, 0]
    return avg_pool2d(x, ksize, strides, padding)


def dropout(x, rate, noise_shape=None, seed=None, name=None) -> _Tensor:
    """Zero each element with probability `rate` and scale the rest by 1 / (1 - rate)."""
    v = _t(x)
    rate = float(rate)
    if not 0 <= rate < 1:
        raise LoomValueError(f"loom.tf.nn.dropout: rate must be in [0, 1), got {rate}")
    if rate == 0:
        return v * 1
    shape = list(v.shape) if noise_shape is None else _ints(noise_shape)
    keep = _random.uniform(shape, dtype=v.dtype, seed=seed) >= rate
    return v * keep.to(v.dtype) * (1.0 / (1.0 - rate))


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None) -> _Tensor:
    """Per-example -log(softmax(logits)[label]) for integer `labels` of shape logits.shape[:-1]."""
    lg, lb = _t(logits), _t(labels).to(loom.int64)
    if tuple(lb.shape) != tuple(lg.shape[:-1]):
        raise ShapeError(f"loom.tf.nn.sparse_softmax_cross_entropy_with_logits: labels of shape "
                         f"{list(lb.shape)} do not match logits of shape {list(lg.shape)} (expected "
                         f"{list(lg.shape[:-1])})")
    lp = F.log_softmax(lg, dim=-1)
    return -loom.take_along_dim(lp, lb.unsqueeze(-1), dim=-1).squeeze(-1)


def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None) -> _Tensor:
    """Per-example -sum(labels * log(softmax(logits))) over `axis`."""
    lg, lb = _t(logits), _t(labels)
    return -(lb.to(lg.dtype) * F.log_softmax(lg, dim=int(axis))).sum(int(axis))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None) -> _Tensor:
    """Elementwise binary cross-entropy of `labels` against sigmoid(`logits`), computed stably."""
    x, z = _t(logits), _t(labels)
    z = z.to(x.dtype)
    return loom.relu(x) - x * z + loom.log1p(loom.exp(-loom.abs(x)))


def embedding_lookup(params, ids, max_norm=None, name=None) -> _Tensor:
    """Rows of `params` at `ids` (shape ids.shape + params.shape[1:])."""
    return gather(params, ids)


def moments(x, axes, shift=None, keepdims=False, name=None):
    """(mean, variance) of `x` over `axes` (population variance)."""
    v = _t(x)
    m = reduce_mean(v, axes, keepdims=True)
    var = reduce_mean(loom.square(v - m), axes, keepdims=keepdims)
    return (m if keepdims else reduce_mean(v, axes, keepdims=False)), var


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None) -> _Tensor:
    """(x - mean) / sqrt(variance + eps) * scale + offset (scale and offset may be None)."""
    v = _t(x)
    inv = loom.rsqrt(_t(variance) + variance_epsilon)
    if scale is not None:
        inv = inv * _t(scale)
    out = (v - _t(mean)) * inv
    return out + _t(offset) if offset is not None else out


def l2_loss(t, name=None) -> _Tensor:
    """sum(t ** 2) / 2."""
    v = _t(t)
    return (v * v).sum() / 2


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None) -> _Tensor:
    """Mean per-example loss (sum divided by the global batch size)."""
    v = _t(per_example_loss)
    if sample_weight is not None:
        v = v * _t(sample_weight)
    n = global_batch_size if global_batch_size is not None else v.shape[0]
    return v.sum() / n


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.nn", "tf.nn")
