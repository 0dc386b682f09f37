"""`torch.distributed.optim`: `ZeroRedundancyOptimizer` (`loom.distributed.optim`) under PyTorch's name."""
from loom.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

__all__ = ["ZeroRedundancyOptimizer"]
