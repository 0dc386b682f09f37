"""`torch.nn.modules.upsampling`: the names of loom.nn.modules.upsampling."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.upsampling")
