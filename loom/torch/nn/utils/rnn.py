"""`torch.nn.utils.rnn`: packing and padding sequences (loom.nn.utils.rnn)."""
from loom.torch._forward import install as _install

_install(globals(), "loom.nn.utils.rnn")
