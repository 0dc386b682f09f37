"""Fold an eval-mode BatchNorm into the convolution or linear layer before it (`torch.nn.utils.fusion`)."""
from __future__ import annotations

import copy

from loom.autograd.grad_mode import no_grad
from loom.errors import LoomValueError
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, zeros

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def fuse_conv_bn_weights(conv_w: Tensor, conv_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor, bn_eps: float,
                         bn_w: Tensor | None, bn_b: Tensor | None, transpose: bool = False):
    """Weights and bias of one convolution equal to conv followed by (eval-mode) batch norm."""
    dtype = conv_w.dtype
    if conv_b is None:
        conv_b = zeros(bn_rm.shape[0], dtype=dtype)
    if bn_w is None:
        bn_w = zeros(bn_rm.shape[0], dtype=dtype) + 1.0
    if bn_b is None:
        bn_b = zeros(bn_rm.shape[0], dtype=dtype)
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    shape = [1, -1] + [1] * (conv_w.ndim - 2) if transpose else [-1] + [1] * (conv_w.ndim - 1)
    w = (conv_w * scale.reshape(shape)).to(dtype)
    b = ((conv_b - bn_rm) * scale + bn_b).to(dtype)
    return Parameter(w.detach(), conv_w.requires_grad), Parameter(b.detach(), conv_b.requires_grad)


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of `conv` whose output equals bn(conv(x)) for eval-mode `conv` and `bn`.

    Examples
    --------
    >>> conv, bn = loom.nn.Conv2d(3, 4, 3).eval(), loom.nn.BatchNorm2d(4).eval()
    >>> fused = loom.nn.utils.fuse_conv_bn_eval(conv, bn)
    >>> x = loom.randn(1, 3, 5, 5)
    >>> bool(((fused(x) - bn(conv(x))).abs() < 1e-5).all())
    True
    """
    if conv.training or bn.training:
        raise LoomValueError("loom.nn.utils.fuse_conv_bn_eval: fusion only works in eval mode")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise LoomValueError("loom.nn.utils.fuse_conv_bn_eval: the batch norm needs running statistics")
    with no_grad():
        fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                        bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor, bn_eps: float,
                           bn_w: Tensor, bn_b: Tensor):
    """Weight and bias of one linear layer equal to linear followed by (eval-mode) batch norm."""
    if linear_b is None:
        linear_b = zeros(bn_rm.shape[0], dtype=linear_w.dtype)
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    w = linear_w * scale.unsqueeze(-1)
    b = (linear_b - bn_rm) * scale + bn_b
    return Parameter(w.detach(), linear_w.requires_grad), Parameter(b.detach(), linear_b.requires_grad)


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of `linear` whose output equals bn(linear(x)) for eval-mode `linear` and `bn`."""
    if linear.training or bn.training:
        raise LoomValueError("loom.nn.utils.fuse_linear_bn_eval: fusion only works in eval mode")
    if linear.out_features != bn.num_features:
        raise LoomValueError(f"loom.nn.utils.fuse_linear_bn_eval: linear out_features ({linear.out_features}) "
                             f"must equal the batch norm's num_features ({bn.num_features})")
    fused = copy.deepcopy(linear)
    with no_grad():
        fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                          bn.eps, bn.weight, bn.bias)
    return fused
