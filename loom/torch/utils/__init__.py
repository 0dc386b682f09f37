"""`torch.utils`: `data` (loom.data) and `checkpoint`."""
from loom.torch.utils import checkpoint, data  # noqa: F401
