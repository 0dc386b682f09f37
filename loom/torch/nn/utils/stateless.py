"""`torch.nn.utils.stateless`: `loom.nn.utils.stateless` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.stateless")
