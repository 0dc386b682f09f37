"""`torch.nn.functional`: loom.nn.functional under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.functional")
