"""`torch.linalg`: `loom.linalg` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.linalg")
