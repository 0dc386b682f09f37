"""`torch.utils.checkpoint`: activation checkpointing, from loom's own module for it."""
from loom.torch._forward import install as _install

_install(globals(), "loom.utils.checkpoint", "loom.nn.utils.checkpoint")
