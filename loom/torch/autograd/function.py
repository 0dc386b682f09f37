"""`torch.autograd.function`: `loom.autograd.function` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.autograd.function")
