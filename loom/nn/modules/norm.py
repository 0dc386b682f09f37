"""Normalisation layers: BatchNorm (with running statistics), LayerNorm, GroupNorm, RMSNorm."""
from __future__ import annotations

import numbers

from loom import dtypes as dt
from loom.tensor import _check_device
from loom.autograd.grad_mode import no_grad
from loom.nn import functional as F
from loom.nn import init
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty, ones, tensor, zeros



def _affine_parameters(module: Module, shape, affine: bool, bias: bool, dtype) -> None:
    """The per-element scale (and shift) of a normalisation layer, or None when it has none."""
    module.register_parameter("weight", Parameter(empty(tuple(shape), dtype=dtype)) if affine else None)
    module.register_parameter("bias", Parameter(empty(tuple(shape), dtype=dtype)) if affine and bias else None)


def _reset_affine(module: Module) -> None:
    """Scale 1 and shift 0, as PyTorch initialises normalisation layers."""
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)

class _BatchNorm(Module):
    """Batch normalisation over dim 1, with PyTorch's running-statistics rules."""

    _ndims: tuple[int, ...] = (2, 3)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(empty(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(empty(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=dt.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim not in self._ndims:
            want = " or ".join(f"{d}D" for d in self._ndims)
            raise ValueError(f"loom.nn.{type(self).__name__}: expected {want} input (got {input.ndim}D input)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # Cumulative moving average.
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if keep else None, self.running_var if keep else None,
                            self.weight, self.bias, use_batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) inputs.

    In training, normalises with the batch's statistics and updates
    `running_mean`/`running_var` (`momentum=None`: cumulative average); in
    eval, normalises with the running statistics.

    Examples
    --------
    >>> bn = loom.nn.BatchNorm1d(3)
    >>> y = bn(loom.randn(8, 3))
    >>> int(bn.num_batches_tracked)
    1
    """

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) inputs over N, H and W.

    Examples
    --------
    >>> loom.nn.BatchNorm2d(16)(loom.randn(4, 16, 5, 5)).shape
    loom.Size([4, 16, 5, 5])
    """

    _ndims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of (N, C, D, H, W) inputs."""

    _ndims = (5,)


def _shape_tuple(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalise over the last `len(normalized_shape)` dims, then scale and shift elementwise.

    Examples
    --------
    >>> ln = loom.nn.LayerNorm(10)
    >>> [n for n, _ in ln.named_parameters()], ln(loom.randn(2, 5, 10)).shape
    (['weight', 'bias'], loom.Size([2, 5, 10]))
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalise (N, C, *) inputs over groups of C / num_groups channels, then scale and shift per channel.

    Examples
    --------
    >>> loom.nn.GroupNorm(3, 6)(loom.randn(20, 6, 10, 10)).shape
    loom.Size([20, 6, 10, 10])
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        if num_channels % num_groups != 0:
            raise ValueError(f"loom.nn.GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, (num_channels,), affine, bias, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the last dims, times a learned scale.

    Examples
    --------
    >>> loom.nn.RMSNorm([2, 3])(loom.randn(2, 2, 3)).shape
    loom.Size([2, 2, 3])
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(empty(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose statistics span every process of a group; in one process it is BatchNorm.

    loom computes the statistics of the tensor it is given; a data-parallel model whose batch is a
    global (split) tensor gets the whole batch's statistics from the same code.
    """

    _ndims = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_group = process_group

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """`module` with every BatchNorm layer replaced by a SyncBatchNorm holding the same state."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, (SyncBatchNorm, _InstanceNorm)):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group)
            out.load_state_dict(module.state_dict())
            out.train(module.training)
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


class _InstanceNorm(_BatchNorm):
    """Normalisation of each sample's channels over their spatial positions."""

    _no_batch_dim = 3

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        name = type(self).__name__
        if input.ndim not in (self._no_batch_dim, self._no_batch_dim + 1):
            raise ValueError(f"loom.nn.{name}: expected {self._no_batch_dim}D or {self._no_batch_dim + 1}D input "
                             f"(got {input.ndim}D input)")
        feature_dim = input.ndim - self._no_batch_dim
        if input.shape[feature_dim] != self.num_features:
            msg = (f"loom.nn.{name}: expected input's size at dim={feature_dim} to match num_features "
                   f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            if self.affine:
                raise ValueError(msg)
            import warnings
            warnings.warn(msg + " num_features is not used when affine=False", stacklevel=2)
        unbatched = input.ndim == self._no_batch_dim
        x = input.unsqueeze(0) if unbatched else input
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self.momentum if self.momentum is not None else 0.0, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of (N, C, L) or (C, L) inputs.

    Examples
    --------
    >>> loom.nn.InstanceNorm1d(3)(loom.randn(2, 3, 5)).shape
    loom.Size([2, 3, 5])
    """

    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of (N, C, H, W) or (C, H, W) inputs."""

    _no_batch_dim = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of (N, C, D, H, W) or (C, D, H, W) inputs."""

    _no_batch_dim = 4


class LocalResponseNorm(Module):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta.

    Examples
    --------
    >>> loom.nn.LocalResponseNorm(2)(loom.randn(1, 4, 3, 3)).shape
    loom.Size([1, 4, 3, 3])
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(Module):
    """Lua-Torch's cross-channel LRN of (N, C, H, W): x * (k + alpha / size * sum of x^2 over the
    2 * ((size - 1) // 2 + 1) - 1 channels centred on each one)^-beta, with that code's running sum
    (which also counts channel 0 in every later window), as PyTorch computes it."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim != 4:
            raise ValueError(f"loom.nn.CrossMapLRN2d: expected a 4-d (N, C, H, W) input, got "
                             f"{input.ndim}-d {list(input.shape)}")
        pre_pad = int((self.size - 1) / 2 + 1)
        half = pre_pad - 1
        c = input.shape[1]
        sq = input * input
        padded = F.pad(sq, (0, 0, 0, 0, half, half))
        acc = padded[:, 0:c]
        for j in range(1, 2 * half + 1):
            acc = acc + padded[:, j:j + c]
        if c > pre_pad:
            # Lua Torch's running sum never subtracts channel 0: every channel from pre_pad on includes it.
            late = tensor([0.0] * pre_pad + [1.0] * (c - pre_pad), dtype=input.dtype).reshape(1, c, 1, 1)
            acc = acc + sq[:, :1] * late
        return input * (acc * (self.alpha / self.size) + self.k) ** -self.beta

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
