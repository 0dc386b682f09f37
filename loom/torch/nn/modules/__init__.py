"""`torch.nn.modules`: PyTorch's module files (`torch.nn.modules.loss`, `.batchnorm`, ...) over loom.nn's.

Library code imports base classes by their file (`from torch.nn.modules.batchnorm import _BatchNorm`);
each submodule here forwards to the loom.nn file with that job.
"""
from loom.torch._forward import install as _install

_FILES = ("module", "linear", "conv", "batchnorm", "normalization", "instancenorm", "activation", "loss",
          "container", "dropout", "pooling", "rnn", "transformer", "sparse", "padding", "flatten", "fold",
          "pixelshuffle", "upsampling", "distance", "adaptive", "lazy", "utils")

_install(globals(), "loom.nn.modules", lazy={name: f"loom.torch.nn.modules.{name}" for name in _FILES})
