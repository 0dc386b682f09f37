"""`torch.optim.optimizer`: the Optimizer base class."""
from loom.torch._forward import install as _install

_install(globals(), "loom.optim.optimizer")
