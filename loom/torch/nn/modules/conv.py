"""`torch.nn.modules.conv`: the names of loom.nn.modules.conv."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.conv")
