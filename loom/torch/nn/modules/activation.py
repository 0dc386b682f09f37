"""`torch.nn.modules.activation`: the names of loom.nn.modules.activation."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.activation")
