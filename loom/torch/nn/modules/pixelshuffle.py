"""`torch.nn.modules.pixelshuffle`: the names of loom.nn.modules.pixelshuffle."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.pixelshuffle")
