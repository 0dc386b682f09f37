"""`torch.nn.modules.sparse`: the names of loom.nn.modules.sparse."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.sparse")
