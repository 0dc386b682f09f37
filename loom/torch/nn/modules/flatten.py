"""`torch.nn.modules.flatten`: the names of loom.nn.modules.flatten."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.flatten")
