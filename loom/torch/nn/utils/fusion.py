"""`torch.nn.utils.fusion`: `loom.nn.utils.fusion` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.fusion")
