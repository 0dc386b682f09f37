"""`torch.nn.utils.clip_grad`: `loom.nn.utils.clip_grad` under PyTorch's module name (importable under the runner)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.clip_grad")
