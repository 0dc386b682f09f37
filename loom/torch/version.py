"""`torch.version`: which PyTorch release loom.torch follows, and no CUDA/ROCm."""
from loom.torch import __version__  # noqa: F401

cuda = None
hip = None
xpu = None
debug = False
git_version = "loom"
