"""`torch.optim`: loom.optim under PyTorch's name."""
from loom.torch._forward import install as _install
from loom.torch.optim import lr_scheduler, optimizer, swa_utils  # noqa: F401

_install(globals(), "loom.optim")
