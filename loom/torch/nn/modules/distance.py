"""`torch.nn.modules.distance`: the names of loom.nn.modules.distance."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.distance")
