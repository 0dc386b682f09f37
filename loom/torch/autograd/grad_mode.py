"""`torch.autograd.grad_mode`: `loom.autograd.grad_mode` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.autograd.grad_mode")
