"""`torch.nn.modules.fold`: the names of loom.nn.modules.fold."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.fold")
