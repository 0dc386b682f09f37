"""loom.utils: PyTorch's `torch.utils` spellings (`loom.utils.data` is `loom.data`)."""
from loom.utils import checkpoint, data  # noqa: F401
