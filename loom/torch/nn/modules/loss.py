"""`torch.nn.modules.loss`: the names of loom.nn.modules.loss."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.loss")
