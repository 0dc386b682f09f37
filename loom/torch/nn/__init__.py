"""`torch.nn`: loom.nn under PyTorch's name, plus `nn.parallel` (DataParallel, DistributedDataParallel)."""
from loom.nn import Module, Parameter  # noqa: F401
from loom.torch._forward import install as _install
from loom.torch.nn import attention, functional, init, modules, parallel, parameter, utils  # noqa: F401
from loom.torch.nn.parallel import DataParallel  # noqa: F401
from loom.torch.nn.parallel.distributed import DistributedDataParallel  # noqa: F401

_install(globals(), "loom.nn")
