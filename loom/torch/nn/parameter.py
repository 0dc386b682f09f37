"""`torch.nn.parameter`: Parameter and Buffer."""
from loom.nn.parameter import Buffer, Parameter  # noqa: F401
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.parameter", "loom.nn.modules.lazy")
