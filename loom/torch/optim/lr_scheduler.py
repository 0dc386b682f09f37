"""`torch.optim.lr_scheduler`: loom.optim.lr_scheduler under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.optim.lr_scheduler")
