"""`torch.nn.parallel.distributed`: loom's DistributedDataParallel (over loom.distributed)."""
from loom.nn.parallel.distributed import DistributedDataParallel  # noqa: F401

__all__ = ["DistributedDataParallel"]
