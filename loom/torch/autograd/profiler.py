"""`torch.autograd.profiler`: the legacy profiler names over `loom.profiler` (`profile`, `record_function`)."""
from loom.profiler import profile, record_function  # noqa: F401

__all__ = ["profile", "record_function"]
