"""`torch.utils.data._utils.collate`: loom.data's default_collate and default_convert."""
from loom.torch._forward import install as _install

_install(globals(), "loom.data")
