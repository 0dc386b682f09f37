"""`torch.nn.modules.transformer`: the names of loom.nn.modules.transformer."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.transformer")
