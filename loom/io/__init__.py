"""Reading and writing: crash-safe checkpoints in the safetensors format."""
from loom.io.checkpoint import load, save

__all__ = ["save", "load"]
