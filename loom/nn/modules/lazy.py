"""Lazy layers: their input size is read from the first input (`LazyLinear`, `LazyConv2d`, ...).

Until then their parameters (and statistics buffers) are `UninitializedParameter` /
`UninitializedBuffer` placeholders. The first forward call materialises them with
the inferred shape, initialises them as the plain layer would, and turns the module
into that plain layer (`LazyLinear` becomes `Linear`), as PyTorch does.
"""
from __future__ import annotations

from loom import dtypes as dt
from loom.errors import LoomError
from loom.nn.module import Module
from loom.nn.modules.conv import (
    Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d,
)
from loom.nn.modules.linear import Linear
from loom.nn.modules.norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty, tensor


class _Uninitialized:
    """Shape-less placeholder behaviour shared by UninitializedParameter and UninitializedBuffer."""

    cls_to_become: type = Tensor

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give the placeholder storage of `shape` (uninitialised values) and make it an ordinary tensor."""
        d = dtype if dtype is not None else self.__dict__.get("_lazy_dtype") or dt.get_default_dtype()
        self.data = empty(tuple(shape), dtype=d)
        self.__class__ = self.cls_to_become

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def _refuse(self, *args, **kwargs):
        raise LoomError(f"loom.nn.{type(self).__name__}: can't use an uninitialized parameter or buffer; run "
                        "a forward pass through the lazy module first (or call materialize)")

    numpy = tolist = item = _refuse


class UninitializedParameter(_Uninitialized, Parameter):
    """A parameter whose shape is not known yet (see the lazy layers)."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None) -> UninitializedParameter:
        p = Parameter.__new__(cls, empty(0, dtype=dtype), requires_grad)
        p.__dict__["_lazy_dtype"] = dtype
        return p

    def __init__(self, requires_grad: bool = True, device=None, dtype=None) -> None:
        pass


class UninitializedBuffer(_Uninitialized, Tensor):
    """A buffer whose shape is not known yet (see the lazy layers)."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None) -> UninitializedBuffer:
        t = Tensor.__new__(cls)
        t._init(empty(0, dtype=dtype)._node)
        t.__dict__["_lazy_dtype"] = dtype
        return t

    def __init__(self, requires_grad: bool = False, device=None, dtype=None) -> None:
        pass


def _infer_hook(module: Module, args) -> None:
    module.initialize_parameters(*args)
    if module.has_uninitialized_params():
        raise LoomError(f"loom.nn.{type(module).__name__}: initialize_parameters left parameters uninitialized")
    module._lazy_handle.remove()
    module.__class__ = module.cls_to_become


class LazyModuleMixin:
    """Infers parameter shapes from the first input, then becomes `cls_to_become`."""

    cls_to_become: type | None = None

    def _lazy_start(self) -> None:
        self._lazy_handle = self.register_forward_pre_hook(_infer_hook)

    def has_uninitialized_params(self) -> bool:
        """Whether some parameter or buffer is still a placeholder."""
        members = list(self._parameters.values()) + list(self._buffers.values())
        return any(isinstance(t, _Uninitialized) for t in members)

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError


class LazyLinear(LazyModuleMixin, Linear):
    """A Linear layer whose `in_features` is the size of the last dim of its first input.

    Examples
    --------
    >>> m = loom.nn.LazyLinear(3)
    >>> m(loom.randn(2, 5)).shape, type(m).__name__, m.weight.shape
    (loom.Size([2, 3]), 'Linear', loom.Size([3, 5]))
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(0, 0, False, device, dtype)
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        self._lazy_start()

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            self.in_features = input.shape[-1]
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()


