"""`torch.nn.modules.padding`: the names of loom.nn.modules.padding."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.padding")
