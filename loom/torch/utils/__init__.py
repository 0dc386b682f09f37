"""`torch.utils`: `data` (loom.data), `checkpoint` and `hooks`."""
from loom.torch.utils import checkpoint, data, hooks  # noqa: F401