class _LazyConvXdMixin(LazyModuleMixin):
    def _lazy_conv_start(self, out_channels: int, bias: bool, dtype) -> None:
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        self._lazy_start()

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self.in_channels = input.shape[0] if input.ndim == self._nd + 1 else input.shape[1]
        if self.in_channels % self.groups != 0:
            raise ValueError(f"loom.nn.{type(self).__name__}: in_channels ({self.in_channels}) must be divisible "
                             f"by groups ({self.groups})")
        if self.transposed:
            shape = (self.in_channels, self.out_channels // self.groups) + tuple(self.kernel_size)
        else:
            shape = (self.out_channels, self.in_channels // self.groups) + tuple(self.kernel_size)
        self.weight.materialize(shape)
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()


def _lazy_conv(name: str, base: type, transposed: bool) -> type:
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, *rest, bias: bool = True,
                 device=None, dtype=None, **kwargs):
        if transposed:
            names = ("output_padding", "groups", "bias", "dilation", "padding_mode")
        else:
            names = ("dilation", "groups", "bias", "padding_mode")
        opts = dict(zip(names, rest))
        opts.update(kwargs)
        bias = opts.pop("bias", bias)
        groups = opts.pop("groups", 1)
        base.__init__(self, groups, groups, kernel_size, stride, padding, groups=groups, bias=False,
                      device=device, dtype=dtype, **opts)
        self._lazy_conv_start(out_channels, bias, dtype)

    doc = (f"A {base.__name__} whose `in_channels` is read from its first input (dim 1, or dim 0 when "
           "unbatched); it becomes a plain " + base.__name__ + " then.")
    return type(name, (_LazyConvXdMixin, base), {"__init__": __init__, "cls_to_become": base, "__doc__": doc,
                                                  "__module__": __name__})


LazyConv1d = _lazy_conv("LazyConv1d", Conv1d, False)
LazyConv2d = _lazy_conv("LazyConv2d", Conv2d, False)
LazyConv3d = _lazy_conv("LazyConv3d", Conv3d, False)
LazyConvTranspose1d = _lazy_conv("LazyConvTranspose1d", ConvTranspose1d, True)
LazyConvTranspose2d = _lazy_conv("LazyConvTranspose2d", ConvTranspose2d, True)
LazyConvTranspose3d = _lazy_conv("LazyConvTranspose3d", ConvTranspose3d, True)


class _LazyNormBase(LazyModuleMixin):
    _instance = False

    def _lazy_norm_start(self, affine: bool, track_running_stats: bool, dtype, bias: bool) -> None:
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dtype)
            self.running_var = UninitializedBuffer(dtype=dtype)
            self.num_batches_tracked = tensor(0, dtype=dt.int64)
        self._lazy_start()

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor) -> None:
        if not self.has_uninitialized_params():
            return
        unbatched = self._instance and input.ndim == self._no_batch_dim
        self.num_features = input.shape[0] if unbatched else input.shape[1]
        for t in (self.weight, self.bias):
            if isinstance(t, _Uninitialized):
                t.materialize((self.num_features,))
        for t in (self.running_mean, self.running_var):
            if isinstance(t, _Uninitialized):
                t.materialize((self.num_features,))
        self.reset_parameters()


def _lazy_norm(name: str, base: type, instance: bool) -> type:
    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        # PyTorch's lazy instance norms default to affine=True, track_running_stats=True too.
        base.__init__(self, 0, eps, momentum, False, False, device=device, dtype=dtype)
        self._lazy_norm_start(affine, track_running_stats, dtype, bias)

    doc = (f"A {base.__name__} whose `num_features` is read from its first input; it becomes a plain "
           f"{base.__name__} then.")
    return type(name, (_LazyNormBase, base), {"__init__": __init__, "cls_to_become": base, "__doc__": doc,
                                               "_instance": instance, "__module__": __name__})


LazyBatchNorm1d = _lazy_norm("LazyBatchNorm1d", BatchNorm1d, False)
LazyBatchNorm2d = _lazy_norm("LazyBatchNorm2d", BatchNorm2d, False)
LazyBatchNorm3d = _lazy_norm("LazyBatchNorm3d", BatchNorm3d, False)
LazyInstanceNorm1d = _lazy_norm("LazyInstanceNorm1d", InstanceNorm1d, True)
LazyInstanceNorm2d = _lazy_norm("LazyInstanceNorm2d", InstanceNorm2d, True)
LazyInstanceNorm3d = _lazy_norm("LazyInstanceNorm3d", InstanceNorm3d, True)
