"""Weight initialisation, as `torch.nn.init`: each function fills a tensor in place and returns it.

Values come from loom's counter-based random numbers (`loom.manual_seed` makes
them reproducible); the writes happen under `no_grad`, so parameters can be
initialised directly.
"""
from __future__ import annotations

import math

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomError, ShapeError, fmt_shape
from loom.tensor import Tensor, full, rand, randn

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "orthogonal_", "sparse_", "uniform", "normal", "constant", "eye", "dirac", "xavier_uniform",
           "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse"]


def _write(tensor: Tensor, value: Tensor) -> Tensor:
    """Copy `value` into `tensor` in place without recording history."""
    with no_grad():
        return tensor.copy_(value)


def _check(tensor: Tensor, op: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"loom.nn.init.{op}: expected a loom.Tensor, got {type(tensor).__name__}")
    if not tensor.dtype.is_floating_point:
        raise LoomError(f"loom.nn.init.{op}: expected a floating point tensor, got {tensor.dtype.name}")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table).

    Examples
    --------
    >>> round(loom.nn.init.calculate_gain("relu"), 4)
    1.4142
    """
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1  # An int, as PyTorch returns it (printed "1").
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"loom.nn.init.calculate_gain: negative_slope {param} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"loom.nn.init.calculate_gain: unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: dims 1 and 0 times the receptive field (dims 2+)."""
    if tensor.ndim < 2:
        raise ValueError(f"loom.nn.init: fan in and fan out can not be computed for tensor with fewer than "
                         f"2 dimensions (got shape {fmt_shape(tensor.shape)})")
    receptive = math.prod(tensor.shape[2:]) if tensor.ndim > 2 else 1
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"loom.nn.init: mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with samples of U(a, b).

    Examples
    --------
    >>> w = loom.nn.init.uniform_(loom.empty(3, 5), -0.1, 0.1)
    >>> bool((w.abs() <= 0.1).all())
    True
    """
    _check(tensor, "uniform_")
    u = rand(*tensor.shape, dtype=tensor.dtype, generator=generator)
    return _write(tensor, u * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with samples of N(mean, std^2).

    Examples
    --------
    >>> loom.nn.init.normal_(loom.empty(2, 2), std=0.02).shape
    loom.Size([2, 2])
    """
    _check(tensor, "normal_")
    z = randn(*tensor.shape, dtype=tensor.dtype, generator=generator)
    return _write(tensor, z * std + mean)


