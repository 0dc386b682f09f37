"""`torch.utils.data`: loom.data (datasets, samplers, DataLoader) under PyTorch's name."""
from loom.torch._forward import install as _install
from loom.torch.utils.data import dataloader, dataset, distributed, sampler  # noqa: F401
from loom.torch.utils.data.distributed import DistributedSampler  # noqa: F401

_install(globals(), "loom.data")
