"""`torch.nn.modules.dropout`: the names of loom.nn.modules.dropout."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.dropout")
