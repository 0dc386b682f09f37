"""`torch.nn.functional`: loom.nn.functional under PyTorch's name.

An in-place name with no function of its own (`F.selu_`) writes the out-of-place op's result into its input.
"""
import loom.nn.functional as _F
from loom.tensor import Tensor  # noqa: F401  (PyTorch's functional module exports it)
from loom.torch._forward import install as _install

# The integer codes `torch.grid_sampler` takes for grid_sample's modes (loom.grid_sampler reads the same).
GRID_SAMPLE_INTERPOLATION_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
GRID_SAMPLE_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


def _fallback(name: str):
    if name.endswith("_") and not name.startswith("_"):
        from loom.torch._forward import inplace_from
        return inplace_from(name, _F)
    raise AttributeError(name)


_install(globals(), "loom.nn.functional", fallback=_fallback)
