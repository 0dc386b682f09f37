"""`torch.utils.data.dataset`: loom.data.dataset under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.data.dataset", "loom.data")