def _erfinv(y: Tensor) -> Tensor:
    """Inverse error function: Winitzki's closed form refined by Newton steps on `erf` (float64)."""
    a = 0.147
    ln = (1.0 - y * y).clamp(min=1e-300).log()
    t = 2.0 / (math.pi * a) + ln / 2.0
    x = ((t * t - ln / a).sqrt() - t).sqrt() * y.sign()
    for _ in range(3):
        x = x - (x.erf() - y) / ((2.0 / math.sqrt(math.pi)) * (-(x * x)).exp())
    return x


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Fill with N(mean, std^2) samples truncated to [a, b] (inverse-CDF sampling, as PyTorch).

    Examples
    --------
    >>> w = loom.nn.init.trunc_normal_(loom.empty(100), std=0.02, a=-0.04, b=0.04)
    >>> bool((w.abs() <= 0.04).all())
    True
    """
    _check(tensor, "trunc_normal_")

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = rand(*tensor.shape, dtype=tensor.dtype, generator=generator).double()
    y = (u * (2 * hi - 2 * lo) + (2 * lo - 1)).clamp(-1 + 1e-15, 1 - 1e-15)
    x = _erfinv(y) * (std * math.sqrt(2.0)) + mean
    return _write(tensor, x.clamp(a, b).to(tensor.dtype))


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with the value `val`."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"loom.nn.init.constant_: expected a loom.Tensor, got {type(tensor).__name__}")
    return _write(tensor, full(tuple(tensor.shape), val, dtype=tensor.dtype))


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-d tensor with the identity matrix."""
    from loom.tensor import eye
    if tensor.ndim != 2:
        raise ShapeError(f"loom.nn.init.eye_: only tensors with 2 dimensions are supported, got shape "
                         f"{fmt_shape(tensor.shape)}")
    return _write(tensor, eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-d conv weight with the Dirac delta (identity convolution per group)."""
    import numpy as np

    from loom.tensor import tensor as _tensor
    if tensor.ndim not in (3, 4, 5):
        raise ShapeError(f"loom.nn.init.dirac_: only tensors with 3, 4, or 5 dimensions are supported, "
                         f"got shape {fmt_shape(tensor.shape)}")
    shape = tuple(tensor.shape)
    if shape[0] % groups != 0:
        raise ValueError(f"loom.nn.init.dirac_: dim 0 ({shape[0]}) must be divisible by groups ({groups})")
    out_per_group = shape[0] // groups
    w = np.zeros(shape, dtype=np.float64)
    for g in range(groups):
        for d in range(min(out_per_group, shape[1])):
            w[(g * out_per_group + d, d) + tuple(s // 2 for s in shape[2:])] = 1.0
    return _write(tensor, _tensor(w, dtype=tensor.dtype))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if 0 in tuple(tensor.shape):
        return 0.0
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan).

    Examples
    --------
    >>> w = loom.nn.init.kaiming_uniform_(loom.empty(64, 100), nonlinearity="relu")
    >>> bool((w.abs() <= (6 / 100) ** 0.5).all())
    True
    """
    if 0 in tuple(tensor.shape):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    if 0 in tuple(tensor.shape):
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix: QR of a normal sample, dims 1+ flattened.

    The QR factorisation runs once, eagerly, on the sampled values.
    """
    import numpy as np

    from loom.tensor import tensor as _tensor
    if tensor.ndim < 2:
        raise ShapeError(f"loom.nn.init.orthogonal_: only tensors with 2 or more dimensions are supported, "
                         f"got shape {fmt_shape(tensor.shape)}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, dtype=tensor.dtype, generator=generator).double().numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _write(tensor, _tensor(gain * q.reshape(tuple(tensor.shape)), dtype=tensor.dtype))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """Fill a 2-d tensor with N(0, std) values and zero a `sparsity` fraction of each column's entries.

    Examples
    --------
    >>> w = loom.nn.init.sparse_(loom.empty(10, 3), sparsity=0.3)
    >>> [int((w[:, j] == 0).sum()) for j in range(3)]
    [3, 3, 3]
    """
    import numpy as np

    from loom.tensor import tensor as _tensor
    if tensor.ndim != 2:
        raise ShapeError(f"loom.nn.init.sparse_: only tensors with 2 dimensions are supported, got shape "
                         f"{fmt_shape(tensor.shape)}")
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    values = randn(rows, cols, dtype=tensor.dtype, generator=generator).numpy() * std
    order = np.argsort(rand(rows, cols, generator=generator).numpy(), axis=0)  # A random row order per column.
    for j in range(cols):
        values[order[:zeros, j], j] = 0
    return _write(tensor, _tensor(values, dtype=tensor.dtype))


def _deprecated(name: str, fn):
    def old(*args, **kwargs):
        import warnings
        warnings.warn(f"nn.init.{name} is now deprecated in favor of nn.init.{name}_.", FutureWarning, stacklevel=2)
        return fn(*args, **kwargs)
    old.__name__ = name
    old.__doc__ = f"Deprecated spelling of `{name}_`."
    return old


uniform = _deprecated("uniform", uniform_)
normal = _deprecated("normal", normal_)
constant = _deprecated("constant", constant_)
eye = _deprecated("eye", eye_)
dirac = _deprecated("dirac", dirac_)
xavier_uniform = _deprecated("xavier_uniform", xavier_uniform_)
xavier_normal = _deprecated("xavier_normal", xavier_normal_)
kaiming_uniform = _deprecated("kaiming_uniform", kaiming_uniform_)
kaiming_normal = _deprecated("kaiming_normal", kaiming_normal_)
orthogonal = _deprecated("orthogonal", orthogonal_)
sparse = _deprecated("sparse", sparse_)
