"""`torch.nn.modules.pooling`: the names of loom.nn.modules.pooling."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.pooling")
