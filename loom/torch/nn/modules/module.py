"""`torch.nn.modules.module`: the names of loom.nn.module."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.module")
