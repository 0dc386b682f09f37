"""`torch.version`: which PyTorch release loom.torch follows, and no CUDA/ROCm."""
# The PyTorch release whose semantics loom.torch follows, in PEP 440 form so version checks parse it.
__version__ = "2.13.0+loom"

cuda = None
hip = None
xpu = None
debug = False
git_version = "loom"
