"""`torch.nn.modules.normalization`: the names of loom.nn.modules.norm."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.norm")
