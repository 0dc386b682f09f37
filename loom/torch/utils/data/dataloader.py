"""`torch.utils.data.dataloader`: loom.data.dataloader under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.data.dataloader", "loom.data")
