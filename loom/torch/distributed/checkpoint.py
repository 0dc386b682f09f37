"""`torch.distributed.checkpoint`: `loom.distributed.checkpoint` under PyTorch's name."""
from loom.distributed.checkpoint import *  # noqa: F401,F403
from loom.distributed.checkpoint import __all__  # noqa: F401
