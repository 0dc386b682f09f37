"""`torch.nn.utils.convert_parameters`: `loom.nn.utils.convert_parameters` under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.convert_parameters")
