"""`torch.nn.utils`: loom.nn.utils under PyTorch's name (clip_grad_norm_, rnn, ...)."""
from loom.torch._forward import install as _install
from loom.torch.nn.utils import prune, rnn  # noqa: F401

_install(globals(), "loom.nn.utils")
