"""`torch.nn.utils.prune`: pruning by masks (loom.nn.utils.prune)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.prune")
