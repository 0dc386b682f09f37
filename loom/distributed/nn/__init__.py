"""Differentiable collectives, as ``torch.distributed.nn``: see `loom.distributed.nn.functional`."""
from loom.distributed.nn import functional  # noqa: F401

__all__ = ["functional"]
