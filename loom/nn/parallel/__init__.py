"""Parallel wrappers for modules, as ``torch.nn.parallel``: `DistributedDataParallel` over `loom.distributed`."""
from loom.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
