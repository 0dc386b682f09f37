"""`torch.nn.modules.adaptive`: the names of loom.nn.modules.adaptive."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.adaptive")
