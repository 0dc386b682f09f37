"""`torch.nn.init`: loom.nn.init under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.init")
