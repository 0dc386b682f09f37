"""`torch.nn.parallel.distributed`: DistributedDataParallel."""
from __future__ import annotations

from loom.errors import LoomError
from loom.nn import Module


class DistributedDataParallel(Module):
    """`nn.parallel.DistributedDataParallel`: needs a process group, which loom.distributed does not provide yet.

    Constructing one raises loom's error; single-process scripts that only
    import it, or guard its use with `dist.is_initialized()`, run unchanged.
    """

    def __init__(self, module: Module, *args, **kwargs) -> None:
        from loom.torch import distributed
        if not distributed.is_initialized():
            raise LoomError("loom.torch.nn.parallel.DistributedDataParallel: there is no process group "
                            "(loom.distributed is not available yet); train on one process without the "
                            "wrapper, or with nn.DataParallel")
        super().__init__()
        self.module = module

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
