"""`torch.nn.modules.lazy`: the names of loom.nn.modules.lazy."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.lazy")
