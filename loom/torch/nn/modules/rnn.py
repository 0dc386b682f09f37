"""`torch.nn.modules.rnn`: the names of loom.nn.modules.rnn."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.modules.rnn")
