"""`torch.utils.data.distributed`: DistributedSampler, one replica's share of a dataset.

It is `loom.data.DistributedSampler`: `num_replicas` and `rank` default to the
process group's, as in PyTorch.
"""
from loom.data.distributed import DistributedSampler  # noqa: F401

__all__ = ["DistributedSampler"]
