"""`torch.optim.adam`: loom's optimizers under PyTorch's module name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.optim")
