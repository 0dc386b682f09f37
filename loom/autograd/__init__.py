"""Autodiff: backward over recorded primitives, grad(), GradientTape and grad modes."""
from loom.autograd.engine import backward, grad
from loom.autograd.function import Function, FunctionCtx, once_differentiable
from loom.autograd.gradcheck import gradcheck, gradgradcheck
from loom.autograd.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from loom.autograd.tape import GradientTape

__all__ = ["backward", "grad", "GradientTape", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "inference_mode", "Function", "FunctionCtx", "once_differentiable",
           "gradcheck", "gradgradcheck"]
