"""Reading and writing: crash-safe checkpoints in the safetensors format, and PyTorch's zip format."""
from loom.io.checkpoint import load, save
from loom.io.torch_format import torch_load, torch_save

__all__ = ["save", "load", "torch_save", "torch_load"]
