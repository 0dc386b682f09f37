"""`torch.nn.parallel`: DataParallel runs the module as it is on the cpu; DistributedDataParallel needs a
process group, which loom.distributed does not provide yet."""
from __future__ import annotations

from loom.nn import Module
from loom.torch.nn.parallel import distributed  # noqa: F401
from loom.torch.nn.parallel.distributed import DistributedDataParallel  # noqa: F401


class DataParallel(Module):
    """`nn.DataParallel(module)`: with no GPUs PyTorch runs `module` unchanged, and so does this wrapper.

    The wrapped module is `self.module`, so state_dict keys carry PyTorch's
    "module." prefix.

    Examples
    --------
    >>> import loom.torch as torch
    >>> net = torch.nn.DataParallel(torch.nn.Linear(2, 3))
    >>> net(torch.ones(4, 2)).shape, list(net.state_dict())
    (torch.Size([4, 3]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids: list = []
        self.output_device = None
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module: Module, inputs, device_ids=None, output_device=None, dim: int = 0, module_kwargs=None):
    """The functional DataParallel: `module(*inputs)` on the cpu."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return module(*inputs, **(module_kwargs or {}))
