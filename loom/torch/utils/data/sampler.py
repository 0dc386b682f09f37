"""`torch.utils.data.sampler`: loom.data.sampler under PyTorch's name."""
from loom.torch._forward import install as _install

_install(globals(), "loom.data.sampler", "loom.data")
