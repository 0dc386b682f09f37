"""`torch.nn.utils.weight_norm`: `loom.nn.utils.weight_norm` under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.weight_norm")
