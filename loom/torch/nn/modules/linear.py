"""`torch.nn.modules.linear`: the names of loom.nn.modules.linear."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.linear")
