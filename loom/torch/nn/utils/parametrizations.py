"""`torch.nn.utils.parametrizations`: `loom.nn.utils.parametrizations` under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.parametrizations")
