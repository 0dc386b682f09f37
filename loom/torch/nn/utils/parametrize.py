"""`torch.nn.utils.parametrize`: `loom.nn.utils.parametrize` under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.parametrize")
