"""`torch.nn.modules.container`: the names of loom.nn.modules.container."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.container")
