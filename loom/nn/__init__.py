"""Neural-network building blocks. `loom.nn.functional` holds the PyTorch-named ops."""
from loom.nn import functional

__all__ = ["functional"]
