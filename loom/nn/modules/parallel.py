"""DataParallel: PyTorch's single-process multi-GPU wrapper. loom places work itself (see
`loom.distributed`), so the wrapper runs its module directly and only keeps PyTorch's interface
(`.module`, the `module.` state_dict prefix)."""
from __future__ import annotations

from loom.nn.module import Module


class DataParallel(Module):
    """Run `module` as is; programs written for `nn.DataParallel` work unchanged.

    Examples
    --------
    >>> net = loom.nn.DataParallel(loom.nn.Linear(3, 2))
    >>> net(loom.randn(4, 3)).shape, list(net.state_dict())
    (loom.Size([4, 2]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids = [] if device_ids is None else list(device_ids)
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
